"""What a person changes in a session's agent between turns: its mode (plan or act) and a
restore to one of its checkpoints. Kept apart from the fleet's façade, which delegates here."""

from __future__ import annotations

from dataclasses import replace

from workstation.core.agent_events import AgentMode
from workstation.core.errors import UserError
from workstation.fleet.book import SessionBook
from workstation.fleet.driver import DriverRegistry, SessionRunner
from workstation.fleet.event_sink import SessionEventSink
from workstation.fleet.routing import Router
from workstation.fleet.store import Store


class AgentControls:
    def __init__(self, *, book: SessionBook, store: Store, drivers: DriverRegistry, runner: SessionRunner,
                 router: Router, sink: SessionEventSink) -> None:
        self._book = book
        self._store = store
        self._drivers = drivers
        self._runner = runner
        self._router = router
        self._sink = sink

    def set_mode(self, session_id: str, mode: str) -> None:
        """Switch a session between ``plan`` and ``act``; a running agent is told before its
        next turn, and the choice is kept for later runs."""
        if mode not in ("plan", "act"):
            raise UserError(f"mode must be 'plan' or 'act', not {mode!r}")
        rec = self._book.rec(session_id)
        rec.spec = replace(rec.spec, mode=mode)
        rec.agent_meta["mode"] = mode
        self._store.queue_update(session_id, spec=rec.spec, agent_meta=dict(rec.agent_meta))
        agent = self._drivers.agent(session_id)
        if agent is not None and hasattr(agent, "set_mode"):
            agent.set_mode(AgentMode(mode))

    async def restore_checkpoint(self, session_id: str, commit: str, *, files: bool = True,
                                 conversation: bool = True) -> None:
        """Restore a paused or finished session's files, conversation, or both, to a checkpoint
        (the agent does the git work; the rewritten history is stored like any other change)."""
        rec = self._book.rec(session_id)
        if rec.state.is_active or self._drivers.alive(session_id):
            raise UserError(f"{rec.name} is working; pause or stop it before restoring a checkpoint")
        agent = await self._runner.build(
            session_id, self._router.assign(session_id, previous=rec.endpoint_name), message=None,
            on_event=lambda event: self._sink.on_agent_event(session_id, event), approver=None)
        restore = getattr(agent, "restore_checkpoint", None)
        if restore is None:
            raise UserError("this session's agent cannot restore checkpoints")
        await restore(commit, files=files, conversation=conversation)
        self._runner.keep_meta(session_id, agent)
        await self._store.flush()
