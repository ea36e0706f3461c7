"""Running sessions: one named driver task per working session (part of :class:`Fleet`).

A driver rebuilds the session's message history from the store, builds its agent, runs it
to the end of a run and maps the outcome to a session state. Each agent event is stored
(all but the per-token pieces), counted into the session's token stats, mapped to a state,
and re-emitted as ``SessionAgentEvent``. Before a tool runs (``ToolCallStarted``) everything
queued is committed, so after a crash the tool is known to have started and is reported as
interrupted instead of being run again; a model turn that was in flight is simply missing
from the history and is retried.

Pausing or stopping cancels the driver: the same path as a crash, so resume has one meaning.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from workstation.core import agent_events as ev
from workstation.core.approvals import ApprovalDecision, ApprovalRequest
from workstation.core.errors import UserError
from workstation.core.fleet_events import SessionAgentEvent, SessionStatsChanged, SessionSummary
from workstation.core.session_state import SessionState as S
from workstation.fleet.agent_bridge import AgentSetup, build_agent, meta_of
from workstation.fleet.engine_watch import endpoint_alive
from workstation.fleet.event_codec import decode, encode, history_from_events, is_stored
from workstation.fleet.session import SessionRecord, TokenRate

if TYPE_CHECKING:
    from workstation.fleet.service import Fleet

log = logging.getLogger(__name__)

STATS_INTERVAL_S = 0.5

_AGENT_TO_SESSION = {
    ev.AgentState.GENERATING: S.RUNNING,
    ev.AgentState.RUNNING_TOOL: S.RUNNING,
    ev.AgentState.AWAITING_APPROVAL: S.AWAITING_APPROVAL,
    ev.AgentState.NEEDS_INPUT: S.NEEDS_INPUT,
}
_STREAMED = (ev.TextStreamed, ev.ReasoningStreamed, ev.ToolCallStreamed)


class _Drive:
    __slots__ = ("task", "agent", "token")

    def __init__(self, token: int) -> None:
        self.task: asyncio.Task[None] | None = None
        self.agent: Any = None
        self.token = token


class SessionDriver:
    """The running half of :class:`workstation.fleet.service.Fleet`."""

    def __init__(self) -> None:
        self._drives: dict[str, _Drive] = {}
        self._tokens = itertools.count(1)
        self._approvals: dict[tuple[str, str], tuple[ApprovalRequest, asyncio.Future[ApprovalDecision]]] = {}
        self._rates: dict[str, TokenRate] = {}
        self._stats_dirty: set[str] = set()
        self._ticker: asyncio.Task[None] | None = None

    # ----- driver tasks -----
    def _launch(self: Fleet, session_id: str, message: str | None) -> None:
        rec = self._records[session_id]
        drive = _Drive(next(self._tokens))
        self._drives[session_id] = drive
        drive.task = asyncio.create_task(self._drive(session_id, drive, message),
                                         name=f"fleet-session-{rec.name}")
        self._set_state(session_id, S.QUEUED, "starting")
        self._update_settled()

    def _driver_alive(self: Fleet, session_id: str) -> bool:
        drive = self._drives.get(session_id)
        return drive is not None and drive.task is not None and not drive.task.done()

    def _any_driver_alive(self: Fleet) -> bool:
        return any(d.task is not None and not d.task.done() for d in self._drives.values())

    async def _end_driver(self: Fleet, session_id: str) -> None:
        """Cancel a session's driver and wait until its agent has wound down."""
        drive = self._drives.get(session_id)
        if drive is None or drive.task is None:
            return
        for (sid, _rid), (_req, fut) in list(self._approvals.items()):
            if sid == session_id and not fut.done():
                fut.cancel()
        drive.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await drive.task
        if self._drives.get(session_id) is drive:
            del self._drives[session_id]
        await self.store.flush()

    async def _cancel_all_drivers(self: Fleet) -> None:
        drives = list(self._drives.items())
        for _sid, drive in drives:
            if drive.task is not None:
                drive.task.cancel()
        for _sid, drive in drives:
            if drive.task is not None:
                with contextlib.suppress(asyncio.CancelledError):
                    await drive.task
        self._drives.clear()

    async def _drive(self: Fleet, session_id: str, drive: _Drive, message: str | None) -> None:
        rec = self._records[session_id]
        last_finish: list[ev.RunFinished] = []
        endpoint = self.router.assign(session_id, pinned=rec.spec.endpoint, previous=rec.endpoint_name)
        if endpoint.name != rec.endpoint_name:
            rec.endpoint_name = endpoint.name
            self.store.queue_update(session_id, endpoint_name=endpoint.name)
        status: ev.RunStatus
        try:
            history = await self._history(session_id)

            def on_event(event: object) -> None:
                # a driver that was replaced never writes into its successor's transcript
                if drive.token == self._drives.get(session_id, drive).token:
                    if isinstance(event, ev.RunFinished):
                        last_finish.append(event)
                    self._on_agent_event(session_id, event)

            setup = AgentSetup(
                session_id=session_id, name=rec.name, root=Path(rec.worktree_path), task=rec.spec.task,
                spec=rec.spec, endpoint=endpoint, history=history, user_message=message,
                on_event=on_event,
                approver=None if rec.spec.headless else self._approver_for(session_id),
                generation_slot=self.gate.factory(session_id),
                agent_meta=dict(rec.agent_meta),
            )
            drive.agent = await build_agent(self._factory, setup)
            try:
                result = await drive.agent.run()
            finally:
                self._keep_meta(session_id, drive.agent)
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
        if status is ev.RunStatus.FAILED:
            current = self.router.get(endpoint.name)
            if current != endpoint and not self._closing:  # the engine moved meanwhile: go on there
                self._drives.pop(session_id, None)
                self._launch(session_id, None)
                return
            if not await endpoint_alive(self.http, current):
                self._set_state(session_id, S.ENGINE_WAIT,
                                f"engine {endpoint.name} is not answering; continues when it is back")
                self._drives.pop(session_id, None)
                self.watcher.watch(endpoint.name)
                self._update_settled()
                return
        new = {
            ev.RunStatus.COMPLETED: S.DONE,
            ev.RunStatus.NEEDS_INPUT: S.NEEDS_INPUT,
            ev.RunStatus.STOPPED: S.STOPPED,
            ev.RunStatus.BUDGET_EXHAUSTED: S.FAILED,
            ev.RunStatus.FAILED: S.FAILED,
        }[status]
        self._drives.pop(session_id, None)
        # the run's outcome always applies (a resumed run may end before it generated at all)
        self._set_state(session_id, new, text or status.value, force=True)
        self._update_settled()  # also when the agent had already announced this state

    async def _history(self: Fleet, session_id: str) -> list[dict[str, Any]]:
        rows = await self.store.load_events(session_id)
        events = [decode(r.kind, r.payload) for r in rows if r.kind in ("MessageAppended", "HistoryReplaced")]
        return history_from_events(e for e in events if e is not None)

    def _keep_meta(self: Fleet, session_id: str, agent: object) -> None:
        rec = self._records.get(session_id)
        meta = meta_of(agent)
        if rec is not None and meta is not None:
            rec.agent_meta = meta
            self.store.queue_update(session_id, agent_meta=meta)

    def _note_meta(self: Fleet, rec: SessionRecord, key: str, value: Any) -> None:
        if rec.agent_meta.get(key) != value:
            rec.agent_meta[key] = value
            self.store.queue_update(rec.session_id, agent_meta=dict(rec.agent_meta))

    # ----- approvals -----
    def _approver_for(self: Fleet, session_id: str):  # type: ignore[no-untyped-def]
        async def approve(request: ApprovalRequest) -> ApprovalDecision:
            fut: asyncio.Future[ApprovalDecision] = asyncio.get_running_loop().create_future()
            key = (session_id, request.request_id)
            self._approvals[key] = (request, fut)
            self._set_state(session_id, S.AWAITING_APPROVAL, request.summary)
            try:
                return await fut
            finally:
                self._approvals.pop(key, None)
                if not fut.cancelled():
                    self._set_state(session_id, S.RUNNING, "approval answered")

        return approve

    # ----- events -----
    def _on_agent_event(self: Fleet, session_id: str, event: object) -> None:
        rec = self._records.get(session_id)
        if rec is None:
            return
        if is_stored(event):
            kind, body = encode(event)
            seq = self.store.append_event(session_id, kind, body)
        else:
            seq = self.store.last_seq(session_id)
        if isinstance(event, ev.ToolCallStarted):
            self.store.commit_now()
        elif isinstance(event, _STREAMED):
            self._rates.setdefault(session_id, TokenRate()).add(1)
            self._stats_dirty.add(session_id)
        elif isinstance(event, ev.UsageReported):
            rec.prompt_tokens += event.prompt_tokens
            rec.completion_tokens += event.completion_tokens
            rec.cached_tokens += event.cached_tokens
            self.store.queue_update(session_id, prompt_tokens=rec.prompt_tokens,
                                    completion_tokens=rec.completion_tokens,
                                    cached_tokens=rec.cached_tokens)
            self._stats_dirty.add(session_id)
        elif isinstance(event, ev.AgentStateChanged):
            new = _AGENT_TO_SESSION.get(event.new)
            if new is not None:
                self._set_state(session_id, new, event.detail or event.new.value)
        elif isinstance(event, ev.CheckpointCreated):
            self.store.queue_checkpoint(session_id, event.commit, event_seq=seq, label=event.label)
        elif isinstance(event, ev.TurnFinished) and event.finish_reason != "error":
            self._note_meta(rec, "turns", event.turn)
        elif isinstance(event, ev.ProtocolSelected):
            self._note_meta(rec, "protocol", event.protocol.value)
        elif isinstance(event, ev.ModeChanged):
            self._note_meta(rec, "mode", event.mode.value)
        self.agent_event.emit(SessionAgentEvent(session_id, seq, event))

    # ----- stats -----
    def _summary(self: Fleet, rec: SessionRecord) -> SessionSummary:
        rate = self._rates.get(rec.session_id)
        return rec.summary(rate.rate() if rate is not None else 0.0)

    def tokens_per_s(self: Fleet, session_id: str) -> float:
        rate = self._rates.get(session_id)
        return rate.rate() if rate is not None else 0.0

    def _start_ticker(self: Fleet) -> None:
        self._ticker = asyncio.create_task(self._tick(), name="fleet-stats-ticker")

    async def _stop_ticker(self: Fleet) -> None:
        if self._ticker is not None:
            self._ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._ticker
            self._ticker = None

    async def _tick(self: Fleet) -> None:
        quiet_reported: set[str] = set()
        while True:
            await asyncio.sleep(STATS_INTERVAL_S)
            for sid, rate in list(self._rates.items()):
                rec = self._records.get(sid)
                if rec is None:
                    self._rates.pop(sid, None)
                    continue
                tps = rate.rate()
                if sid not in self._stats_dirty and tps == 0 and sid in quiet_reported:
                    continue
                if tps == 0:
                    quiet_reported.add(sid)
                else:
                    quiet_reported.discard(sid)
                self._stats_dirty.discard(sid)
                self.changed.emit(SessionStatsChanged(sid, rec.prompt_tokens, rec.completion_tokens,
                                                      rec.cached_tokens, tps))


def _outcome(result: object, finished: list[ev.RunFinished]) -> tuple[ev.RunStatus, str]:
    status = getattr(result, "status", None)
    if isinstance(status, ev.RunStatus):
        return status, str(getattr(result, "message", "") or "")
    if isinstance(result, ev.RunStatus):
        return result, finished[-1].message if finished else ""
    if finished:
        return finished[-1].status, finished[-1].message
    return ev.RunStatus.FAILED, "the agent ended without saying why"

