"""Attaching a repository: check a local path, ``git init`` a plain folder, clone with progress.

Everything the user can get wrong ends in a :class:`UserError` saying what and how to fix
it, and nothing half-made is left behind: a failed clone removes the folder it created, a
failed ``git init`` removes the ``.git`` it made.
"""

from __future__ import annotations

import asyncio
import logging
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from workstation.core.errors import UserError
from workstation.fleet.gitproc import GitCommandError, GitRunner

log = logging.getLogger(__name__)

BRANCH_PREFIX = "ws/"
_NAME_OK = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_PERCENT = re.compile(r"^(Counting|Compressing|Receiving|Resolving|Updating files|Checking out)[^:]*:\s+(\d+)%")
# How much of a clone each phase stands for (receiving dominates).
_CLONE_PHASES = {"Counting": (0.0, 0.05), "Compressing": (0.05, 0.1), "Receiving": (0.1, 0.8),
                 "Resolving": (0.8, 0.9), "Updating files": (0.9, 1.0), "Checking out": (0.9, 1.0)}


class NotARepository(UserError):
    """The folder exists but is not a git repository; the app can offer ``git init``."""

    def __init__(self, path: Path) -> None:
        super().__init__(
            f"{path} is not a git repository",
            hint="choose a git repository, or let workstation run `git init` there "
            "(it makes a first commit of the folder's files)",
        )
        self.path = path


@dataclass(frozen=True, slots=True)
class RepoInfo:
    """A local repository, as the fleet uses it."""

    path: Path
    """Its main working tree (top level)."""
    common_dir: Path
    """Its ``.git`` folder, shared by all its worktrees."""
    head_branch: str | None
    """Branch checked out in the main working tree; None when HEAD is detached."""
    branches: tuple[str, ...]


def validate_session_name(name: str) -> str:
    """A session name doubles as a branch (``ws/<name>``) and a folder name."""
    if not _NAME_OK.match(name) or name.endswith((".lock", ".")) or ".." in name:
        raise UserError(
            f"session name {name!r} cannot be used",
            hint="use 1–64 letters, digits, '.', '_' or '-', starting with a letter or digit",
        )
    return name


def slug_from_task(task: str, *, max_len: int = 32) -> str:
    """A readable session name from a task ("Fix the flaky test!" -> "fix-the-flaky-test")."""
    words = re.findall(r"[A-Za-z0-9]+", task.lower())
    slug = ""
    for word in words:
        candidate = f"{slug}-{word}" if slug else word
        if len(candidate) > max_len:
            break
        slug = candidate
    return slug or "session"


def session_names(name: str | None, task: str, count: int, taken: set[str], *, free: bool = False) -> list[str]:
    """Names for ``count`` new sessions: ``name`` (``name-1`` … for several), or a slug of the
    task numbered past the names ``taken`` (sessions, and branches or worktree folders left in
    the repository). A taken ``name`` is an error that names a free one, or with ``free`` the
    free one is taken (a demo run again in the same data folder)."""
    taken = set(taken)
    if name is not None:
        base = validate_session_name(name)
        names = [base] if count == 1 else [f"{base}-{i}" for i in range(1, count + 1)]
        clash = [n for n in names if n in taken]
        if clash and free:
            return _numbered(base, count, taken, start=2)
        for n in names:
            validate_session_name(n)
        if clash:
            suggestion = _numbered(base, 1, taken, start=2)[0]
            raise UserError(f"the name {clash[0]!r} is taken (by a session, or by its branch "
                            f"{BRANCH_PREFIX}{clash[0]} or worktree left in the repository)",
                            hint=f"{suggestion!r} is free")
        return names
    return _numbered(slug_from_task(task), count, taken, start=1, bare_first=count == 1)


def _numbered(base: str, count: int, taken: set[str], *, start: int, bare_first: bool = False) -> list[str]:
    names, i = [], start
    while len(names) < count:
        n = base if (bare_first and i == start) else f"{base}-{i}"
        if n not in taken:
            names.append(validate_session_name(n))
            taken.add(n)
        i += 1
    return names


async def inspect_repository(git: GitRunner, path: Path | str) -> RepoInfo:
    """Check that ``path`` is a usable repository and describe it.

    Raises :class:`UserError` for a path that does not exist, a file, a bare repository or
    one without commits, and :class:`NotARepository` for a plain folder.
    """
    p = Path(path).expanduser()
    if not p.exists():
        raise UserError(f"{p} does not exist", hint="check the path, or clone the repository first")
    if not p.is_dir():
        raise UserError(f"{p} is a file, not a folder", hint="choose the repository's folder")
    p = p.resolve()
    probe = await git.run(["rev-parse", "--is-bare-repository", "--show-toplevel",
                           "--git-common-dir"], cwd=p, check=False)
    if not probe.ok:
        if "not a git repository" in probe.stderr or "not a git repository" in probe.stdout:
            raise NotARepository(p)
        raise UserError(f"git cannot read {p}: {probe.stderr.strip()}")
    lines = probe.stdout.splitlines()
    if lines and lines[0] == "true":
        raise UserError(
            f"{p} is a bare repository (no working tree)",
            hint="clone it into a folder and attach the clone",
        )
    if len(lines) < 3:
        raise UserError(f"git cannot read {p}: unexpected answer {probe.stdout!r}")
    common = Path(lines[2])
    if not common.is_absolute():
        common = (p / common).resolve()
    main = await _main_worktree(git, p) or Path(lines[1])
    head = await git.run(["rev-parse", "--verify", "--quiet", "HEAD^{commit}"], cwd=main, check=False)
    if not head.ok:
        raise UserError(
            f"{main} has no commits yet",
            hint="make a first commit (worktrees branch off a commit): "
            "git add -A && git commit -m 'Initial commit'",
        )
    sym = await git.run(["symbolic-ref", "--quiet", "--short", "HEAD"], cwd=main, check=False)
    refs = await git.out(["for-each-ref", "--format=%(refname:short)", "refs/heads/"], cwd=main)
    return RepoInfo(
        path=main,
        common_dir=common,
        head_branch=sym.stdout.strip() or None if sym.ok else None,
        branches=tuple(refs.splitlines()),
    )


async def _main_worktree(git: GitRunner, path: Path) -> Path | None:
    """The main working tree of the repository ``path`` belongs to (it may be a linked worktree)."""
    listing = await git.run(["worktree", "list", "--porcelain"], cwd=path, check=False)
    for line in listing.stdout.splitlines():
        if line.startswith("worktree "):
            return Path(line[len("worktree "):])
    return None


async def resolve_base(git: GitRunner, repo: RepoInfo, base: str | None) -> tuple[str, str]:
    """The base branch to branch from and its commit: ``base``, or the checked-out branch."""
    if base is None:
        if repo.head_branch is None:
            raise UserError(
                f"{repo.path} has a detached HEAD, so there is no branch to start from",
                hint="name a base branch (--base BRANCH)",
            )
        base = repo.head_branch
    if base.startswith("refs/heads/"):
        base = base[len("refs/heads/"):]
    found = await git.run(["rev-parse", "--verify", "--quiet", f"refs/heads/{base}^{{commit}}"],
                          cwd=repo.path, check=False)
    if not found.ok:
        known = ", ".join(repo.branches[:10]) or "none"
        raise UserError(
            f"base branch {base!r} does not exist in {repo.path}",
            hint=f"branches there: {known}",
        )
    return base, found.stdout.strip()


async def ensure_branch_free(git: GitRunner, repo: RepoInfo, branch: str) -> None:
    ok = await git.run(["check-ref-format", "--branch", branch], cwd=repo.path, check=False)
    if not ok.ok:
        raise UserError(f"{branch!r} is not a valid branch name")
    taken = await git.run(["show-ref", "--verify", "--quiet", f"refs/heads/{branch}"],
                          cwd=repo.path, check=False)
    if taken.ok:
        raise UserError(
            f"branch {branch} already exists in {repo.path}",
            hint=f"pick another session name, or delete the branch: git branch -D {branch}",
        )


async def init_repository(git: GitRunner, path: Path | str, *, branch: str = "main") -> RepoInfo:
    """``git init`` a plain folder and commit what is in it (respecting .gitignore).

    On failure the ``.git`` it created is removed again, so the folder is as it was.
    """
    p = Path(path).expanduser()
    if not p.exists():
        raise UserError(f"{p} does not exist")
    if not p.is_dir():
        raise UserError(f"{p} is a file, not a folder")
    p = p.resolve()
    if (p / ".git").exists():
        raise UserError(f"{p} already has a .git; attach it as a repository instead")
    try:
        await git.run(["init", "-q", "-b", branch], cwd=p)
        await git.run(["add", "-A"], cwd=p, timeout_s=600)
        ident = await git.identity_args(p)
        await git.run([*ident, "commit", "-q", "--allow-empty", "-m", "Initial commit"], cwd=p)
    except (GitCommandError, OSError, asyncio.CancelledError) as exc:
        await git.blocking(shutil.rmtree, p / ".git", True)
        if isinstance(exc, asyncio.CancelledError):
            raise
        raise UserError(f"could not initialise a repository in {p}: {exc}") from exc
    return await inspect_repository(git, p)


async def clone_repository(
    git: GitRunner,
    source: str,
    dest: Path | str,
    *,
    on_progress: Callable[[str, float | None], None] | None = None,
    timeout_s: float = 3600.0,
) -> RepoInfo:
    """Clone a URL or local path into ``dest`` with progress; on any failure remove ``dest``.

    ``on_progress(message, fraction)`` receives git's progress lines and an overall fraction
    (None where git gives no percentage).
    """
    d = Path(dest).expanduser().resolve()
    if d.exists() and (not d.is_dir() or any(d.iterdir())):
        raise UserError(f"{d} already exists and is not empty", hint="choose a new folder to clone into")
    if not source.strip():
        raise UserError("no repository to clone: the URL or path is empty")
    src = source
    local = Path(source).expanduser()
    if "://" not in source and not re.match(r"^[\w.-]+@[\w.-]+:", source):
        if not local.exists():
            raise UserError(f"cannot clone {source}: no such folder, and it is not a URL")
        src = str(local.resolve())
    created = not d.exists()

    def line(text: str) -> None:
        if on_progress is None:
            return
        m = _PERCENT.match(text.strip())
        fraction = None
        if m:
            lo, hi = _CLONE_PHASES.get(m.group(1), (0.0, 1.0))
            fraction = lo + (hi - lo) * int(m.group(2)) / 100
        on_progress(text.strip(), fraction)

    d.parent.mkdir(parents=True, exist_ok=True)
    try:
        await git.run(["clone", "--progress", "--", src, str(d)], on_stderr_line=line, timeout_s=timeout_s)
    except GitCommandError as exc:
        await _remove_clone(git, d, created)
        reason = _last_meaningful(exc.stderr) or str(exc)
        raise UserError(f"could not clone {source}: {reason}") from exc
    except (TimeoutError, asyncio.CancelledError):
        await _remove_clone(git, d, created)
        raise
    try:
        return await inspect_repository(git, d)
    except UserError:
        await _remove_clone(git, d, created)
        raise


async def _remove_clone(git: GitRunner, d: Path, created: bool) -> None:
    if created:
        await git.blocking(shutil.rmtree, d, True)
    elif d.exists():  # it was an empty folder we were given: empty it again
        for child in list(d.iterdir()):
            if child.is_dir() and not child.is_symlink():
                await git.blocking(shutil.rmtree, child, True)
            else:
                child.unlink(missing_ok=True)


def _last_meaningful(stderr: str) -> str:
    lines = [ln.strip() for ln in stderr.replace("\r", "\n").splitlines()]
    lines = [ln for ln in lines if ln and not ln.startswith("Cloning into") and "%" not in ln]
    for ln in reversed(lines):
        if ln.startswith("fatal:"):
            return ln[len("fatal:"):].strip()
    return lines[-1] if lines else ""
