"""Review and integrate a session's work: diff against its base, commit, merge or rebase into
the base branch, discard.

Nothing here overwrites anything silently. A merge is computed first without touching any
working tree (``git merge-tree --write-tree``); conflicts are reported with their paths and
nothing changes. The base branch is moved only by a fast-forward: with ``git merge --ff-only``
where it is checked out (refused while that checkout has uncommitted changes), otherwise with
``git update-ref`` guarded by its old value (refused when someone moved it meanwhile).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from workstation.agent.worktree_snapshot import excluding, unignored, worktree_tree
from workstation.core.errors import UserError
from workstation.fleet.gitproc import GitCommandError, GitRunner
from workstation.fleet.worktrees import list_worktrees

MAX_PATCH_BYTES = 2_000_000


@dataclass(frozen=True, slots=True)
class Workspace:
    """The git facts of one session that review needs."""

    repo_path: Path
    worktree_path: Path
    branch: str
    base_branch: str
    start_commit: str
    """The base commit the session's branch was created from."""
    shared_links: tuple[str, ...] = ()
    """Paths (relative to the worktree) that are links to read-only caches: never committed."""


@dataclass(frozen=True, slots=True)
class FileChange:
    path: str
    status: str
    """``A`` added, ``M`` modified, ``D`` deleted, ``T`` type changed."""
    added: int | None
    """Lines added; None for binary files."""
    removed: int | None


@dataclass(frozen=True, slots=True)
class SessionDiff:
    base_commit: str
    """The merge base the diff is taken against."""
    files: tuple[FileChange, ...]
    patch: str
    truncated: bool = False

    @property
    def added(self) -> int:
        return sum(f.added or 0 for f in self.files)

    @property
    def removed(self) -> int:
        return sum(f.removed or 0 for f in self.files)


@dataclass(frozen=True, slots=True)
class IntegrateResult:
    action: str
    commit: str
    message: str


class MergeConflict(UserError):
    """Merging or rebasing would conflict; nothing was changed."""

    def __init__(self, what: str, paths: Sequence[str]) -> None:
        shown = ", ".join(paths[:8]) + (" …" if len(paths) > 8 else "")
        super().__init__(
            f"{what} would conflict in {len(paths)} file(s): {shown}; nothing was changed",
            hint="resolve it in the session (ask the agent to rebase onto the base and fix the "
            "conflicts), or merge by hand",
        )
        self.paths = tuple(paths)


async def _unignored_links(git: GitRunner, ws: Workspace) -> list[str]:
    """Shared links git would pick up (links inside ignored folders need no exclusion, and
    naming an ignored path makes ``git add`` fail)."""
    async def probe(args: Sequence[str], stdin: bytes) -> tuple[int, str]:
        res = await git.run(args, cwd=ws.worktree_path, check=False, stdin_bytes=stdin)
        return res.returncode, res.stdout

    return await unignored(probe, ws.shared_links)


async def _pathspec(git: GitRunner, ws: Workspace) -> list[str]:
    return excluding(await _unignored_links(git, ws))


async def _merge_base(git: GitRunner, ws: Workspace) -> str:
    res = await git.run(["merge-base", f"refs/heads/{ws.base_branch}", "HEAD"], cwd=ws.worktree_path,
                        check=False)
    return res.stdout.strip() if res.ok and res.stdout.strip() else ws.start_commit


async def diff_against_base(git: GitRunner, ws: Workspace) -> SessionDiff:
    """Everything the session changed since it branched off: commits, staged, unstaged and new
    files. Takes the worktree's tree through a throw-away index (``worktree_snapshot``), so
    neither the session's index nor its files are touched."""
    _require_worktree(ws)
    base = await _merge_base(git, ws)
    tree = await worktree_tree(
        lambda args, env: git.out(args, cwd=ws.worktree_path, env=dict(env), timeout_s=600),
        exclude=await _unignored_links(git, ws), blocking=git.blocking)
    common = ["diff", "--no-renames", "--no-ext-diff", base, tree]
    numstat = await git.out([*common, "--numstat", "-z"], cwd=ws.worktree_path)
    status = await git.out([*common, "--name-status", "-z"], cwd=ws.worktree_path)
    patch_res = await git.run([*common, "--patch"], cwd=ws.worktree_path)
    statuses: dict[str, str] = {}
    parts = status.split("\0")
    for i in range(0, len(parts) - 1, 2):
        statuses[parts[i + 1]] = parts[i][:1]
    files: list[FileChange] = []
    for rec in numstat.split("\0"):
        if not rec:
            continue
        added, removed, path = rec.split("\t", 2)
        files.append(FileChange(path, statuses.get(path, "M"),
                                None if added == "-" else int(added),
                                None if removed == "-" else int(removed)))
    patch = patch_res.stdout
    truncated = len(patch) > MAX_PATCH_BYTES
    return SessionDiff(base, tuple(files), patch[:MAX_PATCH_BYTES], truncated)


async def commit_session(git: GitRunner, ws: Workspace, message: str) -> IntegrateResult:
    """Commit everything the session changed onto its branch ``ws/<name>``."""
    _require_worktree(ws)
    if not message.strip():
        raise UserError("a commit needs a message")
    await _retry_lock(git, ["add", "-A", *await _pathspec(git, ws)], ws.worktree_path)
    staged = await git.run(["diff", "--cached", "--quiet"], cwd=ws.worktree_path, check=False)
    if staged.ok:
        raise UserError(f"nothing to commit: {ws.branch} has no changes since its last commit")
    ident = await git.identity_args(ws.worktree_path)
    await _retry_lock(git, [*ident, "commit", "-q", "--no-verify", "-m", message], ws.worktree_path)
    sha = await git.out(["rev-parse", "HEAD"], cwd=ws.worktree_path)
    return IntegrateResult("commit", sha, f"committed {sha[:10]} on {ws.branch}")


async def integrate(git: GitRunner, ws: Workspace, *, rebase: bool = False,
                    message: str | None = None) -> IntegrateResult:
    """Bring the session's commits into its base branch (merge commit, or rebase + fast-forward).

    Refuses with a clear message when the session has uncommitted changes, has nothing to
    integrate, would conflict, or the base's checkout has uncommitted changes.
    """
    _require_worktree(ws)
    dirty = await _dirty(git, ws.worktree_path, untracked=True, exclude=await _unignored_links(git, ws))
    if dirty:
        raise UserError(
            f"{ws.branch} has uncommitted changes ({len(dirty)} file(s), e.g. {dirty[0]})",
            hint="commit them in review first, or discard them",
        )
    base_ref = f"refs/heads/{ws.base_branch}"
    base_tip = await git.rev(f"{base_ref}^{{commit}}", cwd=ws.repo_path)
    if base_tip is None:
        raise UserError(f"base branch {ws.base_branch} no longer exists in {ws.repo_path}")
    tip = await git.rev(f"refs/heads/{ws.branch}^{{commit}}", cwd=ws.repo_path)
    if tip is None:
        raise UserError(f"branch {ws.branch} no longer exists")
    mb = await git.run(["merge-base", base_ref, tip], cwd=ws.repo_path, check=False)
    if mb.stdout.strip() == tip:
        raise UserError(f"nothing to integrate: {ws.branch} has no commits that {ws.base_branch} lacks",
                        hint="commit the session's changes first")
    checkout = await _checkout_of(git, ws.repo_path, ws.base_branch)
    if checkout is not None:
        dirty_base = await _dirty(git, checkout, untracked=False)
        if dirty_base:
            raise UserError(
                f"the base branch {ws.base_branch} has uncommitted changes in {checkout} "
                f"({len(dirty_base)} file(s), e.g. {dirty_base[0]})",
                hint="commit or stash them there first; nothing was merged",
            )
    if rebase:
        new = await _rebase(git, ws, base_ref)
        action, what = "rebase", f"rebased {ws.branch} onto {ws.base_branch} and fast-forwarded it"
    else:
        new = await _merge_commit(git, ws, base_ref, base_tip, tip, message)
        action, what = "merge", f"merged {ws.branch} into {ws.base_branch}"
    await _advance_base(git, ws, checkout, base_ref, base_tip, new)
    return IntegrateResult(action, new, f"{what} ({new[:10]})")


async def _merge_commit(git: GitRunner, ws: Workspace, base_ref: str, base_tip: str, tip: str,
                        message: str | None) -> str:
    res = await git.run(["merge-tree", "--write-tree", "--name-only", "--no-messages", base_tip, tip],
                        cwd=ws.repo_path, check=False)
    lines = res.stdout.splitlines()
    if res.returncode == 1:
        raise MergeConflict(f"merging {ws.branch} into {ws.base_branch}",
                            [ln for ln in lines[1:] if ln.strip()])
    if not res.ok or not lines:
        raise UserError(f"git could not merge {ws.branch}: {res.stderr.strip()}")
    ident = await git.identity_args(ws.repo_path)
    msg = message or f"Merge {ws.branch} into {ws.base_branch}"
    return await git.out([*ident, "commit-tree", lines[0], "-p", base_tip, "-p", tip, "-m", msg],
                         cwd=ws.repo_path)


async def _rebase(git: GitRunner, ws: Workspace, base_ref: str) -> str:
    ident = await git.identity_args(ws.worktree_path)
    res = await git.run([*ident, "rebase", "--quiet", "--no-autostash", base_ref],
                        cwd=ws.worktree_path, check=False, timeout_s=600)
    if not res.ok:
        conflicted = await git.run(["diff", "--name-only", "--diff-filter=U"], cwd=ws.worktree_path,
                                   check=False)
        await git.run(["rebase", "--abort"], cwd=ws.worktree_path, check=False)
        paths = conflicted.stdout.split()
        if paths:
            raise MergeConflict(f"rebasing {ws.branch} onto {ws.base_branch}", paths)
        raise UserError(f"could not rebase {ws.branch}: {(res.stderr or res.stdout).strip()}")
    return await git.out(["rev-parse", "HEAD"], cwd=ws.worktree_path)


async def _advance_base(git: GitRunner, ws: Workspace, checkout: Path | None, base_ref: str,
                        old: str, new: str) -> None:
    if checkout is not None:
        res = await git.run(["merge", "--ff-only", "--quiet", new], cwd=checkout, check=False)
        if not res.ok:
            raise UserError(
                f"could not fast-forward {ws.base_branch} in {checkout}: "
                f"{(res.stderr or res.stdout).strip().splitlines()[-1:]}",
                hint="the base moved or files there are in the way; nothing was overwritten",
            )
        return
    res = await git.run(["update-ref", "-m", f"workstation: integrate {ws.branch}", base_ref, new, old],
                        cwd=ws.repo_path, check=False)
    if not res.ok:
        raise UserError(f"{ws.base_branch} moved while integrating {ws.branch}; try again",
                        hint=res.stderr.strip())


async def uncommitted_paths(git: GitRunner, ws: Workspace) -> list[str]:
    """What the session changed and did not commit (new files too; shared links and
    bootstrap files left out)."""
    _require_worktree(ws)
    return await _dirty(git, ws.worktree_path, untracked=True, exclude=await _unignored_links(git, ws))


async def move_branch(git: GitRunner, repo_path: Path, branch: str, old: str, new: str, *, why: str) -> None:
    """Move ``branch`` from ``old`` to ``new`` by a fast-forward only: ``git merge --ff-only``
    in the worktree that has it checked out (refused while that checkout has uncommitted
    changes), else ``git update-ref`` guarded by ``old`` (refused when it moved meanwhile)."""
    checkout = await _checkout_of(git, repo_path, branch)
    if checkout is not None:
        dirty = await _dirty(git, checkout, untracked=False)
        if dirty:
            raise UserError(
                f"{branch} has uncommitted changes in {checkout} ({len(dirty)} file(s), e.g. {dirty[0]})",
                hint="commit or stash them there first; nothing was changed")
    ws = Workspace(repo_path, checkout or repo_path, why, branch, old)
    await _advance_base(git, ws, checkout, f"refs/heads/{branch}", old, new)


async def discard_changes(git: GitRunner, ws: Workspace, *, keep_commits: bool = False) -> IntegrateResult:
    """Throw away the session's work: uncommitted changes, and (unless ``keep_commits``) its
    commits too, back to the commit it started from. Ignored files stay."""
    _require_worktree(ws)
    target = "HEAD" if keep_commits else ws.start_commit
    await _retry_lock(git, ["reset", "--hard", "--quiet", target], ws.worktree_path)
    excludes = [arg for link in ws.shared_links for arg in ("-e", link)]
    await git.run(["clean", "-fd", "--quiet", *excludes], cwd=ws.worktree_path)
    sha = await git.out(["rev-parse", "HEAD"], cwd=ws.worktree_path)
    what = "uncommitted changes" if keep_commits else "all changes and commits"
    return IntegrateResult("discard", sha, f"discarded {what} of {ws.branch}")


def _require_worktree(ws: Workspace) -> None:
    if not ws.worktree_path.is_dir():
        raise UserError(f"the session's worktree {ws.worktree_path} is gone",
                        hint="remove the session, or clean up orphaned worktrees")


async def _checkout_of(git: GitRunner, repo_path: Path, branch: str) -> Path | None:
    for tree in await list_worktrees(git, repo_path):
        if tree.branch == branch and not tree.prunable:
            return tree.path
    return None


async def _dirty(git: GitRunner, cwd: Path, *, untracked: bool, exclude: Sequence[str] = ()) -> list[str]:
    args = ["status", "--porcelain", "-z", "--no-renames", "--untracked-files=" + ("all" if untracked else "no")]
    if exclude:
        args += excluding(exclude)
    out = (await git.run(args, cwd=cwd)).stdout
    return [rec[3:] for rec in out.split("\0") if len(rec) > 3]


async def _retry_lock(git: GitRunner, args: list[str], cwd: Path) -> None:
    for attempt in range(6):
        try:
            await git.run(args, cwd=cwd, timeout_s=600)
            return
        except GitCommandError as exc:
            if "index.lock" not in exc.stderr or attempt == 5:
                raise UserError(f"git {args[0] if args[0] != '-c' else 'commit'} failed in "
                                f"{cwd}: {exc.stderr.strip() or exc}") from exc
            await asyncio.sleep(0.1 * 2**attempt)



def suggested_message(name: str, task: str, diff: SessionDiff, result: str = "", *, files_shown: int = 12) -> str:
    """A commit message drawn from what the session actually changed: a subject from its
    result (else its task), then each file with its line counts; the user edits it."""
    first = next((ln.strip() for ln in (result or task).splitlines() if ln.strip()), name)
    subject = first if len(first) <= 72 else first[:71].rstrip() + "…"
    lines = [subject, ""]
    verb = {"A": "add", "D": "delete", "T": "change type of"}
    for f in diff.files[:files_shown]:
        counts = "binary" if f.added is None else f"+{f.added} −{f.removed}"
        lines.append(f"- {verb.get(f.status, 'update')} {f.path} ({counts})")
    if len(diff.files) > files_shown:
        lines.append(f"- and {len(diff.files) - files_shown} more files")
    if result and task.strip() and first != task.strip().splitlines()[0].strip():
        lines += ["", f"Task: {task.strip().splitlines()[0].strip()}"]
    lines += ["", f"Session: {name}"]
    return "\n".join(lines)


@dataclass(frozen=True, slots=True)
class MergeFacts:
    """What merging a session would touch, for the person who confirms it."""

    commits: tuple[str, ...]
    """``abc1234 subject`` of each commit on the session's branch its base lacks, newest first."""
    uncommitted: tuple[str, ...]
    """Files changed and not committed yet (the merge commits them first)."""
    branches: tuple[str, ...]
    """The repository's branches a session can merge into (its base first; no ``ws/`` ones)."""
    checkouts: dict[str, str]
    """Branch → the folder where it is checked out (its files change when it moves)."""


async def merge_facts(git: GitRunner, ws: Workspace, *, max_commits: int = 50) -> MergeFacts:
    _require_worktree(ws)
    log = await git.run(["log", f"--max-count={max_commits}", "--format=%h %s",
                         f"refs/heads/{ws.base_branch}..refs/heads/{ws.branch}"], cwd=ws.repo_path, check=False)
    heads = await git.run(["for-each-ref", "--format=%(refname:short)", "refs/heads"], cwd=ws.repo_path, check=False)
    names = [b for b in heads.stdout.split() if b and not b.startswith("ws/")]
    branches = tuple([ws.base_branch] + [b for b in names if b != ws.base_branch])
    checkouts = {t.branch: str(t.path) for t in await list_worktrees(git, ws.repo_path)
                 if t.branch and not t.prunable and not t.branch.startswith("ws/")}
    return MergeFacts(tuple(log.stdout.splitlines()) if log.ok else (),
                      tuple(await uncommitted_paths(git, ws)), branches, checkouts)
