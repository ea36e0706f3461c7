"""Checkpoints: every change to files becomes a commit on a private ref of the session.

``refs/workstation/<session>/checkpoints`` holds a chain of commits made through a
temporary index (``worktree_snapshot``), so neither the user's branch, the session's ``ws/…``
branch, the user's index nor the working tree is touched. Each commit message carries the
length of the agent's message history at that moment (a ``Workstation-Message-Index``
trailer), so the conversation can be restored with the files. What the fleet put into the
worktree besides git's files (``exclude``: its shared links and bootstrap files) is the
session's environment, not its work: it stays out of every checkpoint (and a restore to
one leaves it alone).

Git runs as short-lived subprocesses (GitPython leaks helpers in long-running processes),
bounded per event loop, killed with their process group when the caller is cancelled.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from workstation.agent.worktree_snapshot import scratch_index, unignored, worktree_tree

INDEX_TRAILER = "Workstation-Message-Index"
GIT_TIMEOUT_S = 120.0
MAX_PARALLEL_GIT = 4

_limits: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = weakref.WeakKeyDictionary()


class CheckpointError(Exception):
    """A git operation of the checkpoint store failed; the message says which and why."""


@dataclass(frozen=True, slots=True)
class Checkpoint:
    commit: str
    label: str
    message_index: int
    created_at: int
    """Unix time of the commit."""


def ref_for(session_id: str) -> str:
    safe = re.sub(r"[^A-Za-z0-9._-]+", "-", session_id).strip(".-") or "session"
    return f"refs/workstation/{safe}/checkpoints"


def _git_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(
        GIT_AUTHOR_NAME="workstation agent", GIT_AUTHOR_EMAIL="agent@workstation.invalid",
        GIT_COMMITTER_NAME="workstation agent", GIT_COMMITTER_EMAIL="agent@workstation.invalid",
        GIT_TERMINAL_PROMPT="0", GIT_OPTIONAL_LOCKS="0", LC_ALL="C",
    )
    if extra:
        env.update(extra)
    return env


async def git(
    cwd: Path, *args: str, env: dict[str, str] | None = None, check: bool = True,
    input_bytes: bytes | None = None,
) -> str:
    """Run ``git -C cwd args…``; returns stdout (stripped of the final newline)."""
    returncode, out, err = await _run(cwd, args, env, input_bytes)
    if check and returncode != 0:
        detail = err.decode(errors="replace").strip().splitlines()
        raise CheckpointError(f"git {args[0]} failed: {detail[-1] if detail else returncode}")
    return out.decode(errors="replace").rstrip("\n")


async def git_probe(cwd: Path, args: Sequence[str], input_bytes: bytes) -> tuple[int, str]:
    """Run ``git -C cwd args…`` with ``input_bytes`` on stdin; returns its exit status and
    stdout as they are (a ``worktree_snapshot.GitProbe``)."""
    returncode, out, _ = await _run(cwd, tuple(args), None, input_bytes)
    return returncode, out.decode(errors="replace")


async def _run(cwd: Path, args: Sequence[str], env: dict[str, str] | None,
               input_bytes: bytes | None) -> tuple[int, bytes, bytes]:
    loop = asyncio.get_running_loop()
    sem = _limits.get(loop)
    if sem is None:
        sem = _limits[loop] = asyncio.Semaphore(MAX_PARALLEL_GIT)
    async with sem:
        proc = await asyncio.create_subprocess_exec(
            "git", "-C", str(cwd), *args, env=_git_env(env),
            stdin=asyncio.subprocess.PIPE if input_bytes is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, start_new_session=True,
        )
        try:
            out, err = await asyncio.wait_for(proc.communicate(input_bytes), timeout=GIT_TIMEOUT_S)
        except BaseException:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            with contextlib.suppress(Exception):
                await asyncio.shield(proc.wait())
            raise
    return proc.returncode if proc.returncode is not None else -1, out, err


class CheckpointStore:
    """Checkpoint commits of one session in the repository that holds ``root``; ``exclude``:
    paths (relative to the repository's top) its checkpoints leave out, ignored ones or not."""

    def __init__(self, root: str | os.PathLike[str], session_id: str, *, exclude: Sequence[str] = ()) -> None:
        self.root = Path(root)
        self.session_id = session_id
        self.exclude = tuple(exclude)
        self.ref = ref_for(session_id)
        self._top: Path | None = None
        self._available: bool | None = None
        self._lock: asyncio.Lock | None = None

    async def available(self) -> bool:
        """Whether ``root`` is inside a git work tree (checkpoints need one)."""
        if self._available is None:
            try:
                top = await git(self.root, "rev-parse", "--show-toplevel")
                self._top = Path(top)
                self._available = True
            except (CheckpointError, OSError):
                self._available = False
        return self._available

    async def _head(self) -> str | None:
        out = await git(self._top or self.root, "rev-parse", "--verify", "-q", "HEAD^{commit}", check=False)
        return out or None

    async def latest(self) -> str | None:
        out = await git(self._top or self.root, "rev-parse", "--verify", "-q", self.ref + "^{commit}", check=False)
        return out or None

    async def create(self, label: str, message_index: int, *, force: bool = False) -> Checkpoint | None:
        """Commit the working tree onto the session's ref; None when nothing changed."""
        if not await self.available():
            return None
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            top = self._top
            assert top is not None
            parent = await self.latest() or await self._head()
            # asked each time: the agent may change the ignore rules (an ignored path named
            # in the pathspec makes ``git add`` fail, one left unnamed is left out anyway)
            exclude = await unignored(lambda args, stdin: git_probe(top, args, stdin), self.exclude)
            tree = await worktree_tree(lambda args, env: git(top, *args, env=dict(env)), exclude=exclude)
            if parent is not None and not force:
                parent_tree = await git(self._top, "rev-parse", parent + "^{tree}")
                if parent_tree == tree and await self.latest() is not None:
                    return None
            message = f"{label}\n\n{INDEX_TRAILER}: {message_index}\n"
            args = ["commit-tree", tree] + (["-p", parent] if parent else [])
            commit = await git(self._top, *args, input_bytes=message.encode())
            old = await self.latest()
            await git(self._top, "update-ref", "-m", f"checkpoint: {label[:60]}", self.ref, commit,
                      old or "0" * 40)
            stamp = await git(self._top, "show", "-s", "--format=%ct", commit)
            return Checkpoint(commit, label, message_index, int(stamp or 0))

    async def list(self) -> list[Checkpoint]:
        """This session's checkpoints, oldest first."""
        if not await self.available() or await self.latest() is None:
            return []
        out = await git(self._top or self.root, "log", "--first-parent",
                        "--format=%H%x1f%ct%x1f%s%x1f%b%x1e", self.ref)
        result: list[Checkpoint] = []
        for record in out.split("\x1e"):
            fields = record.strip("\n").split("\x1f")
            if len(fields) < 4:
                continue
            commit, stamp, subject, body = fields[:4]
            m = re.search(rf"^{INDEX_TRAILER}:\s*(\d+)", body, re.M)
            if m is None:
                break  # below the first checkpoint: the branch's own history
            result.append(Checkpoint(commit, subject, int(m.group(1)), int(stamp or 0)))
        result.reverse()
        return result

    async def get(self, commit: str) -> Checkpoint:
        for cp in await self.list():
            if cp.commit == commit or cp.commit.startswith(commit):
                return cp
        raise CheckpointError(f"{commit} is not a checkpoint of session {self.session_id}")

    async def restore_files(self, commit: str, message_index: int) -> Checkpoint | None:
        """Make the working tree match ``commit`` (ignored files stay as they are).

        Takes a checkpoint of the current state first (returned), so a restore can be undone.
        Files created after ``commit`` are deleted; changed and deleted ones come back.
        """
        if not await self.available():
            raise CheckpointError("checkpoints need a git repository")
        target = (await self.get(commit)).commit
        before = await self.create("before restore", message_index, force=True)
        assert self._top is not None and before is not None
        now_files = set((await git(self._top, "ls-tree", "-r", "-z", "--name-only", before.commit)).split("\0"))
        old_files = set((await git(self._top, "ls-tree", "-r", "-z", "--name-only", target)).split("\0"))
        for rel in sorted(now_files - old_files - {""}):
            path = self._top / rel
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
            parent = path.parent
            while parent != self._top and parent.is_dir() and not any(parent.iterdir()):
                parent.rmdir()
                parent = parent.parent
        async with scratch_index() as env:
            await git(self._top, "read-tree", target, env=env)
            await git(self._top, "checkout-index", "-a", "-f", env=env)
        return before
