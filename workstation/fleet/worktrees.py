"""One worktree and one branch (``ws/<session-name>``) per session; disk use; orphans.

Worktrees live under the fleet's own folder (``<data_dir>/worktrees/<repo>-<hash>/<name>``),
never inside the user's repository, so a session's files cannot collide with another's and
removing the fleet's data removes every worktree. Creating one is all-or-nothing: when
``git worktree add`` fails part-way, the folder, the worktree entry and the branch it may
have made are removed again.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import shutil
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from workstation.core.errors import UserError
from workstation.core.fleet_events import OrphanWorktree
from workstation.fleet.gitproc import GitCommandError, GitRunner
from workstation.fleet.repos import BRANCH_PREFIX, RepoInfo, ensure_branch_free

log = logging.getLogger(__name__)

_LOCK_RETRIES = 6


@dataclass(frozen=True, slots=True)
class Worktree:
    path: Path
    branch: str | None
    """Short branch name (``ws/x``), None when detached."""
    head: str | None
    prunable: bool = False
    """git knows it but its folder is gone."""


def worktrees_root(data_dir: Path, repo: RepoInfo) -> Path:
    """The fleet's folder for one repository's worktrees."""
    digest = hashlib.sha1(str(repo.common_dir).encode()).hexdigest()[:8]
    return data_dir / "worktrees" / f"{repo.path.name}-{digest}"


async def list_worktrees(git: GitRunner, repo_path: Path) -> list[Worktree]:
    out = await git.out(["worktree", "list", "--porcelain"], cwd=repo_path)
    result: list[Worktree] = []
    entry: dict[str, str] = {}
    for line in [*out.splitlines(), ""]:
        if not line:
            if "worktree" in entry:
                branch = entry.get("branch")
                if branch and branch.startswith("refs/heads/"):
                    branch = branch[len("refs/heads/"):]
                result.append(Worktree(Path(entry["worktree"]), branch, entry.get("HEAD"),
                                       "prunable" in entry))
            entry = {}
            continue
        key, _, value = line.partition(" ")
        entry[key] = value
    return result


async def create_worktree(
    git: GitRunner,
    repo: RepoInfo,
    *,
    name: str,
    base_branch: str,
    dest: Path,
) -> tuple[Path, str]:
    """Add a worktree at ``dest`` on a new branch ``ws/<name>`` from ``base_branch``.

    Returns ``(path, branch)``. Raises :class:`UserError` when the branch is taken or the
    destination exists; on any failure nothing of it is left behind.
    """
    branch = BRANCH_PREFIX + name
    await ensure_branch_free(git, repo, branch)
    if dest.exists():
        raise UserError(
            f"{dest} already exists",
            hint="an old worktree of that name is in the way; clean up orphaned worktrees first",
        )
    dest.parent.mkdir(parents=True, exist_ok=True)
    try:
        # The bookkeeping step is serialised per repository; the checkout (the slow part)
        # then runs in parallel with other sessions' checkouts.
        async with git.repo_lock(repo.common_dir):
            await _with_lock_retry(
                git,
                ["worktree", "add", "--quiet", "--no-checkout", "-b", branch, str(dest),
                 f"refs/heads/{base_branch}"],
                repo.path,
            )
        await git.run(["reset", "--hard", "--quiet"], cwd=dest, timeout_s=1800)
    except BaseException as exc:
        await _undo_create(git, repo, dest, branch)
        if isinstance(exc, GitCommandError):
            raise UserError(f"could not create the worktree for {name}: {exc}") from exc
        raise
    return dest, branch


async def _with_lock_retry(git: GitRunner, args: list[str], cwd: Path) -> None:
    """Run a git command that may meet another one's ``*.lock`` file; retry a few times."""
    for attempt in range(_LOCK_RETRIES):
        try:
            await git.run(args, cwd=cwd, timeout_s=600)
            return
        except GitCommandError as exc:
            if ".lock" not in exc.stderr or attempt == _LOCK_RETRIES - 1:
                raise
            await asyncio.sleep(0.05 * 2**attempt)


async def _undo_create(git: GitRunner, repo: RepoInfo, dest: Path, branch: str) -> None:
    async with git.repo_lock(repo.common_dir):
        await git.run(["worktree", "remove", "--force", "--force", str(dest)], cwd=repo.path, check=False)
        if dest.exists():
            await git.blocking(_rmtree_writable, dest)
        await git.run(["worktree", "prune"], cwd=repo.path, check=False)
        await git.run(["branch", "-D", branch], cwd=repo.path, check=False)


async def remove_worktree(
    git: GitRunner,
    repo_path: Path | None,
    worktree_path: Path,
    *,
    branch: str | None,
    private_ref_prefixes: Iterable[str] = (),
) -> None:
    """Remove a session's worktree, its branch and its private refs (checkpoints).

    Works when the worktree folder is already gone, and when the repository is gone (then
    only the folder is removed).
    """
    if repo_path is None or not repo_path.is_dir():
        if worktree_path.exists():
            await git.blocking(_rmtree_writable, worktree_path)
        return
    common = await git.run(["rev-parse", "--path-format=absolute", "--git-common-dir"],
                           cwd=repo_path, check=False)
    # Delete the files first, outside the repository lock (so removals run in parallel),
    # then let git forget the worktrees whose folders are gone.
    if worktree_path.exists():
        await git.blocking(_rmtree_writable, worktree_path)
    async with git.repo_lock(common.stdout.strip() or repo_path):
        await git.run(["worktree", "prune"], cwd=repo_path, check=False)
        if any(_norm(t.path) == _norm(worktree_path) for t in await list_worktrees(git, repo_path)):
            res = await git.run(["worktree", "remove", "--force", "--force", str(worktree_path)],
                                cwd=repo_path, check=False)  # a locked worktree
            if not res.ok:
                log.warning("git keeps worktree %s: %s", worktree_path, res.stderr.strip())
    if branch:
        await _with_lock_retry_quiet(git, ["branch", "-D", branch], repo_path)
    for prefix in private_ref_prefixes:
        refs = await git.run(["for-each-ref", "--format=%(refname)", prefix], cwd=repo_path, check=False)
        for ref in refs.stdout.split():
            await git.run(["update-ref", "-d", ref], cwd=repo_path, check=False)


async def _with_lock_retry_quiet(git: GitRunner, args: list[str], cwd: Path) -> None:
    with contextlib.suppress(GitCommandError):
        await _with_lock_retry(git, args, cwd)


def _rmtree_writable(path: Path) -> None:
    """``rmtree`` that also removes read-only files (agents may chmod things)."""

    def onerror(func, p, _exc):  # type: ignore[no-untyped-def]
        with contextlib.suppress(OSError):
            os.chmod(p, stat.S_IWRITE | stat.S_IREAD | stat.S_IEXEC)
            func(p)

    if path.is_symlink() or path.is_file():
        path.unlink(missing_ok=True)
        return
    shutil.rmtree(path, onerror=onerror)


def disk_usage_bytes(worktree_path: Path) -> int:
    """Bytes on disk of a worktree: its files (allocated blocks, links not followed) plus its
    administrative folder in the repository (``.git/worktrees/<id>``: index, HEAD, logs)."""
    total = 0
    admin: Path | None = None
    dot_git = worktree_path / ".git"
    with contextlib.suppress(OSError):
        if dot_git.is_file():
            text = dot_git.read_text(encoding="utf-8", errors="replace").strip()
            if text.startswith("gitdir:"):
                admin = Path(text[len("gitdir:"):].strip())
                if not admin.is_absolute():
                    admin = (worktree_path / admin).resolve()
    for root in (worktree_path, admin):
        if root is None or not root.exists():
            continue
        for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
            for fname in (*filenames, *dirnames):
                with contextlib.suppress(OSError):
                    st = os.lstat(os.path.join(dirpath, fname))
                    total += st.st_blocks * 512
    return total


async def find_orphans(
    git: GitRunner,
    repo_paths: Iterable[Path],
    owned_worktrees: Iterable[Path],
    *,
    fleet_root: Path | None = None,
) -> list[OrphanWorktree]:
    """Worktrees on ``ws/…`` branches (or under ``fleet_root``) that no session owns.

    ``repo_paths``: every repository the fleet has used. ``owned_worktrees``: the worktree
    paths of the sessions in the store. Folders under ``fleet_root`` that git no longer
    knows are reported too (a crash between checkout and store write leaves those).
    """
    owned = {_norm(p) for p in owned_worktrees}
    found: list[OrphanWorktree] = []
    seen: set[str] = set()
    for repo_path in repo_paths:
        if not repo_path.is_dir():
            continue
        try:
            trees = await list_worktrees(git, repo_path)
        except GitCommandError:
            continue
        for tree in trees[1:]:  # the first is the main working tree
            key = _norm(tree.path)
            seen.add(key)
            ours = (tree.branch or "").startswith(BRANCH_PREFIX) or (
                fleet_root is not None and key.startswith(_norm(fleet_root) + os.sep)
            )
            if not ours or key in owned:
                continue
            missing = not tree.path.exists()
            size = None if missing else await git.blocking(disk_usage_bytes, tree.path)
            found.append(OrphanWorktree(str(repo_path), str(tree.path), tree.branch or "",
                                        size, missing or tree.prunable))
    if fleet_root is not None and fleet_root.is_dir():
        for repo_dir in sorted(fleet_root.iterdir()):
            if not repo_dir.is_dir():
                continue
            for tree_dir in sorted(repo_dir.iterdir()):
                key = _norm(tree_dir)
                if key in owned or key in seen:
                    continue
                size = await git.blocking(disk_usage_bytes, tree_dir)
                found.append(OrphanWorktree("", str(tree_dir), "", size, False))
    return found


async def remove_orphan(git: GitRunner, orphan: OrphanWorktree) -> None:
    """Clean up one orphan: its worktree, folder, and its ``ws/…`` branch."""
    branch = orphan.branch if orphan.branch.startswith(BRANCH_PREFIX) else None
    repo = Path(orphan.repo_path) if orphan.repo_path else None
    await remove_worktree(git, repo, Path(orphan.worktree_path), branch=branch)


def _norm(p: Path | str) -> str:
    return os.path.normpath(os.path.realpath(str(p)))
