"""Which sessions exist: making them, duplicating them, running their setup again, and
removing them for good.

Making is all or nothing: every check (task, count, mode, endpoint, repository, base branch,
names, branches) runs before anything is made; the worktrees are then checked out in
parallel, and if one fails, the sessions made so far in that call are removed again. It owns
how many create calls are under way (``creating``: the fleet is not settled while one is).
Kept apart from the fleet's façade, which delegates here.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from pathlib import Path

from workstation.core.errors import UserError
from workstation.core.fleet_events import SessionCreated, SessionRemoved, SessionSummary
from workstation.core.session_state import SessionState as S
from workstation.fleet.admission import Admission
from workstation.fleet.book import SessionBook
from workstation.fleet.bootstrap import Bootstrapper
from workstation.fleet.dev_server import DevServers
from workstation.fleet.driver import DriverRegistry
from workstation.fleet.gitproc import GitRunner
from workstation.fleet.ports import PortBook
from workstation.fleet.provision import (
    PreparedRepo,
    check_names_free,
    make_worktree,
    prepare_repository,
    taken_names,
)
from workstation.fleet.repos import session_names
from workstation.fleet.routing import Router
from workstation.fleet.session import SessionRecord, SessionSpec
from workstation.fleet.stats import SessionStats
from workstation.fleet.store import Store
from workstation.fleet.workspace_ops import WorkspaceOps
from workstation.fleet.worktrees import worktrees_root

MAX_SESSIONS_PER_CREATE = 512


class SessionRoster:
    def __init__(self, *, book: SessionBook, store: Store, git: GitRunner, data_dir: Path, router: Router,
                 ports: PortBook, bootstrap: Bootstrapper, workspaces: WorkspaceOps, stats: SessionStats,
                 servers: DevServers, admission: Admission, drivers: DriverRegistry,
                 emit: Callable[[object], None], require_open: Callable[[], None],
                 end_driver: Callable[[str], Awaitable[None]], start: Callable[[str], Awaitable[None]],
                 settle: Callable[[], None]) -> None:
        """``end_driver``: ends a session's driver before it is removed; ``start``: starts a
        made session (``create_sessions(start=True)``); ``settle``: recounts whether the fleet
        is settled."""
        self._book = book
        self._store = store
        self._git = git
        self._data_dir = data_dir
        self._router = router
        self._ports = ports
        self._bootstrap = bootstrap
        self._workspaces = workspaces
        self._stats = stats
        self._servers = servers
        self._admission = admission
        self._drivers = drivers
        self._emit = emit
        self._require_open = require_open
        self._end_driver = end_driver
        self._start = start
        self._settle = settle
        self.creating = 0
        """Create calls under way."""

    async def create_sessions(self, spec: SessionSpec, count: int = 1, *, start: bool = False,
                              free_names: bool = False) -> list[SessionSummary]:
        """Create ``count`` sessions of one spec on one repository (``Fleet.create_sessions``)."""
        self._require_open()
        if not spec.task.strip():
            raise UserError("a session needs a task")
        if not 1 <= count <= MAX_SESSIONS_PER_CREATE:
            raise UserError(f"number of sessions must be between 1 and {MAX_SESSIONS_PER_CREATE}")
        if spec.mode not in ("plan", "act"):
            raise UserError(f"mode must be 'plan' or 'act', not {spec.mode!r}")
        if spec.endpoint:
            self._router.get(spec.endpoint)
        self.creating += 1
        self._settle()
        made: list[str] = []
        try:
            key = spec.repo
            prepared = await prepare_repository(
                self._git, spec, self._data_dir,
                on_progress=lambda m, f: self._workspaces.progress(key, "clone", m, f),
            )
            spec = await self._bootstrap.prepare_spec(spec, prepared.repo.path)
            taken = self._book.names() | await taken_names(self._git, prepared.repo, self._data_dir)
            names = session_names(spec.name, spec.task, count, taken, free=free_names)
            await check_names_free(self._git, prepared.repo, names, self._data_dir)
            await self._store.remember_repo(str(prepared.repo.path))
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
            self.creating -= 1
            self._settle()
        if start:
            for sid in made:
                if self._book.rec(sid).state is S.READY:  # a failed setup waits for the user
                    await self._start(sid)
        return [self._stats.summary(self._book.rec(sid)) for sid in made]

    async def _insert_session(self, spec: SessionSpec, prepared: PreparedRepo, name: str) -> str:
        sid = uuid.uuid4().hex[:12]
        rec = SessionRecord(
            session_id=sid, name=name, spec=replace(spec, name=name), state=S.PREPARING,
            repo_path=str(prepared.repo.path), base_branch=prepared.base_branch,
            start_commit=prepared.base_commit, position=await self._store.next_position(),
            worktree_path=str(worktrees_root(self._data_dir, prepared.repo) / name),
            branch=f"ws/{name}",
        )
        endpoint = self._router.assign(sid, pinned=spec.endpoint)
        self._router.set_active(sid, True)
        rec.endpoint_name = endpoint.name
        await self._store.insert_session(rec)
        await self._ports.allocate(sid, rec.spec.ports or self._bootstrap.options.default_ports)
        self._book.add(rec)
        self._emit(SessionCreated(self._stats.summary(rec)))
        return sid

    async def _build_worktree(self, sid: str, prepared: PreparedRepo) -> None:
        rec = self._book.rec(sid)
        self._workspaces.progress(sid, "worktree", f"creating worktree {rec.branch}", None)
        path, _ = await make_worktree(self._git, prepared, rec.name, self._data_dir,
                                      shared_links=rec.spec.shared_links)
        await self._bootstrap.place(prepared.repo.path, path, rec.spec)
        self._workspaces.progress(sid, "worktree", "ready", 1.0)
        if rec.spec.setup_command:
            self._workspaces.progress(sid, "setup", f"running {rec.spec.setup_command}", None)
        await self._bootstrap.setup_session(sid)

    async def run_setup(self, session_id: str) -> None:
        """Run the session's setup command again (after fixing what made it fail); a session
        that failed only for its setup is ready again when it passes."""
        rec = self._book.rec(session_id)
        if rec.state.is_active or self._drivers.alive(session_id) or rec.state is S.PREPARING:
            raise UserError(f"{rec.name} is working; pause or stop it before running its setup again")
        await self._bootstrap.setup_session(session_id, again=True)

    async def duplicate(self, session_id: str, count: int = 1, *, start: bool = False) -> list[SessionSummary]:
        """New sessions with the same task, repository, base and settings."""
        rec = self._book.rec(session_id)
        spec = replace(rec.spec, name=None, repo=rec.repo_path, clone=False, init_if_plain=False,
                       base_branch=rec.base_branch)
        taken = self._book.names()
        names, i = [], 2
        while len(names) < count:
            if f"{rec.name}-{i}" not in taken:
                names.append(f"{rec.name}-{i}")
            i += 1
        out: list[SessionSummary] = []
        for name in names:
            out += await self.create_sessions(replace(spec, name=name), 1, start=start)
        return out

    async def remove(self, session_id: str, *, keep_worktree: bool = False) -> None:
        """Stop the session, delete its worktree, branch and checkpoint refs (unless
        ``keep_worktree``), and forget it."""
        rec = self._book.rec(session_id)
        await self._servers.stop(session_id)
        await self._end_driver(session_id)
        if not keep_worktree:
            await self._workspaces.undo_worktree(rec)
        self._book.forget(session_id)
        self._router.forget(session_id)
        self._admission.forget(session_id)
        await self._ports.release(session_id)
        await self._store.delete_session(session_id)
        self._emit(SessionRemoved(session_id, rec.name))
        self._settle()

    async def remove_many(self, session_ids: Sequence[str], *, keep_worktree: bool = False) -> None:
        """Remove several sessions at once (their folders are deleted in parallel)."""
        results = await asyncio.gather(
            *(self.remove(sid, keep_worktree=keep_worktree) for sid in session_ids), return_exceptions=True
        )
        failures = [r for r in results if isinstance(r, BaseException)]
        if failures:
            raise failures[0]
