"""Review, integrate, checkpoints, disk use and orphaned worktrees of the fleet's sessions.

Thin on purpose: the git work is in ``review.py`` and ``worktrees.py``; this part checks the
session's state first and emits ``SessionIntegrated`` / ``OrphanWorktreesFound`` /
``AttachProgress``. It owns the list of orphans found by the last scan.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

from workstation.core.errors import UserError
from workstation.core.fleet_events import (
    AttachProgress,
    OrphanWorktree,
    OrphanWorktreesFound,
    SessionIntegrated,
)
from workstation.fleet import review
from workstation.fleet.book import SessionBook
from workstation.fleet.gitproc import GitRunner
from workstation.fleet.session import SessionRecord
from workstation.fleet.store import Checkpoint, Store
from workstation.fleet.worktrees import disk_usage_bytes, find_orphans, remove_orphan, remove_worktree


def workspace_of(rec: SessionRecord) -> review.Workspace:
    """The git facts of a session's record. Bootstrap files (``.env``, linked folders) are the
    environment, never the session's work: review leaves them out like shared links."""
    return review.Workspace(Path(rec.repo_path), Path(rec.worktree_path), rec.branch,
                            rec.base_branch, rec.start_commit, rec.spec.environment_paths)


class WorkspaceOps:
    def __init__(self, book: SessionBook, store: Store, git: GitRunner, data_dir: Path, *,
                 emit: Callable[[object], None]) -> None:
        self._book = book
        self._store = store
        self._git = git
        self._data_dir = data_dir
        self._emit = emit
        self.orphans: tuple[OrphanWorktree, ...] = ()

    def progress(self, key: str, phase: str, message: str, fraction: float | None) -> None:
        self._emit(AttachProgress(key, phase, message, fraction))

    # ================= review =================
    def workspace(self, session_id: str) -> review.Workspace:
        rec = self._book.rec(session_id)
        for what, path in (("repository", rec.repo_path), ("worktree", rec.worktree_path)):
            if not Path(path).is_dir():  # deleted under the session: say so, not a git traceback
                raise UserError(f"the {what} of {rec.name} is gone ({path})",
                                hint="remove the session, or create it again")
        return workspace_of(rec)

    async def diff(self, session_id: str) -> review.SessionDiff:
        return await review.diff_against_base(self._git, self.workspace(session_id))

    async def commit(self, session_id: str, message: str) -> review.IntegrateResult:
        return await self._integrating(session_id, "commit",
                                       review.commit_session(self._git, self.workspace(session_id), message))

    async def integrate(self, session_id: str, *, rebase: bool = False, message: str | None = None
                        ) -> review.IntegrateResult:
        rec = self._book.rec(session_id)
        if rec.state.is_working:
            raise UserError(f"{rec.name} is still working ({rec.state.label}); pause or stop it before merging")
        return await self._integrating(
            session_id, "rebase" if rebase else "merge",
            review.integrate(self._git, self.workspace(session_id), rebase=rebase, message=message))

    async def discard(self, session_id: str, *, keep_commits: bool = False) -> review.IntegrateResult:
        rec = self._book.rec(session_id)
        if rec.state.is_working:
            raise UserError(f"{rec.name} is still working ({rec.state.label}); pause or stop it before discarding")
        return await self._integrating(
            session_id, "discard",
            review.discard_changes(self._git, self.workspace(session_id), keep_commits=keep_commits))

    async def _integrating(self, session_id: str, action: str,
                           op: Awaitable[review.IntegrateResult]) -> review.IntegrateResult:
        try:
            result = await op
        except review.MergeConflict as exc:
            self._emit(SessionIntegrated(session_id, action, False, str(exc), exc.paths))
            raise
        except UserError as exc:
            self._emit(SessionIntegrated(session_id, action, False, str(exc)))
            raise
        self._emit(SessionIntegrated(session_id, action, True, result.message))
        return result

    # ================= worktrees =================
    async def undo_worktree(self, rec: SessionRecord) -> None:
        """Delete a session's worktree, its branch and its checkpoint refs."""
        if not rec.worktree_path:
            return
        from workstation.agent.checkpoints import ref_for

        prefix = ref_for(rec.session_id).rsplit("/", 1)[0] + "/"
        await remove_worktree(self._git, Path(rec.repo_path) if rec.repo_path else None,
                              Path(rec.worktree_path), branch=rec.branch or None,
                              private_ref_prefixes=[prefix])

    async def disk_usage(self, session_id: str) -> int:
        """Bytes the session's worktree takes on disk (its files and its git bookkeeping)."""
        rec = self._book.rec(session_id)
        return await self._git.blocking(disk_usage_bytes, Path(rec.worktree_path))

    async def checkpoints(self, session_id: str) -> list[Checkpoint]:
        self._book.rec(session_id)
        await self._store.flush()
        return await self._store.list_checkpoints(session_id)

    # ================= orphans =================
    async def scan_orphans(self) -> tuple[OrphanWorktree, ...]:
        records = self._book.records()
        repos = {Path(p) for p in await self._store.known_repos()}
        repos |= {Path(r.repo_path) for r in records if r.repo_path}
        owned = [Path(r.worktree_path) for r in records if r.worktree_path]
        found = await find_orphans(self._git, sorted(repos), owned, fleet_root=self._data_dir / "worktrees")
        self.orphans = tuple(found)
        if found:
            self._emit(OrphanWorktreesFound(self.orphans))
        return self.orphans

    async def remove_orphans(self, orphans: Sequence[OrphanWorktree] | None = None) -> int:
        targets = list(self.orphans if orphans is None else orphans)
        owned = {r.worktree_path for r in self._book.records()}
        done = 0
        for orphan in targets:
            if orphan.worktree_path in owned:
                continue
            self.progress(orphan.worktree_path, "cleanup", f"removing {orphan.worktree_path}", None)
            await remove_orphan(self._git, orphan)
            done += 1
        self.orphans = tuple(o for o in self.orphans if o not in targets)
        return done
