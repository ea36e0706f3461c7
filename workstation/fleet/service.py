"""The fleet service: many sessions, each an agent in its own worktree, persisted and resumable.

``Fleet`` owns the store, the git runner, the generation gate, the router and one driver
task per working session (see ``driver.py``). Commands are coroutines that return what
changed and emit events; views redraw from the events.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import httpx
from psygnal import Signal

from workstation.core.approvals import ApprovalDecision, ApprovalRequest
from workstation.core.endpoints import Endpoint
from workstation.core.errors import UserError
from workstation.core.fleet_events import (
    EndpointAvailabilityChanged,
    GenerationSlotsChanged,
    OrphanWorktree,
    SessionCreated,
    SessionRemoved,
    SessionStateChanged,
    SessionSummary,
)
from workstation.core.session_state import (
    IllegalTransition,
    SessionState as S,
    check_transition,
    state_after_restart,
)
from workstation.fleet.agent_bridge import AgentFactory
from workstation.fleet.driver import SessionDriver
from workstation.fleet.engine_watch import EndpointWatcher
from workstation.fleet.gate import GenerationGate
from workstation.fleet.gitproc import GitRunner
from workstation.fleet.provision import (
    PreparedRepo,
    check_names_free,
    make_worktree,
    prepare_repository,
)
from workstation.fleet.repos import inspect_repository, slug_from_task, validate_session_name
from workstation.fleet.routing import Router
from workstation.fleet.session import SessionRecord, SessionSpec
from workstation.fleet.store import Store
from workstation.fleet.workspace_ops import WorkspaceOps
from workstation.fleet.worktrees import remove_worktree, worktrees_root

log = logging.getLogger(__name__)

MAX_SESSIONS_PER_CREATE = 512


class Fleet(SessionDriver, WorkspaceOps):
    """Sessions: create, start, pause, resume, stop, remove, duplicate; review; resume after
    restart. ``await start()`` first, ``await aclose()`` last."""

    changed = Signal(object)
    """Every fleet event except agent events (``workstation.core.fleet_events``)."""
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
    ) -> None:
        super().__init__()
        self.data_dir = Path(data_dir)
        self.store = Store(store_path or self.data_dir / "store.sqlite3")
        self.git = GitRunner()
        self.router = Router(endpoints)
        self.http = http
        self._factory = agent_factory
        self._resume_on_start = resume_on_start
        self.gate = GenerationGate(
            max_generating, on_change=self._on_slots, on_wait=self._on_slot_wait,
            on_admit=self._on_slot_admit,
        )
        self.watcher = EndpointWatcher(http, resolve=self.router.get, on_down=self._on_endpoint_down,
                                       on_back=self._on_endpoint_back, interval_s=engine_poll_s)
        self._records: dict[str, SessionRecord] = {}
        self._creating = 0
        self._started = False
        self._closing = False
        self._settled = asyncio.Event()
        self._settled.set()
        self.orphans: tuple[OrphanWorktree, ...] = ()

    # ================= lifecycle =================
    async def start(self) -> None:
        """Open the store, bring back every session, resume the ones that were working,
        and look for orphaned worktrees."""
        await self.store.start()
        records = await self.store.load_sessions()
        to_resume: list[str] = []
        for rec in records:
            self._records[rec.session_id] = rec
            if rec.endpoint_name:
                self.router.assign(rec.session_id, previous=rec.endpoint_name)
                self.router.set_active(rec.session_id, not rec.state.is_finished)
            new = state_after_restart(rec.state)
            if rec.state is S.PREPARING:
                await self._undo_worktree(rec)
                rec.error = "the app stopped while the worktree was being created; remove this session"
            if new is not rec.state:
                self._set_state(rec.session_id, new, "restarted", force=True)
            if new is S.QUEUED:
                to_resume.append(rec.session_id)
        self._start_ticker()
        self._started = True
        for sid in to_resume:
            if self._resume_on_start:
                self._launch(sid, None)
            else:
                self._set_state(sid, S.PAUSED, "the app restarted; resume when ready", force=True)
        await self.scan_orphans()

    async def aclose(self) -> None:
        """Stop accepting work, end every driver (their sessions keep their persisted state, so
        the next start resumes them), close the store."""
        if self._closing:
            return
        self._closing = True
        await self._stop_ticker()
        await self.watcher.aclose()
        await self._cancel_all_drivers()
        await self.store.aclose()
        await self.git.aclose()

    # ================= queries =================
    def sessions(self) -> list[SessionSummary]:
        return [self._summary(rec) for rec in sorted(self._records.values(), key=lambda r: r.position)]

    def summary(self, session_id: str) -> SessionSummary:
        return self._summary(self._rec(session_id))

    def record(self, session_id: str) -> SessionRecord:
        return self._rec(session_id).copy()

    def pending_approvals(self) -> list[ApprovalRequest]:
        return [req for req, _ in self._approvals.values()]

    async def transcript(self, session_id: str, *, after_seq: int = 0) -> list[tuple[int, object]]:
        """Stored agent events of a session as ``(seq, event)``, oldest first."""
        from workstation.fleet.event_codec import decode

        self._rec(session_id)
        rows = await self.store.load_events(session_id, after_seq=after_seq)
        out = []
        for row in rows:
            event = decode(row.kind, row.payload)
            if event is not None:
                out.append((row.seq, event))
        return out

    # ================= creating =================
    async def create_session(self, spec: SessionSpec, *, start: bool = False) -> SessionSummary:
        return (await self.create_sessions(spec, 1, start=start))[0]

    async def create_sessions(self, spec: SessionSpec, count: int = 1, *, start: bool = False
                              ) -> list[SessionSummary]:
        """Create ``count`` sessions of one spec ("run this task N times") on one repository.

        Every check (repository, base branch, names, branches) runs before anything is
        created; if a worktree then fails, the sessions made so far in this call are removed
        again, so a failed call leaves nothing behind.
        """
        self._require_open()
        if not spec.task.strip():
            raise UserError("a session needs a task")
        if not 1 <= count <= MAX_SESSIONS_PER_CREATE:
            raise UserError(f"number of sessions must be between 1 and {MAX_SESSIONS_PER_CREATE}")
        if spec.mode not in ("plan", "act"):
            raise UserError(f"mode must be 'plan' or 'act', not {spec.mode!r}")
        if spec.endpoint:
            self.router.get(spec.endpoint)
        self._creating += 1
        self._settled.clear()
        made: list[str] = []
        try:
            key = spec.repo
            prepared = await prepare_repository(
                self.git, spec, self.data_dir,
                on_progress=lambda m, f: self._progress(key, "clone", m, f),
            )
            names = self._names_for(spec, count)
            await check_names_free(self.git, prepared.repo, names, self.data_dir)
            await self.store.remember_repo(str(prepared.repo.path))
            for name in names:
                made.append(await self._insert_session(spec, prepared, name))
            # checkouts in parallel (the git runner bounds how many run at once)
            results = await asyncio.gather(
                *(self._build_worktree(sid, prepared) for sid in made), return_exceptions=True
            )
            failures = [r for r in results if isinstance(r, BaseException)]
            if failures:
                raise failures[0]
        except BaseException:
            for sid in reversed(made):
                with contextlib.suppress(Exception):
                    await self.remove(sid)
            raise
        finally:
            self._creating -= 1
            self._update_settled()
        if start:
            for sid in made:
                await self.start_session(sid)
        return [self.summary(sid) for sid in made]

    def _names_for(self, spec: SessionSpec, count: int) -> list[str]:
        taken = {r.name for r in self._records.values()}
        if spec.name is not None:
            base = validate_session_name(spec.name)
            names = [base] if count == 1 else [f"{base}-{i}" for i in range(1, count + 1)]
            for name in names:
                validate_session_name(name)
                if name in taken:
                    raise UserError(f"a session named {name!r} already exists")
            return names
        base = slug_from_task(spec.task)
        names, i = [], 1
        while len(names) < count:
            name = base if (count == 1 and i == 1) else f"{base}-{i}"
            if name not in taken:
                names.append(name)
                taken.add(name)
            i += 1
        return names

    async def _insert_session(self, spec: SessionSpec, prepared: PreparedRepo, name: str) -> str:
        sid = uuid.uuid4().hex[:12]
        rec = SessionRecord(
            session_id=sid, name=name, spec=replace(spec, name=name), state=S.PREPARING,
            repo_path=str(prepared.repo.path), base_branch=prepared.base_branch,
            start_commit=prepared.base_commit, position=await self.store.next_position(),
            worktree_path=str(worktrees_root(self.data_dir, prepared.repo) / name),
            branch=f"ws/{name}",
        )
        endpoint = self.router.assign(sid, pinned=spec.endpoint)
        self.router.set_active(sid, True)
        rec.endpoint_name = endpoint.name
        await self.store.insert_session(rec)
        self._records[sid] = rec
        self.changed.emit(SessionCreated(self._summary(rec)))
        return sid

    async def _build_worktree(self, sid: str, prepared: PreparedRepo) -> None:
        rec = self._records[sid]
        self._progress(sid, "worktree", f"creating worktree {rec.branch}", None)
        await make_worktree(self.git, prepared, rec.name, self.data_dir,
                            shared_links=rec.spec.shared_links)
        self._progress(sid, "worktree", "ready", 1.0)
        self._set_state(sid, S.READY, "worktree created")

    async def duplicate(self, session_id: str, count: int = 1, *, start: bool = False) -> list[SessionSummary]:
        """New sessions with the same task, repository, base and settings."""
        rec = self._rec(session_id)
        spec = replace(rec.spec, name=None, repo=rec.repo_path, clone=False, init_if_plain=False,
                       base_branch=rec.base_branch)
        taken = {r.name for r in self._records.values()}
        names, i = [], 2
        while len(names) < count:
            if f"{rec.name}-{i}" not in taken:
                names.append(f"{rec.name}-{i}")
            i += 1
        out: list[SessionSummary] = []
        for name in names:
            out += await self.create_sessions(replace(spec, name=name), 1, start=start)
        return out

    # ================= running =================
    async def start_session(self, session_id: str, *, message: str | None = None) -> None:
        """Start (or continue) a session: ready, paused, stopped, failed, done, needs input."""
        self._require_open()
        rec = self._rec(session_id)
        if self._driver_alive(session_id):
            if message is not None and rec.state is S.NEEDS_INPUT:
                raise UserError(f"{rec.name} is still winding down; try again in a moment")
            return
        if rec.state is S.PREPARING:
            raise UserError(f"{rec.name} is still being prepared")
        if not Path(rec.worktree_path).is_dir():
            raise UserError(f"the worktree of {rec.name} is gone ({rec.worktree_path})",
                            hint="remove the session and create it again")
        if rec.state is S.ENGINE_WAIT:
            return  # continues by itself when the engine is back
        check_transition(rec.state, S.QUEUED)
        self._launch(session_id, message)

    async def start_all(self) -> None:
        for rec in list(self._records.values()):
            if rec.state in (S.READY, S.PAUSED, S.STOPPED):
                await self.start_session(rec.session_id)

    async def reply(self, session_id: str, text: str) -> None:
        """Answer a session that needs input (or give a finished one a follow-up task)."""
        if not text.strip():
            raise UserError("the reply is empty")
        await self.start_session(session_id, message=text)

    async def pause(self, session_id: str) -> None:
        """Pause now; an in-flight model turn is dropped (retried on resume), a running tool is
        interrupted (reported to the model as interrupted, never run again)."""
        rec = self._rec(session_id)
        if rec.state in (S.PAUSED, S.READY) or rec.state.is_finished:
            return
        await self._end_driver(session_id)
        self._set_state(session_id, S.PAUSED, "paused by the user")

    async def pause_all(self) -> None:
        for rec in list(self._records.values()):
            if rec.state.is_active:
                await self.pause(rec.session_id)

    async def resume(self, session_id: str) -> None:
        await self.start_session(session_id)

    async def stop(self, session_id: str) -> None:
        rec = self._rec(session_id)
        if rec.state in (S.STOPPED, S.PREPARING) or rec.state in (S.DONE, S.FAILED):
            return
        await self._end_driver(session_id)
        self._set_state(session_id, S.STOPPED, "stopped by the user")

    def resolve_approval(self, session_id: str, request_id: str, decision: ApprovalDecision) -> None:
        entry = self._approvals.get((session_id, request_id))
        if entry is None:
            raise UserError("that approval is no longer pending")
        if not entry[1].done():
            entry[1].set_result(decision)

    def set_max_generating(self, cap: int) -> None:
        self.gate.set_cap(cap)

    def update_endpoint(self, endpoint: Endpoint) -> None:
        """An engine restarted (a managed one comes back on a new port with a new key) or a new
        endpoint was added: sessions on that name use it from their next run; sessions waiting
        for it are checked at once and continue."""
        self.router.update(endpoint)
        back = getattr(self._factory, "endpoint_back", None)
        if callable(back):
            back(endpoint.name)
        self.watcher.recheck(endpoint.name)

    async def remove(self, session_id: str, *, keep_worktree: bool = False) -> None:
        """Stop the session, delete its worktree, branch and checkpoint refs (unless
        ``keep_worktree``), and forget it."""
        rec = self._rec(session_id)
        await self._end_driver(session_id)
        if not keep_worktree:
            await self._undo_worktree(rec)
        self._records.pop(session_id, None)
        self.router.forget(session_id)
        await self.store.delete_session(session_id)
        self.changed.emit(SessionRemoved(session_id, rec.name))
        self._update_settled()

    async def remove_many(self, session_ids: Sequence[str], *, keep_worktree: bool = False) -> None:
        """Remove several sessions at once (their folders are deleted in parallel)."""
        results = await asyncio.gather(
            *(self.remove(sid, keep_worktree=keep_worktree) for sid in session_ids), return_exceptions=True
        )
        failures = [r for r in results if isinstance(r, BaseException)]
        if failures:
            raise failures[0]

    async def _undo_worktree(self, rec: SessionRecord) -> None:
        if not rec.worktree_path:
            return
        from workstation.agent.checkpoints import ref_for

        prefix = ref_for(rec.session_id).rsplit("/", 1)[0] + "/"
        await remove_worktree(self.git, Path(rec.repo_path) if rec.repo_path else None,
                              Path(rec.worktree_path), branch=rec.branch or None,
                              private_ref_prefixes=[prefix])

    async def wait_settled(self) -> None:
        """Return when no session is working or waiting for its engine, and none is being made."""
        while True:
            await self._settled.wait()
            self._update_settled()
            if self._settled.is_set():
                return

    # ================= state =================
    def _set_state(self, session_id: str, new: S, reason: str = "", *, force: bool = False) -> bool:
        rec = self._records.get(session_id)
        if rec is None:
            return False
        if rec.state is new:
            if new in (S.FAILED, S.ENGINE_WAIT, S.NEEDS_INPUT) and reason and reason != rec.error:
                rec.error = reason
                self.store.queue_update(session_id, error=reason)
            return False
        old = rec.state
        if not force:
            try:
                check_transition(old, new)
            except IllegalTransition as exc:
                log.debug("ignored for %s: %s (%s)", rec.name, exc, reason)
                return False
        rec.state = new
        rec.updated_at = time.time()
        if new in (S.FAILED, S.ENGINE_WAIT, S.NEEDS_INPUT):
            rec.error = reason
        elif new in (S.QUEUED, S.RUNNING, S.READY):
            rec.error = ""
        self.store.queue_update(session_id, state=new, error=rec.error)
        self.router.set_active(session_id, not new.is_finished)
        self.changed.emit(SessionStateChanged(session_id, old, new, reason))
        self._update_settled()
        return True

    def _update_settled(self) -> None:
        busy = self._creating > 0 or self._any_driver_alive() or any(
            r.state is S.ENGINE_WAIT for r in self._records.values()
        )
        if busy:
            self._settled.clear()
        else:
            self._settled.set()

    def _on_slots(self, generating: int, waiting: int, cap: int) -> None:
        self.changed.emit(GenerationSlotsChanged(generating, waiting, cap))

    def _on_slot_wait(self, session_id: str) -> None:
        self._set_state(session_id, S.QUEUED, "waiting for a generation slot")

    def _on_slot_admit(self, session_id: str, waited: bool) -> None:
        self._set_state(session_id, S.RUNNING, "generating")

    def _on_endpoint_down(self, endpoint: Endpoint) -> None:
        self.changed.emit(EndpointAvailabilityChanged(endpoint.name, False,
                                                      f"{endpoint.base_url} is not answering"))

    def _on_endpoint_back(self, endpoint: Endpoint) -> None:
        self.changed.emit(EndpointAvailabilityChanged(endpoint.name, True, "answering again"))
        back = getattr(self._factory, "endpoint_back", None)
        if callable(back):
            back(endpoint.name)
        if self._closing:
            return
        for rec in list(self._records.values()):
            if rec.state is S.ENGINE_WAIT and rec.endpoint_name == endpoint.name:
                self._launch(rec.session_id, None)

    def _progress(self, key: str, phase: str, message: str, fraction: float | None) -> None:
        from workstation.core.fleet_events import AttachProgress

        self.changed.emit(AttachProgress(key, phase, message, fraction))

    def _rec(self, session_id: str) -> SessionRecord:
        try:
            return self._records[session_id]
        except KeyError:
            raise UserError(f"no session with id {session_id!r}") from None

    def _require_open(self) -> None:
        if not self._started or self._closing:
            raise UserError("the fleet is not running")

    async def attach_check(self, path: str) -> str:
        """Check a local folder for attaching; returns its repository's top level."""
        return str((await inspect_repository(self.git, path)).path)
