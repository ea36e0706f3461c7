"""Running sessions: one named driver task per working session.

:class:`DriverRegistry` owns the tasks (start, look up, end one, end all). :class:`SessionRunner`
is what a task runs: it rebuilds the session's message history from the store, builds its
agent through the agent factory, runs it to the end of a run and maps the outcome to a
session state. Its agent's events go to the fleet's event sink (``event_sink.py``).

Pausing or stopping cancels the driver: the same path as a crash, so resume has one meaning.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any

import httpx

from workstation.core import agent_events as ev
from workstation.core.endpoints import Endpoint
from workstation.core.errors import UserError
from workstation.core.session_state import SessionState as S
from workstation.fleet.agent_bridge import AgentFactory, AgentHandle, AgentSetup, Approver, build_agent, meta_of
from workstation.fleet.approval_desk import ApprovalDesk
from workstation.fleet.book import SessionBook
from workstation.fleet.costs import SessionCosts
from workstation.fleet.engine_watch import EndpointWatcher, endpoint_alive
from workstation.fleet.event_codec import decode, history_from_events
from workstation.fleet.event_sink import SessionEventSink
from workstation.fleet.failover import Failover
from workstation.fleet.gate import GenerationGate
from workstation.fleet.routing import Router
from workstation.fleet.store import Store

log = logging.getLogger(__name__)

_STATE_AFTER = {
    ev.RunStatus.COMPLETED: S.DONE,
    ev.RunStatus.NEEDS_INPUT: S.NEEDS_INPUT,
    ev.RunStatus.STOPPED: S.STOPPED,
    ev.RunStatus.BUDGET_EXHAUSTED: S.FAILED,
    ev.RunStatus.FAILED: S.FAILED,
}


class Drive:
    """One run of one session: its task, its agent while it runs (and the endpoint it was
    built on), and a token that tells a replaced drive from its successor."""

    __slots__ = ("task", "agent", "endpoint_name", "token")

    def __init__(self, token: int) -> None:
        self.task: asyncio.Task[None] | None = None
        self.agent: AgentHandle | None = None
        self.endpoint_name: str | None = None
        self.token = token


class DriverRegistry:
    def __init__(self) -> None:
        self._drives: dict[str, Drive] = {}
        self._tokens = itertools.count(1)

    def launch(self, session_id: str, name: str, run: Callable[[Drive], Coroutine[Any, Any, None]]) -> Drive:
        """Start ``run(drive)`` as the session's driver task (named after the session)."""
        drive = Drive(next(self._tokens))
        self._drives[session_id] = drive
        drive.task = asyncio.create_task(run(drive), name=f"fleet-session-{name}")
        return drive

    def alive(self, session_id: str) -> bool:
        drive = self._drives.get(session_id)
        return drive is not None and drive.task is not None and not drive.task.done()

    def any_alive(self) -> bool:
        return any(d.task is not None and not d.task.done() for d in self._drives.values())

    def agent(self, session_id: str) -> AgentHandle | None:
        drive = self._drives.get(session_id)
        return drive.agent if drive is not None else None

    def built_on(self, session_id: str) -> str | None:
        """The endpoint the session's live agent talks to (None when none runs)."""
        drive = self._drives.get(session_id)
        if drive is None or drive.task is None or drive.task.done():
            return None
        return drive.endpoint_name

    def is_current(self, session_id: str, drive: Drive) -> bool:
        """False once another drive took the session over (a replaced drive keeps quiet)."""
        return drive.token == self._drives.get(session_id, drive).token

    def release(self, session_id: str) -> None:
        """The driver is about to end by itself: forget it."""
        self._drives.pop(session_id, None)

    async def end(self, session_id: str) -> bool:
        """Cancel a session's driver and wait until its agent has wound down; False when none ran."""
        drive = self._drives.get(session_id)
        if drive is None or drive.task is None:
            return False
        drive.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await drive.task
        if self._drives.get(session_id) is drive:
            del self._drives[session_id]
        return True

    async def end_all(self) -> None:
        drives = list(self._drives.values())
        for drive in drives:
            if drive.task is not None:
                drive.task.cancel()
        for drive in drives:
            if drive.task is not None:
                with contextlib.suppress(asyncio.CancelledError):
                    await drive.task
        self._drives.clear()


class SessionRunner:
    """What a driver task runs for one session, and the agent set-up it shares with
    checkpoint restores."""

    def __init__(
        self,
        *,
        book: SessionBook,
        store: Store,
        router: Router,
        gate: GenerationGate,
        desk: ApprovalDesk,
        drivers: DriverRegistry,
        sink: SessionEventSink,
        watcher: EndpointWatcher,
        factory: AgentFactory,
        http: httpx.AsyncClient,
        relaunch: Callable[[str], None],
        closing: Callable[[], bool],
        settle: Callable[[], None],
        failover: Failover,
        costs: SessionCosts,
        command_env: Callable[[str], Awaitable[dict[str, str]]] | None = None,
    ) -> None:
        """``relaunch(session_id)`` starts the session again (its engine moved meanwhile);
        ``closing()`` says the fleet is shutting down; ``settle()`` re-checks whether the
        fleet has settled; ``command_env(session_id)`` is what the session's commands get
        besides the scrubbed environment (its ports)."""
        self._book = book
        self._store = store
        self._router = router
        self._gate = gate
        self._desk = desk
        self._drivers = drivers
        self._sink = sink
        self._watcher = watcher
        self._factory = factory
        self._http = http
        self._relaunch = relaunch
        self._closing = closing
        self._settle = settle
        self._failover = failover
        self._costs = costs
        self._command_env = command_env

    async def history(self, session_id: str) -> list[dict[str, Any]]:
        """The messages a run of the session resumes from (rebuilt from the stored transcript)."""
        rows = await self._store.load_events(session_id)
        events = [decode(r.kind, r.payload) for r in rows if r.kind in ("MessageAppended", "HistoryReplaced")]
        return history_from_events(e for e in events if e is not None)

    async def build(self, session_id: str, endpoint: Endpoint, *, message: str | None,
                    on_event: Callable[[object], None], approver: Approver | None,
                    images: tuple[str, ...] = ()) -> AgentHandle:
        """The session's agent on ``endpoint``, resuming from its history and kept state."""
        rec = self._book.rec(session_id)
        setup = AgentSetup(
            session_id=session_id, name=rec.name, root=Path(rec.worktree_path), task=rec.spec.task,
            spec=rec.spec, endpoint=endpoint, history=await self.history(session_id), user_message=message,
            on_event=on_event, approver=approver, generation_slot=self._gate.factory(session_id),
            agent_meta=dict(rec.agent_meta), user_images=images,
            command_env=await self._command_env(session_id) if self._command_env is not None else {},
        )
        return await build_agent(self._factory, setup)

    def keep_meta(self, session_id: str, agent: object) -> None:
        self._book.keep_meta(session_id, meta_of(agent))

    async def run(self, session_id: str, drive: Drive, message: str | None, images: tuple[str, ...] = ()) -> None:
        rec = self._book.rec(session_id)
        last_finish: list[ev.RunFinished] = []
        endpoint = self._router.assign(session_id, pinned=rec.spec.endpoint, previous=rec.endpoint_name)
        if endpoint.name != rec.endpoint_name:
            rec.endpoint_name = endpoint.name
            self._store.queue_update(session_id, endpoint_name=endpoint.name)
        drive.endpoint_name = endpoint.name
        status: ev.RunStatus
        try:
            def on_event(event: object) -> None:
                # a driver that was replaced never writes into its successor's transcript
                if self._drivers.is_current(session_id, drive):
                    if isinstance(event, ev.RunFinished):
                        last_finish.append(event)
                    self._sink.on_agent_event(session_id, event)

            approver = None if rec.spec.headless else self._desk.approver_for(session_id)
            drive.agent = await self.build(session_id, endpoint, message=message, on_event=on_event,
                                           approver=approver, images=images)
            try:
                result = await drive.agent.run()
            finally:
                self.keep_meta(session_id, drive.agent)
            status, text = _outcome(result, last_finish)
        except asyncio.CancelledError:
            raise
        except UserError as exc:
            status, text = ev.RunStatus.FAILED, str(exc)
        except Exception as exc:  # an agent bug must not take the fleet down
            log.exception("session %s: agent crashed", rec.name)
            status, text = ev.RunStatus.FAILED, f"agent error: {type(exc).__name__}: {exc}"
        finally:
            drive.agent = None
        if status in (ev.RunStatus.FAILED, ev.RunStatus.STOPPED) and not self._closing():
            if self._failover.moved(session_id, endpoint.name):  # drained: go on elsewhere
                self._drivers.release(session_id)
                self._relaunch(session_id)
                return
        if status is ev.RunStatus.FAILED:
            current = self._router.get(endpoint.name)
            if current != endpoint and not self._closing():  # the engine moved meanwhile: go on there
                self._drivers.release(session_id)
                self._relaunch(session_id)
                return
            if not await endpoint_alive(self._http, current):
                if self._failover.endpoint_down(endpoint.name) and self._failover.moved(session_id, endpoint.name):
                    self._drivers.release(session_id)
                    self._relaunch(session_id)
                    return
                who = "the engine" if endpoint.name == "engine" else f"engine {endpoint.name}"  # the one default name
                self._book.set_state(session_id, S.ENGINE_WAIT,
                                     f"{who} is not answering; continues when it is back")
                self._drivers.release(session_id)
                self._watcher.watch(endpoint.name)
                self._settle()
                return
        self._drivers.release(session_id)
        state = _STATE_AFTER[status]
        if status is ev.RunStatus.BUDGET_EXHAUSTED:
            reached = self._costs.budget_reached(rec)
            if reached is not None:
                state, text = S.BUDGET_REACHED, reached
        # the run's outcome always applies (a resumed run may end before it generated at all)
        self._book.set_state(session_id, state, text or status.value, force=True)
        self._settle()  # also when the agent had already announced this state


def _outcome(result: object, finished: list[ev.RunFinished]) -> tuple[ev.RunStatus, str]:
    status = getattr(result, "status", None)
    if isinstance(status, ev.RunStatus):
        return status, str(getattr(result, "message", "") or "")
    if isinstance(result, ev.RunStatus):
        return result, finished[-1].message if finished else ""
    if finished:
        return finished[-1].status, finished[-1].message
    return ev.RunStatus.FAILED, "the agent ended without saying why"
