"""The fleet's cap on sessions generating at once, as an async context manager per turn.

``async with gate.slot(session_id): <stream one model turn>`` — admitted at once while
fewer than ``cap`` sessions generate, otherwise waits its turn in the fair queue of
:class:`workstation.core.admission.AdmissionQueue`. Cancelling a waiter (pause, stop) leaves
the queue consistent: a slot it was handed in the meantime passes on to the next in line.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from workstation.core.admission import AdmissionQueue


class GenerationGate:
    def __init__(
        self,
        cap: int,
        *,
        on_change: Callable[[int, int, int], None] | None = None,
        on_wait: Callable[[str], None] | None = None,
        on_admit: Callable[[str, bool], None] | None = None,
    ) -> None:
        """``on_change(generating, waiting, cap)`` after every change; ``on_wait(sid)`` when a
        session starts waiting; ``on_admit(sid, waited)`` when it gets its slot."""
        self._queue: AdmissionQueue[str] = AdmissionQueue(cap)
        self._waiters: dict[str, asyncio.Future[None]] = {}
        self._on_change = on_change
        self._on_wait = on_wait
        self._on_admit = on_admit
        self.peak_generating = 0

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

    @asynccontextmanager
    async def slot(self, session_id: str) -> AsyncIterator[None]:
        if self._queue.holds(session_id):  # re-entrant: one turn inside another holds one slot
            yield
            return
        await self._acquire(session_id)
        try:
            yield
        finally:
            self._release(session_id)

    def factory(self, session_id: str) -> Callable[[], object]:
        """A zero-argument slot factory for one session (the agent's ``generation_slot``)."""
        return lambda: self.slot(session_id)

    async def _acquire(self, session_id: str) -> None:
        if self._queue.request(session_id):
            self._admitted(session_id, waited=False)
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters[session_id] = fut
        if self._on_wait is not None:
            self._on_wait(session_id)
        self._changed()
        try:
            await fut
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
