"""The commands that move a session between working and resting: start (or continue with a
message), reply, pause, stop, and the "all" forms. It owns the checks a command passes
before a driver is launched or ended — a message to a session that is working goes to its
agent (sent before its next model turn), and where it cannot (the run starts or winds
down) it is refused in words, never dropped; a session being prepared, without its
worktree, waiting for its engine or over its budget does not start — and the one way a
driver is launched or ended (``launch``, ``end_driver``), which the failover and the runner
relaunch through. Kept apart from the fleet's façade, which delegates here.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from workstation.agent.images import load_images
from workstation.core.errors import UserError
from workstation.core.session_state import SessionState as S, check_transition
from workstation.fleet.admission import Admission
from workstation.fleet.approval_desk import ApprovalDesk
from workstation.fleet.book import SessionBook
from workstation.fleet.costs import SessionCosts
from workstation.fleet.dev_server import DevServers
from workstation.fleet.driver import DriverRegistry, SessionRunner
from workstation.fleet.merge_desk import MergeDesk
from workstation.fleet.store import Store


class SessionLifecycle:
    def __init__(self, *, book: SessionBook, store: Store, drivers: DriverRegistry, runner: SessionRunner,
                 desk: ApprovalDesk, merges: MergeDesk, servers: DevServers, costs: SessionCosts,
                 admission: Admission, require_open: Callable[[], None], settle: Callable[[], None]) -> None:
        """``require_open``: raises while the fleet is not running; ``settle``: recounts whether
        the fleet is settled (a driver launched)."""
        self._book = book
        self._store = store
        self._drivers = drivers
        self._runner = runner
        self._desk = desk
        self._merges = merges
        self._servers = servers
        self._costs = costs
        self._admission = admission
        self._require_open = require_open
        self._settle = settle

    def launch(self, session_id: str, message: str | None, images: tuple[str, ...] = ()) -> None:
        """Launch the session's driver now (no checks: the caller made them)."""
        rec = self._book.rec(session_id)
        self._merges.working_again(session_id)
        self._drivers.launch(session_id, rec.name,
                             lambda drive: self._runner.run(session_id, drive, message, images))
        self._book.set_state(session_id, S.QUEUED, "starting")
        self._settle()

    async def end_driver(self, session_id: str) -> None:
        """Cancel a session's driver (withdrawing its approvals) and wait until its agent has
        wound down; what it queued is then on disk."""
        self._desk.withdraw(session_id)
        if await self._drivers.end(session_id):
            await self._store.flush()

    async def start_session(self, session_id: str, *, message: str | None = None,
                            images: tuple[str, ...] = ()) -> None:
        """Start (or continue) a session: ready, paused, stopped, failed, done, needs input."""
        self._require_open()
        rec = self._book.rec(session_id)
        if self._drivers.alive(session_id):
            if message is None:
                return
            agent = self._drivers.agent(session_id)
            if agent is not None and getattr(agent, "takes_messages", False):
                agent.reply(message, load_images(images))  # type: ignore[attr-defined]  # before its next turn
                return
            # never dropped in silence: the user keeps the text and is told
            when = "winding down" if rec.state is S.NEEDS_INPUT or rec.state.is_finished else "starting"
            raise UserError(f"{rec.name} is still {when}: the message was not sent; try again in a moment")
        if rec.state is S.PREPARING:
            raise UserError(f"{rec.name} is still being prepared")
        if not Path(rec.worktree_path).is_dir():
            raise UserError(f"the worktree of {rec.name} is gone ({rec.worktree_path})",
                            hint="remove the session and create it again")
        if rec.state is S.ENGINE_WAIT:
            if message is not None:
                raise UserError(f"{rec.name} waits for its engine: the message was not sent",
                                hint="send it when the engine is back")
            return  # continues by itself when the engine is back
        reached = self._costs.budget_reached(rec)
        if reached is not None:
            raise UserError(f"{rec.name}: {reached}", hint="raise or clear its budget to continue")
        check_transition(rec.state, S.QUEUED)
        self.launch(session_id, message, images)

    async def start_all(self) -> None:
        for rec in self._book.records():
            if rec.state in (S.READY, S.PAUSED, S.STOPPED):
                await self.start_session(rec.session_id)

    async def reply(self, session_id: str, text: str, images: tuple[str, ...] = ()) -> None:
        """Answer a session that needs input (or give a finished one a follow-up task)."""
        if not text.strip():
            raise UserError("the reply is empty")
        self._admission.answered(session_id)
        await self.start_session(session_id, message=text, images=tuple(images))

    async def pause(self, session_id: str) -> None:
        """Pause now; an in-flight model turn is dropped (retried on resume), a running tool is
        interrupted (reported to the model as interrupted, never run again)."""
        rec = self._book.rec(session_id)
        if rec.state in (S.PAUSED, S.READY) or rec.state.is_finished:
            return
        await self.end_driver(session_id)
        self._book.set_state(session_id, S.PAUSED, "paused by the user")

    async def pause_all(self) -> None:
        """Pause every working session; those waiting for a person keep waiting (pausing
        them would hide that they need you, and they use no engine while they wait)."""
        for rec in self._book.records():
            if rec.state.is_active and not rec.state.wants_user:
                await self.pause(rec.session_id)

    async def stop(self, session_id: str) -> None:
        """Stop the session (and its dev server); it keeps its history and can start again."""
        rec = self._book.rec(session_id)
        await self._servers.stop(session_id)  # the dev server stops with its session
        if rec.state is S.PREPARING or rec.state.is_finished:
            return
        await self.end_driver(session_id)
        self._book.set_state(session_id, S.STOPPED, "stopped by the user")
