"""Generation slots as an async context manager per model turn.

``async with gate.slot(session_id): <stream one model turn>`` — admitted at once while
fewer than ``cap`` sessions generate and the session's engine is under its limit, otherwise
waits its turn in :class:`workstation.core.admission.AdmissionQueue` (priorities, per-engine
limits, nothing starves). Before a session is queued ``check(session_id)`` may refuse it
(:class:`~workstation.core.admission.SlotRefused`: its budget is used up, its engine was
drained); a waiter can be refused later too (:meth:`refuse`). Cancelling a waiter (pause,
stop) leaves the queue consistent: a slot it was handed in the meantime passes on.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from workstation.core.admission import AdmissionQueue, Priority, SlotRefused


class GenerationGate:
    def __init__(
        self,
        cap: int,
        *,
        on_change: Callable[[int, int, int], None] | None = None,
        on_wait: Callable[[str], None] | None = None,
        on_admit: Callable[[str, bool], None] | None = None,
        group_of: Callable[[str], str] | None = None,
        priority_of: Callable[[str], Priority] | None = None,
        check: Callable[[str], None] | None = None,
    ) -> None:
        """``on_change(generating, waiting, cap)`` after every change; ``on_wait(sid)`` when a
        session starts waiting; ``on_admit(sid, waited)`` when it gets its slot;
        ``group_of(sid)``: the engine it generates on; ``priority_of(sid)``: its priority
        now; ``check(sid)`` raises ``SlotRefused`` to hold its next turn back."""
        self._queue: AdmissionQueue[str] = AdmissionQueue(cap)
        self._waiters: dict[str, asyncio.Future[None]] = {}
        self._on_change = on_change
        self._on_wait = on_wait
        self._on_admit = on_admit
        self._group_of = group_of or (lambda sid: "")
        self._priority_of = priority_of or (lambda sid: Priority.NORMAL)
        self._check = check
        self.peak_generating = 0

    @property
    def queue(self) -> AdmissionQueue[str]:
        """The rules' state (read-only use: who holds, who waits, why)."""
        return self._queue

    @property
    def cap(self) -> int:
        return self._queue.cap

    @property
    def generating(self) -> int:
        return len(self._queue.holding)

    @property
    def waiting(self) -> int:
        return len(self._queue.waiting)

    def reset_peak(self) -> None:
        """Start measuring ``peak_generating`` afresh (e.g. for a new run)."""
        self.peak_generating = self.generating

    def set_cap(self, cap: int) -> None:
        self._wake(self._queue.set_cap(cap))
        self._changed()

    def set_limit(self, group: str, limit: int | None) -> None:
        """An engine's own limit (adaptive admission); None: only the cap."""
        if self._queue.limit(group) == limit:
            return
        self._wake(self._queue.set_limit(group, limit))
        self._changed()

    def reprioritize(self, session_id: str) -> None:
        """A waiter's priority may have changed (focus, an answer, the background mark)."""
        self._wake(self._queue.reprioritize(session_id, self._priority_of(session_id)))

    def refuse(self, session_id: str, reason: SlotRefused) -> bool:
        """Wake a waiter with ``reason`` instead of a slot; False when it does not wait."""
        fut = self._waiters.pop(session_id, None)
        if fut is None or fut.done():
            return False
        fut.set_exception(reason)
        self._wake(self._queue.release(session_id))
        self._changed()
        return True

    def waiting_ids(self) -> tuple[str, ...]:
        return self._queue.waiting

    @asynccontextmanager
    async def slot(self, session_id: str) -> AsyncIterator[None]:
        if self._queue.holds(session_id):  # re-entrant: one turn inside another holds one slot
            yield
            return
        if self._check is not None:
            self._check(session_id)
        await self._acquire(session_id)
        try:
            yield
        finally:
            self._release(session_id)

    def factory(self, session_id: str) -> Callable[[], object]:
        """A zero-argument slot factory for one session (the agent's ``generation_slot``)."""
        return lambda: self.slot(session_id)

    async def _acquire(self, session_id: str) -> None:
        group, priority = self._group_of(session_id), self._priority_of(session_id)
        if self._queue.request(session_id, group=group, priority=priority):
            self._admitted(session_id, waited=False)
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters[session_id] = fut
        if self._on_wait is not None:
            self._on_wait(session_id)
        self._changed()
        try:
            await fut
        except SlotRefused:
            raise
        except BaseException:
            self._waiters.pop(session_id, None)
            self._release(session_id)
            raise

    def _release(self, session_id: str) -> None:
        self._wake(self._queue.release(session_id))
        self._changed()

    def _wake(self, admitted: list[str]) -> None:
        for sid in admitted:
            fut = self._waiters.pop(sid, None)
            if fut is not None and not fut.done():
                fut.set_result(None)
                self._admitted(sid, waited=True)
            else:  # its waiter is gone: pass the slot on
                self._wake(self._queue.release(sid))

    def _admitted(self, session_id: str, *, waited: bool) -> None:
        self.peak_generating = max(self.peak_generating, self.generating)
        if self._on_admit is not None:
            self._on_admit(session_id, waited)
        self._changed()

    def _changed(self) -> None:
        if self._on_change is not None:
            self._on_change(self.generating, self.waiting, self.cap)
