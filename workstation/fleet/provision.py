"""Getting a repository ready for new sessions: resolve, clone or ``git init`` it, check the
base branch and the names, create the worktrees. Checks come first, so a mistake is reported
before anything exists; what is created later is removed again when a later step fails."""

from __future__ import annotations

import contextlib
import hashlib
import logging
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from workstation.core.errors import UserError
from workstation.fleet.gitproc import GitRunner
from workstation.fleet.repos import (
    BRANCH_PREFIX,
    NotARepository,
    RepoInfo,
    clone_repository,
    ensure_branch_free,
    init_repository,
    inspect_repository,
    resolve_base,
)
from workstation.fleet.session import SessionSpec
from workstation.fleet.worktrees import create_worktree, worktrees_root

log = logging.getLogger(__name__)

ProgressFn = Callable[[str, float | None], None]


@dataclass(frozen=True, slots=True)
class PreparedRepo:
    repo: RepoInfo
    base_branch: str
    base_commit: str
    cloned: bool = False


def clone_destination(data_dir: Path, source: str) -> Path:
    """``<data_dir>/repos/<name>-<hash>``: one clone per source, reused by later sessions."""
    stem = re.sub(r"\.git$", "", source.rstrip("/").rsplit("/", 1)[-1].rsplit(":", 1)[-1]) or "repo"
    stem = re.sub(r"[^A-Za-z0-9._-]", "-", stem)[:40] or "repo"
    digest = hashlib.sha1(source.encode()).hexdigest()[:8]
    return data_dir / "repos" / f"{stem}-{digest}"


async def prepare_repository(
    git: GitRunner,
    spec: SessionSpec,
    data_dir: Path,
    *,
    on_progress: ProgressFn | None = None,
) -> PreparedRepo:
    """The repository a spec points at, cloned or initialised when the spec says so."""
    cloned = False
    if spec.clone:
        dest = clone_destination(data_dir, spec.repo)
        if (dest / ".git").exists():
            repo = await inspect_repository(git, dest)
        else:
            repo = await clone_repository(git, spec.repo, dest, on_progress=on_progress)
            cloned = True
    else:
        try:
            repo = await inspect_repository(git, spec.repo)
        except NotARepository:
            if not spec.init_if_plain:
                raise
            repo = await init_repository(git, spec.repo)
    try:
        base, commit = await resolve_base(git, repo, spec.base_branch)
    except UserError:
        if cloned:
            await git.blocking(shutil.rmtree, repo.path, True)
        raise
    return PreparedRepo(repo, base, commit, cloned)


async def taken_names(git: GitRunner, repo: RepoInfo, data_dir: Path) -> set[str]:
    """Names a new session cannot take in ``repo``: its ``ws/`` branches and the worktree
    folders left under the data folder (a session removed by hand, a demo run before)."""
    out = await git.run(["for-each-ref", "--format=%(refname:short)", f"refs/heads/{BRANCH_PREFIX}"],
                        cwd=repo.path, check=False)
    names = {ln.removeprefix(BRANCH_PREFIX) for ln in out.stdout.splitlines() if ln.strip()}
    root = worktrees_root(data_dir, repo)
    if root.is_dir():
        names |= {p.name for p in root.iterdir()}
    return names


async def check_names_free(git: GitRunner, repo: RepoInfo, names: list[str], data_dir: Path) -> None:
    """Every name's branch and worktree folder must be free before any is created."""
    if len(set(names)) != len(names):
        raise UserError("two new sessions would have the same name")
    root = worktrees_root(data_dir, repo)
    for name in names:
        await ensure_branch_free(git, repo, BRANCH_PREFIX + name)
        if (root / name).exists():
            raise UserError(
                f"{root / name} already exists",
                hint="an old worktree of that name is in the way; clean up orphaned worktrees",
            )


async def make_worktree(
    git: GitRunner,
    prepared: PreparedRepo,
    name: str,
    data_dir: Path,
    *,
    shared_links: tuple[str, ...] = (),
) -> tuple[Path, str]:
    """Create the session's worktree and branch; link read-only caches into it."""
    dest = worktrees_root(data_dir, prepared.repo) / name
    path, branch = await create_worktree(git, prepared.repo, name=name,
                                         base_branch=prepared.base_branch, dest=dest)
    try:
        for rel in shared_links:
            _link_readonly(prepared.repo.path, path, rel)
    except UserError:
        from workstation.fleet.worktrees import remove_worktree

        await remove_worktree(git, prepared.repo.path, path, branch=branch)
        raise
    return path, branch


def _link_readonly(main: Path, worktree: Path, rel: str) -> None:
    """Link ``main/rel`` into the worktree. Only for caches nobody writes: a writable target
    would be an environment shared between sessions, so it is refused."""
    src = (main / rel).resolve()
    if not src.is_relative_to(main.resolve()) or rel.startswith("/"):
        raise UserError(f"shared link {rel!r} must be a path inside the repository")
    if not src.exists():
        raise UserError(f"shared link {rel!r}: {src} does not exist")
    writable = [p for p in _walk_dirs(src) if _is_writable(p)]
    if writable:
        raise UserError(
            f"shared link {rel!r} is writable ({writable[0]}); sessions must never share a "
            "writable environment",
            hint=f"make it read-only first (chmod -R a-w {src}) or leave it out",
        )
    target = worktree / rel
    if target.exists() or target.is_symlink():
        raise UserError(f"shared link {rel!r} is tracked by git in the worktree; only untracked "
                        "caches can be linked")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.symlink_to(src, target_is_directory=src.is_dir())


def _walk_dirs(root: Path, limit: int = 2000) -> list[Path]:
    found = [root]
    if root.is_dir():
        for i, p in enumerate(root.rglob("*")):
            if i >= limit:
                break
            found.append(p)
    return found


def _is_writable(p: Path) -> bool:
    with contextlib.suppress(OSError):
        return bool(p.stat().st_mode & 0o222)
    return False
