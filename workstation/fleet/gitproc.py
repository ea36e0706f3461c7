"""The fleet's one way to run git: ``git`` as asyncio subprocesses, bounded, never leaked.

GitPython keeps ``git cat-file`` helpers alive in long-running processes (its own docs
warn about it), so fleet operations run the ``git`` binary directly: each call is one
short-lived process that is always waited for, killed with its process group when the
caller is cancelled or the call times out. A semaphore bounds how many run at once (the
machine may have two cores and 32 sessions asking), and blocking file-system work that
belongs with git (disk usage walks, deleting worktree folders) runs on the runner's own
thread pool, not on asyncio's shared default executor.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")

DEFAULT_TIMEOUT_S = 120.0
FALLBACK_NAME = "workstation"
FALLBACK_EMAIL = "workstation@localhost"


@dataclass(frozen=True, slots=True)
class GitResult:
    args: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0


class GitCommandError(Exception):
    """``git`` exited non-zero; ``stderr`` holds its own explanation."""

    def __init__(self, result: GitResult) -> None:
        self.result = result
        detail = (result.stderr or result.stdout).strip().splitlines()
        tail = detail[-1] if detail else f"exit status {result.returncode}"
        super().__init__(f"git {' '.join(result.args[:3])} failed: {tail}")

    @property
    def stderr(self) -> str:
        return self.result.stderr


class GitNotFound(Exception):
    """No ``git`` executable on PATH."""


def _base_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        GIT_TERMINAL_PROMPT="0",  # a clone that wants credentials fails instead of hanging
        GIT_ASKPASS="",
        SSH_ASKPASS="",
        GCM_INTERACTIVE="never",
        LC_ALL="C",  # messages we parse are in English
        LANGUAGE="C",
        GIT_OPTIONAL_LOCKS="0",  # status/diff never take index.lock behind the agents' backs
    )
    env.pop("GIT_DIR", None)
    env.pop("GIT_WORK_TREE", None)
    env.pop("GIT_INDEX_FILE", None)
    return env


class GitRunner:
    """Runs ``git`` for the fleet. One per fleet; close with :meth:`aclose`."""

    def __init__(self, *, max_concurrent: int | None = None, git: str | None = None) -> None:
        found = git or shutil.which("git")
        if not found:
            raise GitNotFound("git is not installed (or not on PATH); the fleet needs it")
        self.git = found
        cores = os.cpu_count() or 2
        self._slots = asyncio.Semaphore(max_concurrent or max(2, min(8, cores * 2)))
        self._pool = ThreadPoolExecutor(max_workers=max(2, min(4, cores)), thread_name_prefix="fleet-git")
        self._env = _base_env()
        self._closed = False
        self._repo_locks: dict[str, asyncio.Lock] = {}

    async def run(
        self,
        args: Sequence[str],
        *,
        cwd: Path | str | None = None,
        check: bool = True,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        env: dict[str, str] | None = None,
        stdin_bytes: bytes | None = None,
        on_stderr_line: Callable[[str], None] | None = None,
    ) -> GitResult:
        """Run ``git <args>`` in ``cwd``; raise :class:`GitCommandError` when ``check`` and it fails.

        ``on_stderr_line`` receives progress lines as they come (``\\r`` ends a line too),
        for ``clone --progress`` and friends.
        """
        if self._closed:
            raise RuntimeError("the git runner is closed")
        full_env = self._env if env is None else {**self._env, **env}
        async with self._slots:
            proc = await asyncio.create_subprocess_exec(
                self.git,
                *args,
                cwd=str(cwd) if cwd is not None else None,
                stdin=asyncio.subprocess.PIPE if stdin_bytes is not None else asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=full_env,
                start_new_session=True,
            )
            try:
                async with asyncio.timeout(timeout_s):
                    out, err = await self._communicate(proc, stdin_bytes, on_stderr_line)
            except BaseException:
                await _kill(proc)
                raise
        result = GitResult(
            tuple(args),
            proc.returncode if proc.returncode is not None else -1,
            out.decode("utf-8", "replace"),
            err.decode("utf-8", "replace"),
        )
        if check and not result.ok:
            raise GitCommandError(result)
        return result

    async def _communicate(
        self,
        proc: asyncio.subprocess.Process,
        stdin_bytes: bytes | None,
        on_stderr_line: Callable[[str], None] | None,
    ) -> tuple[bytes, bytes]:
        if on_stderr_line is None:
            return await proc.communicate(stdin_bytes)
        assert proc.stdout is not None and proc.stderr is not None
        if stdin_bytes is not None and proc.stdin is not None:
            proc.stdin.write(stdin_bytes)
            await proc.stdin.drain()
            proc.stdin.close()
        err_parts: list[bytes] = []

        async def pump_stderr() -> None:
            assert proc.stderr is not None
            pending = b""
            while chunk := await proc.stderr.read(4096):
                err_parts.append(chunk)
                pending += chunk
                *lines, pending = pending.replace(b"\r", b"\n").split(b"\n")
                for line in lines:
                    if line.strip():
                        on_stderr_line(line.decode("utf-8", "replace"))
            if pending.strip():
                on_stderr_line(pending.decode("utf-8", "replace"))

        pump = asyncio.create_task(pump_stderr(), name="git-stderr-pump")
        try:
            out = await proc.stdout.read()
            await pump
            await proc.wait()
        finally:
            if not pump.done():
                pump.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await pump
        return out, b"".join(err_parts)

    async def out(self, args: Sequence[str], *, cwd: Path | str | None = None, **kw: Any) -> str:
        """stdout of a successful call, stripped."""
        return (await self.run(args, cwd=cwd, **kw)).stdout.strip()

    async def rev(self, ref: str, *, cwd: Path | str | None = None, strict: bool = False) -> str | None:
        """The object id ``ref`` names (``rev-parse --verify --quiet``; peel it, ``x^{commit}``,
        where a commit is meant), None where it names none. ``strict``: a failure other than
        "no such object" (not a repository, unreadable) raises instead of reading as none."""
        res = await self.run(["rev-parse", "--verify", "--quiet", ref], cwd=cwd, check=False)
        if res.ok and res.stdout.strip():
            return res.stdout.strip()
        if strict and res.returncode not in (0, 1):
            raise GitCommandError(res)
        return None

    def repo_lock(self, common_dir: Path | str) -> asyncio.Lock:
        """A lock per repository for commands that change its shared worktree bookkeeping
        (``worktree add/remove/prune``): git reads other worktrees' half-written entries
        otherwise ("failed to read .git/worktrees/x/commondir")."""
        key = os.path.realpath(str(common_dir))
        lock = self._repo_locks.get(key)
        if lock is None:
            lock = self._repo_locks[key] = asyncio.Lock()
        return lock

    async def blocking(self, fn: Callable[..., T], *args: Any) -> T:
        """Run blocking file-system work on the runner's own threads."""
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)

    async def identity_args(self, cwd: Path | str) -> list[str]:
        """``-c user.name=… -c user.email=…`` when the repository has no identity configured,
        so a commit never fails for want of one (the user's own identity wins when set)."""
        name = await self.run(["config", "--get", "user.name"], cwd=cwd, check=False)
        email = await self.run(["config", "--get", "user.email"], cwd=cwd, check=False)
        args: list[str] = []
        if not name.stdout.strip():
            args += ["-c", f"user.name={FALLBACK_NAME}"]
        if not email.stdout.strip():
            args += ["-c", f"user.email={FALLBACK_EMAIL}"]
        return args

    async def aclose(self) -> None:
        self._closed = True
        self._pool.shutdown(wait=True, cancel_futures=False)


async def _kill(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(Exception):
        await asyncio.shield(proc.wait())
