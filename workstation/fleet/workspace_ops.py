"""Review, integrate, checkpoints and orphaned worktrees: the workspace half of :class:`Fleet`.

Thin on purpose: the git work is in ``review.py`` and ``worktrees.py``; this part checks the
session's state first and emits ``SessionIntegrated`` / ``OrphanWorktreesFound``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from workstation.core.errors import UserError
from workstation.core.fleet_events import OrphanWorktree, OrphanWorktreesFound, SessionIntegrated
from workstation.fleet import review
from workstation.fleet.agent_bridge import AgentSetup, build_agent
from workstation.fleet.store import Checkpoint
from workstation.fleet.worktrees import disk_usage_bytes, find_orphans, remove_orphan

if TYPE_CHECKING:
    from workstation.fleet.service import Fleet


class WorkspaceOps:
    def _workspace(self: Fleet, session_id: str) -> review.Workspace:
        rec = self._rec(session_id)
        for what, path in (("repository", rec.repo_path), ("worktree", rec.worktree_path)):
            if not Path(path).is_dir():  # deleted under the session: say so, not a git traceback
                raise UserError(f"the {what} of {rec.name} is gone ({path})",
                                hint="remove the session, or create it again")
        return review.Workspace(Path(rec.repo_path), Path(rec.worktree_path), rec.branch,
                                rec.base_branch, rec.start_commit, rec.spec.shared_links)

    async def diff(self: Fleet, session_id: str) -> review.SessionDiff:
        return await review.diff_against_base(self.git, self._workspace(session_id))

    async def commit(self: Fleet, session_id: str, message: str) -> review.IntegrateResult:
        return await self._integrating(session_id, "commit",
                                       review.commit_session(self.git, self._workspace(session_id), message))

    async def integrate(self: Fleet, session_id: str, *, rebase: bool = False, message: str | None = None
                        ) -> review.IntegrateResult:
        rec = self._rec(session_id)
        if rec.state.is_active:
            raise UserError(f"{rec.name} is still working; pause or stop it before merging")
        return await self._integrating(
            session_id, "rebase" if rebase else "merge",
            review.integrate(self.git, self._workspace(session_id), rebase=rebase, message=message))

    async def discard(self: Fleet, session_id: str, *, keep_commits: bool = False) -> review.IntegrateResult:
        rec = self._rec(session_id)
        if rec.state.is_active:
            raise UserError(f"{rec.name} is still working; pause or stop it before discarding")
        return await self._integrating(
            session_id, "discard",
            review.discard_changes(self.git, self._workspace(session_id), keep_commits=keep_commits))

    async def _integrating(self: Fleet, session_id: str, action: str, op) -> review.IntegrateResult:  # type: ignore[no-untyped-def]
        try:
            result = await op
        except review.MergeConflict as exc:
            self.changed.emit(SessionIntegrated(session_id, action, False, str(exc), exc.paths))
            raise
        except UserError as exc:
            self.changed.emit(SessionIntegrated(session_id, action, False, str(exc)))
            raise
        self.changed.emit(SessionIntegrated(session_id, action, True, result.message))
        return result

    # ================= orphans =================
    async def scan_orphans(self) -> tuple[OrphanWorktree, ...]:
        repos = {Path(p) for p in await self.store.known_repos()}
        repos |= {Path(r.repo_path) for r in self._records.values() if r.repo_path}
        owned = [Path(r.worktree_path) for r in self._records.values() if r.worktree_path]
        found = await find_orphans(self.git, sorted(repos), owned,
                                   fleet_root=self.data_dir / "worktrees")
        self.orphans = tuple(found)
        if found:
            self.changed.emit(OrphanWorktreesFound(self.orphans))
        return self.orphans

    async def remove_orphans(self: Fleet, orphans: Sequence[OrphanWorktree] | None = None) -> int:
        targets = list(self.orphans if orphans is None else orphans)
        owned = {r.worktree_path for r in self._records.values()}
        done = 0
        for orphan in targets:
            if orphan.worktree_path in owned:
                continue
            self._progress(orphan.worktree_path, "cleanup", f"removing {orphan.worktree_path}", None)
            await remove_orphan(self.git, orphan)
            done += 1
        self.orphans = tuple(o for o in self.orphans if o not in targets)
        return done


    # ================= disk, mode, checkpoints =================
    async def disk_usage(self: Fleet, session_id: str) -> int:
        """Bytes the session's worktree takes on disk (its files and its git bookkeeping)."""
        rec = self._rec(session_id)
        return await self.git.blocking(disk_usage_bytes, Path(rec.worktree_path))

    async def set_mode(self: Fleet, session_id: str, mode: str) -> None:
        """Switch a session between ``plan`` and ``act``; a running agent is told before its
        next turn, and the choice is kept for later runs."""
        from workstation.core.agent_events import AgentMode

        if mode not in ("plan", "act"):
            raise UserError(f"mode must be 'plan' or 'act', not {mode!r}")
        rec = self._rec(session_id)
        rec.spec = replace(rec.spec, mode=mode)
        rec.agent_meta["mode"] = mode
        self.store.queue_update(session_id, spec=rec.spec, agent_meta=dict(rec.agent_meta))
        drive = self._drives.get(session_id)
        agent = drive.agent if drive is not None else None
        if agent is not None and hasattr(agent, "set_mode"):
            agent.set_mode(AgentMode(mode))

    async def checkpoints(self: Fleet, session_id: str) -> list[Checkpoint]:
        self._rec(session_id)
        await self.store.flush()
        return await self.store.list_checkpoints(session_id)

    async def restore_checkpoint(self: Fleet, session_id: str, commit: str, *, files: bool = True,
                                 conversation: bool = True) -> None:
        """Restore a paused or finished session's files, conversation, or both, to a checkpoint
        (the agent does the git work; the rewritten history is stored like any other change)."""
        rec = self._rec(session_id)
        if rec.state.is_active or self._driver_alive(session_id):
            raise UserError(f"{rec.name} is working; pause or stop it before restoring a checkpoint")
        setup = AgentSetup(
            session_id=session_id, name=rec.name, root=Path(rec.worktree_path), task=rec.spec.task,
            spec=rec.spec, endpoint=self.router.assign(session_id, previous=rec.endpoint_name),
            history=await self._history(session_id), user_message=None,
            on_event=lambda event: self._on_agent_event(session_id, event), approver=None,
            generation_slot=self.gate.factory(session_id), agent_meta=dict(rec.agent_meta),
        )
        agent = await build_agent(self._factory, setup)
        restore = getattr(agent, "restore_checkpoint", None)
        if restore is None:
            raise UserError("this session's agent cannot restore checkpoints")
        await restore(commit, files=files, conversation=conversation)
        self._keep_meta(session_id, agent)
        await self.store.flush()
