"""The fleet service: many sessions, each an agent in its own worktree, persisted and resumable.

``Fleet`` is the façade the window, the verbs and the benchmarks use. It composes
collaborators that each own their state: the store, the git runner, the router and the
generation gate; the :class:`~workstation.fleet.book.SessionBook` (records and every state
change), the :class:`~workstation.fleet.approval_desk.ApprovalDesk`, the
:class:`~workstation.fleet.driver.DriverRegistry` with its
:class:`~workstation.fleet.driver.SessionRunner`, the event sink and the token stats, and the
:class:`~workstation.fleet.workspace_ops.WorkspaceOps` (review, checkpoints, orphans), the
:class:`~workstation.fleet.lifecycle.SessionLifecycle` (start, reply, pause, stop and their checks)
and the :class:`~workstation.fleet.roster.SessionRoster` (making, duplicating, removing sessions).
Commands are coroutines that return what changed and emit events; views redraw from the events.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
from psygnal import Signal

from workstation.core.approvals import ApprovalDecision, ApprovalRequest
from workstation.core.endpoints import Endpoint
from workstation.core.errors import UserError
from workstation.core.fleet_events import (
    OrphanWorktree,
    SessionSummary,
)
from workstation.core.session_state import SessionState as S
from workstation.fleet import review
from workstation.core.admission_limit import AdmissionTarget
from workstation.core.cost import ApiPrice
from workstation.fleet.admission import Admission
from workstation.fleet.agent_bridge import AgentFactory
from workstation.fleet.agent_controls import AgentControls
from workstation.fleet.approval_desk import ApprovalDesk
from workstation.fleet.book import SessionBook
from workstation.fleet.bootstrap import Bootstrapper, BootstrapOptions
from workstation.fleet.dev_server import DevServers, DevServerStatus
from workstation.fleet.driver import DriverRegistry, SessionRunner
from workstation.fleet.engine_watch import EndpointWatcher
from workstation.fleet.event_codec import decode
from workstation.fleet.event_sink import SessionEventSink
from workstation.fleet.costs import SessionCosts
from workstation.fleet.failover import Failover
from workstation.fleet.scheduling import SessionScheduling
from workstation.fleet.gitproc import GitRunner
from workstation.fleet.lifecycle import SessionLifecycle
from workstation.fleet.merge_desk import MergeDesk
from workstation.fleet.merge_queue import MergeReport
from workstation.fleet.ports import PortBook
from workstation.fleet.restart import bring_back, hold_moved
from workstation.fleet.roster import SessionRoster
from workstation.fleet.routing import Router
from workstation.fleet.session import SessionRecord, SessionSpec
from workstation.fleet.shelf import SessionShelf
from workstation.fleet.stats import SessionStats
from workstation.fleet.store import Checkpoint, Store
from workstation.fleet.workspace_ops import WorkspaceOps
from workstation.telemetry.streams import StreamCounters

log = logging.getLogger(__name__)


class Fleet:
    """Sessions: create, start, pause, resume, stop, remove, duplicate; review; resume after
    restart. ``await start()`` first, ``await aclose()`` last."""

    changed = Signal(object)
    """Every fleet event except agent events (a ``workstation.core.fleet_events.FleetEvent``)."""
    agent_event = Signal(object)
    """``SessionAgentEvent``: each agent event of each session, in order (hot path)."""

    def __init__(
        self,
        *,
        data_dir: Path,
        endpoints: Sequence[Endpoint],
        agent_factory: AgentFactory,
        http: httpx.AsyncClient,
        max_generating: int = 32,
        store_path: Path | None = None,
        resume_on_start: bool = True,
        engine_poll_s: float = 2.0,
        sandbox: Any = None,
        bootstrap: BootstrapOptions | None = None,
        streams: StreamCounters | None = None,
        adaptive: bool = True,
        target: AdmissionTarget | None = None,
        price: ApiPrice | None = None,
    ) -> None:
        """``sandbox``: the ``SandboxPolicy`` the fleet's own commands run under (a worktree's
        setup, a dev server); None refuses them. ``bootstrap``: per-repository bootstrap and
        the port range (``BootstrapOptions.from_settings``). ``streams``: the token counters to
        count into (default: the fleet's own; the meters read ``fleet.streams``). ``adaptive``:
        admission steers each engine's limit by its ``/metrics`` (``scheduling.observe_engine``)
        toward ``target``, under ``max_generating``; ``price``: the paid API sessions' costs
        and money budgets are counted at."""
        self.data_dir = Path(data_dir)
        self.store = Store(store_path or self.data_dir / "store.sqlite3")
        self.git = GitRunner()
        self.router = Router(endpoints)
        self.http = http
        self._factory = agent_factory
        self._resume_on_start = resume_on_start
        emit = self.changed.emit
        self.book = SessionBook(self.store, self.router, emit=emit, on_change=self._update_settled)
        self.costs = SessionCosts(self.book, price)
        self.admission = Admission(cap=max_generating, book=self.book, router=self.router, emit=emit,
                                   adaptive=adaptive, target=target,
                                   check=lambda sid: self.scheduling.check_turn(sid))
        self.gate = self.admission.gate
        self.watcher = EndpointWatcher(http, resolve=self.router.get, on_down=lambda e: self.failover.on_down(e),
                                       on_back=lambda e: self.failover.on_back(e), interval_s=engine_poll_s)
        self.desk = ApprovalDesk(
            on_waiting=lambda sid, summary: self.book.set_state(sid, S.AWAITING_APPROVAL, summary),
            on_answered=lambda sid: self.book.set_state(sid, S.RUNNING, "approval answered"),
        )
        self.stats = SessionStats(self.book, emit=emit, streams=streams, costs=self.costs,
                                  token_feed=getattr(agent_factory, "token_observers", None))
        self.streams = self.stats.streams
        """The app's one token rate: every session's streamed tokens and usage."""
        self.sink = SessionEventSink(self.book, self.store, self.stats, emit=self.agent_event.emit)
        self.drivers = DriverRegistry()
        self.failover = Failover(
            book=self.book, store=self.store, router=self.router, gate=self.gate,
            running_on=self.drivers.built_on, relaunch=lambda sid: self.lifecycle.launch(sid, None),
            watch=lambda name: self.watcher.watch(name, announce=False), emit=emit,
            closing=lambda: self._closing, restarted=self._endpoint_restarted)
        self.scheduling = SessionScheduling(book=self.book, admission=self.admission, costs=self.costs,
                                            failover=self.failover, stats=self.stats, emit=emit,
                                            resume=self.start_session)
        """Focus, background, budgets, price, engine readings (``fleet/scheduling.py``)."""
        options = bootstrap or BootstrapOptions()
        self.ports = PortBook(self.store, options.port_range)
        self.bootstrap = Bootstrapper(options=options, sandbox=sandbox, ports=self.ports, git=self.git,
                                      book=self.book, emit_event=self.sink.on_agent_event)
        self.servers = DevServers(sandbox=sandbox, emit=emit, emit_event=self.sink.on_agent_event)
        self.merges = MergeDesk(book=self.book, store=self.store, git=self.git, data_dir=self.data_dir,
                                sandbox=sandbox, busy=self.drivers.alive, emit=emit,
                                emit_event=self.sink.on_agent_event)
        self.runner = SessionRunner(
            book=self.book, store=self.store, router=self.router, gate=self.gate, desk=self.desk,
            drivers=self.drivers, sink=self.sink, watcher=self.watcher, factory=agent_factory, http=http,
            relaunch=lambda sid: self.lifecycle.launch(sid, None), closing=lambda: self._closing,
            settle=self._update_settled, failover=self.failover, costs=self.costs,
            command_env=lambda sid: self.bootstrap.command_env(sid, self.book.rec(sid).spec),
        )
        self.workspaces = WorkspaceOps(self.book, self.store, self.git, self.data_dir, emit=emit)
        self.shelf = SessionShelf(self.book, self.store, emit=emit)
        """Names and the archive (``fleet/shelf.py``)."""
        self.controls = AgentControls(book=self.book, store=self.store, drivers=self.drivers,
                                      runner=self.runner, router=self.router, sink=self.sink)
        """Mode and checkpoint restore (``fleet/agent_controls.py``)."""
        self.lifecycle = SessionLifecycle(
            book=self.book, store=self.store, drivers=self.drivers, runner=self.runner, desk=self.desk,
            merges=self.merges, servers=self.servers, costs=self.costs, admission=self.admission,
            require_open=self._require_open, settle=self._update_settled)
        """Start, reply, pause, stop and their checks (``fleet/lifecycle.py``)."""
        self.roster = SessionRoster(
            book=self.book, store=self.store, git=self.git, data_dir=self.data_dir, router=self.router,
            ports=self.ports, bootstrap=self.bootstrap, workspaces=self.workspaces, stats=self.stats,
            servers=self.servers, admission=self.admission, drivers=self.drivers, emit=emit,
            require_open=self._require_open, end_driver=self.lifecycle.end_driver,
            start=self.start_session, settle=self._update_settled)
        """Making, duplicating and removing sessions (``fleet/roster.py``)."""
        self._started = False
        self._closing = False
        self._settled = asyncio.Event()
        self._settled.set()

    @property
    def request_observers(self) -> list[Any] | None:
        """Observers of every model request its agents make (the agent factory's shared list;
        None when the factory's agents do not report their requests)."""
        return getattr(self._factory, "request_observers", None)

    # ================= start-up and shut-down =================
    async def start(self) -> None:
        """Open the store, bring back every session, resume the ones that were working,
        and look for orphaned worktrees."""
        await self.store.start()
        await self.ports.load()
        to_resume = await bring_back(self.store, self.book, self.router, self.workspaces)
        self.stats.start()
        self._started = True
        moved = hold_moved(self.book, self.router, to_resume, self.changed.emit)
        for sid in to_resume:
            if sid in moved:
                continue
            if self._resume_on_start:
                self.lifecycle.launch(sid, None)
            else:
                self.book.set_state(sid, S.PAUSED, "the app restarted; resume when ready", force=True)
        await self.scan_orphans()

    async def aclose(self) -> None:
        """Stop accepting work, end every driver (their sessions keep their persisted state, so
        the next start resumes them), close the store."""
        if self._closing:
            return
        self._closing = True
        await self.servers.stop_all()
        await self.stats.aclose()
        await self.watcher.aclose()
        await self.drivers.end_all()
        await self.store.aclose()
        await self.git.aclose()

    # ================= queries =================
    def sessions(self) -> list[SessionSummary]:
        return [self.stats.summary(rec) for rec in self.book]

    def summary(self, session_id: str) -> SessionSummary:
        return self.stats.summary(self.book.rec(session_id))

    def record(self, session_id: str) -> SessionRecord:
        return self.book.rec(session_id).copy()

    def tokens_per_s(self, session_id: str) -> float:
        return self.stats.tokens_per_s(session_id)

    def tokens_per_s_total(self) -> float:
        return self.stats.tokens_per_s_total()

    def pending_approvals(self) -> list[ApprovalRequest]:
        return self.desk.pending()

    async def transcript(self, session_id: str, *, after_seq: int = 0) -> list[tuple[int, object]]:
        """Stored agent events of a session as ``(seq, event)``, oldest first."""
        self.book.rec(session_id)
        rows = await self.store.load_events(session_id, after_seq=after_seq)
        out = []
        for row in rows:
            event = decode(row.kind, row.payload)
            if event is not None:
                out.append((row.seq, event))
        return out

    async def history(self, session_id: str) -> list[dict[str, Any]]:
        """The messages the session's next run resumes from."""
        self.book.rec(session_id)
        return await self.runner.history(session_id)

    @property
    def orphans(self) -> tuple[OrphanWorktree, ...]:
        """Worktrees no session owns, as of the last scan."""
        return self.workspaces.orphans

    # ================= creating =================
    async def create_session(self, spec: SessionSpec, *, start: bool = False, free_names: bool = False
                             ) -> SessionSummary:
        return (await self.create_sessions(spec, 1, start=start, free_names=free_names))[0]

    async def create_sessions(self, spec: SessionSpec, count: int = 1, *, start: bool = False,
                              free_names: bool = False) -> list[SessionSummary]:
        """Create ``count`` sessions of one spec ("run this task N times") on one repository.

        Every check (repository, base branch, names, branches) runs before anything is
        created; if a worktree then fails, the sessions made so far in this call are removed
        again, so a failed call leaves nothing behind. Names derived from the task skip what is
        taken (sessions, ``ws/`` branches, worktree folders); a given name that is taken is an
        error naming a free one, or with ``free_names`` the free one is used.
        """
        return await self.roster.create_sessions(spec, count, start=start, free_names=free_names)

    async def run_setup(self, session_id: str) -> None:
        """Run the session's setup command again (after fixing what made it fail); a session
        that failed only for its setup is ready again when it passes."""
        await self.roster.run_setup(session_id)

    async def duplicate(self, session_id: str, count: int = 1, *, start: bool = False) -> list[SessionSummary]:
        """New sessions with the same task, repository, base and settings."""
        return await self.roster.duplicate(session_id, count, start=start)

    # ================= running (SessionLifecycle) =================
    async def start_session(self, session_id: str, *, message: str | None = None,
                            images: tuple[str, ...] = ()) -> None:
        """Start (or continue) a session: ready, paused, stopped, failed, done, needs input."""
        await self.lifecycle.start_session(session_id, message=message, images=images)

    async def start_all(self) -> None:
        await self.lifecycle.start_all()

    async def reply(self, session_id: str, text: str, images: tuple[str, ...] = ()) -> None:
        """Answer a session that needs input (or give a finished one a follow-up task), with
        images (paths) for a model that takes them."""
        await self.lifecycle.reply(session_id, text, images)

    async def pause(self, session_id: str) -> None:
        """Pause now; an in-flight model turn is dropped (retried on resume), a running tool is
        interrupted (reported to the model as interrupted, never run again)."""
        await self.lifecycle.pause(session_id)

    async def pause_all(self) -> None:
        """Pause every working session; those waiting for a person keep waiting."""
        await self.lifecycle.pause_all()

    async def resume(self, session_id: str) -> None:
        await self.lifecycle.start_session(session_id)

    async def stop(self, session_id: str) -> None:
        await self.lifecycle.stop(session_id)

    def resolve_approval(self, session_id: str, request_id: str, decision: ApprovalDecision) -> None:
        self.admission.answered(session_id)
        self.desk.resolve(session_id, request_id, decision)

    def set_max_generating(self, cap: int) -> None:
        """The fleet's cap on sessions generating at once (adaptive admission's ceiling)."""
        self.admission.set_cap(cap)

    def update_endpoint(self, endpoint: Endpoint) -> None:
        """An engine restarted (a managed one comes back on a new port with a new key) or a new
        endpoint was added: sessions on that name use it from their next run; sessions waiting
        for it are checked at once and continue."""
        self.router.update(endpoint)
        self._endpoint_restarted(endpoint.name)
        self.watcher.recheck(endpoint.name)

    def _endpoint_restarted(self, name: str) -> None:
        back = getattr(self._factory, "endpoint_back", None)
        if callable(back):
            back(name)

    async def remove(self, session_id: str, *, keep_worktree: bool = False) -> None:
        """Stop the session, delete its worktree, branch and checkpoint refs (unless
        ``keep_worktree``), and forget it."""
        await self.roster.remove(session_id, keep_worktree=keep_worktree)

    async def remove_many(self, session_ids: Sequence[str], *, keep_worktree: bool = False) -> None:
        """Remove several sessions at once (their folders are deleted in parallel)."""
        await self.roster.remove_many(session_ids, keep_worktree=keep_worktree)

    async def wait_settled(self) -> None:
        """Return when no session is working or waiting for its engine, and none is being made."""
        while True:
            await self._settled.wait()
            self._update_settled()
            if self._settled.is_set():
                return

    # ================= mode and checkpoints =================
    async def set_mode(self, session_id: str, mode: str) -> None:
        """Plan or act (``agent_controls.py``); a running agent hears it before its next turn."""
        self.controls.set_mode(session_id, mode)

    async def checkpoints(self, session_id: str) -> list[Checkpoint]:
        return await self.workspaces.checkpoints(session_id)

    async def restore_checkpoint(self, session_id: str, commit: str, *, files: bool = True,
                                 conversation: bool = True) -> None:
        """Files, conversation or both back to a checkpoint (``agent_controls.py``)."""
        await self.controls.restore_checkpoint(session_id, commit, files=files, conversation=conversation)

    # ================= review and orphans (WorkspaceOps) =================
    async def diff(self, session_id: str) -> review.SessionDiff:
        return await self.workspaces.diff(session_id)

    async def commit(self, session_id: str, message: str) -> review.IntegrateResult:
        return await self.workspaces.commit(session_id, message)

    async def integrate(self, session_id: str, *, rebase: bool = False, message: str | None = None
                        ) -> review.IntegrateResult:
        """Merge (or rebase) into the base branch; the merged session goes to the archive."""
        result = await self.workspaces.integrate(session_id, rebase=rebase, message=message)
        rec = self.book.rec(session_id)
        self.shelf.archive(session_id, f"merged into {rec.base_branch} ({result.commit[:10]})")
        return result

    async def discard(self, session_id: str, *, keep_commits: bool = False) -> review.IntegrateResult:
        """Throw its work away; without ``keep_commits`` the session goes to the archive."""
        result = await self.workspaces.discard(session_id, keep_commits=keep_commits)
        if not keep_commits:
            self.shelf.archive(session_id, "its work was discarded")
        return result

    async def mark_ready(self, session_id: str, ready: bool = True, *, message: str | None = None) -> str | None:
        """Mark a session's work ready to merge (its uncommitted changes are committed on its
        branch first; returns that commit) or take the mark back."""
        return await self.merges.mark_ready(session_id, ready, message=message)

    async def merge_ready(self, *, into: str, gate: str, rebase: bool = False, names: Sequence[str] = (),
                          require_gate: bool = True) -> MergeReport:
        """The merge queue over the ready sessions (``merge_queue.py``): target untouched
        unless every session merged and passed ``gate`` (none with ``require_gate=False``)."""
        self._require_open()
        report = await self.merges.merge_ready(into=into, gate=gate, rebase=rebase, names=names,
                                               require_gate=require_gate)
        by_name = {r.name: r.session_id for r in self.book.records()}
        for name in report.merged:  # merged sessions leave the grid for the archive
            self.shelf.archive(by_name[name], f"merged into {into} ({(report.commit or '')[:10]})")
        return report

    async def start_dev_server(self, session_id: str, *, attended: bool = True) -> DevServerStatus:
        """Start the session's dev server (its ``run`` command, ``dev_server.py``); ``attended``:
        a person asked for it now (the pane), which matters only where bubblewrap cannot run."""
        self._require_open()
        rec = self.book.rec(session_id)
        if not (rec.spec.run_command or "").strip():
            raise UserError(f"{rec.name} has no dev server", hint="set `run` for its repository "
                            "(settings' repos, or run = \"…\" in the task file)")
        if not Path(rec.worktree_path).is_dir():
            raise UserError(f"the worktree of {rec.name} is gone ({rec.worktree_path})")
        block = await self.bootstrap.port_block(session_id, rec.spec)
        return await self.servers.start(session_id, rec.spec.run_command or "", rec.worktree_path, block,
                                        attended=attended)

    async def stop_dev_server(self, session_id: str) -> bool:
        """Stop the session's dev server; False when none ran."""
        self.book.rec(session_id)
        return await self.servers.stop(session_id)

    def dev_server(self, session_id: str) -> DevServerStatus | None:
        return self.servers.status(session_id)

    async def disk_usage(self, session_id: str) -> int:
        """Bytes the session's worktree takes on disk (its files and its git bookkeeping)."""
        return await self.workspaces.disk_usage(session_id)

    async def scan_orphans(self) -> tuple[OrphanWorktree, ...]:
        return await self.workspaces.scan_orphans()

    async def remove_orphans(self, orphans: Sequence[OrphanWorktree] | None = None) -> int:
        return await self.workspaces.remove_orphans(orphans)

    # ================= callbacks =================
    def _update_settled(self) -> None:
        busy = self.roster.creating > 0 or self.drivers.any_alive() or self.book.any_in(S.ENGINE_WAIT)
        if busy:
            self._settled.clear()
        else:
            self._settled.set()

    def _require_open(self) -> None:
        if not self._started or self._closing:
            raise UserError("the fleet is not running")
