"""``execute_command``: one shell command in the session's directory, bounded and killable.

- Its own process group (``start_new_session``); on timeout, stop or cancellation the
  whole group gets SIGTERM, then SIGKILL after a grace period — children included.
- No stdin (``/dev/null``), no pager, no terminal prompts; secrets scrubbed from the
  environment (names with KEY, TOKEN, SECRET, PASSWORD, CREDENTIAL … and known ones).
- Output (stdout and stderr merged) streams to a callback as it comes; what the model
  sees is capped: the head and the tail, with the middle elided. Known secret shapes
  (API keys, tokens, private keys) are scrubbed from both (``core/secrets.py``); the live
  stream only for its first ``LIVE_SCRUB_CHARS`` (a gigabyte firehose is not scanned).
- With a ``sandbox`` policy: bubblewrap and resource limits (``sandbox.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import signal
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from workstation.core.secrets import scrub

if TYPE_CHECKING:
    from workstation.agent.sandbox import SandboxPolicy

_SECRET_NAME = re.compile(
    r"(KEY|TOKEN|SECRET|PASSW(OR)?D|CREDENTIAL|PRIVATE|COOKIE|SESSION|AUTH|_PAT$|^PAT_)", re.I
)
_SECRET_EXACT = frozenset({
    "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "GITHUB_TOKEN", "GH_TOKEN",
    "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "OPENAI_API_KEY", "ANTHROPIC_API_KEY", "VLLM_API_KEY",
    "NPM_TOKEN", "PYPI_TOKEN", "DOCKER_PASSWORD", "SSH_AUTH_SOCK", "GPG_AGENT_INFO",
    "KUBECONFIG", "DATABASE_URL",
})
LIVE_SCRUB_CHARS = 4_000_000
"""Live output chunks are scrubbed up to this many characters per command; what the model
sees and what is stored (head and tail) always is."""

_KEEP = frozenset({"PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LC_ALL", "LC_CTYPE",
                   "TZ", "TMPDIR", "TERM", "PWD", "VIRTUAL_ENV", "PYTHONPATH", "XDG_RUNTIME_DIR"})


def scrubbed_environment(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """``base`` (default ``os.environ``) without secrets, set up for non-interactive use."""
    env: dict[str, str] = {}
    for name, value in (os.environ if base is None else base).items():
        if name in _KEEP:
            env[name] = value
            continue
        if name in _SECRET_EXACT or _SECRET_NAME.search(name) or name.startswith("WORKSTATION_"):
            continue
        env[name] = value
    env.update(
        PAGER="cat", GIT_PAGER="cat", GIT_TERMINAL_PROMPT="0", GIT_ASKPASS="true",
        SSH_ASKPASS="true", TERM="dumb", NO_COLOR="1", PYTHONUNBUFFERED="1",
        DEBIAN_FRONTEND="noninteractive", CI="1",
    )
    return env


@dataclass(frozen=True, slots=True)
class CommandResult:
    exit_code: int | None
    """None when it was killed (timeout or stop)."""
    output: str
    """Head and tail of the merged output (capped)."""
    timed_out: bool
    duration_s: float
    total_chars: int

    def for_model(self, command: str, timeout_s: float) -> str:
        body = self.output if self.output.strip() else "(no output)"
        if self.timed_out:
            return (f"The command timed out after {timeout_s:g} s and was killed (with its child "
                    f"processes). Output so far:\n{body}")
        return f"Exit code: {self.exit_code}\nOutput:\n{body}"


class OutputCap:
    """Keeps the first ``head`` and the last ``tail`` characters of a stream."""

    def __init__(self, max_chars: int) -> None:
        self.head_cap = max_chars // 3
        self.tail_cap = max_chars - self.head_cap
        self.head: list[str] = []
        self.head_len = 0
        self.tail = ""
        self.total = 0

    def add(self, text: str) -> None:
        self.total += len(text)
        if self.head_len < self.head_cap:
            take = text[: self.head_cap - self.head_len]
            self.head.append(take)
            self.head_len += len(take)
            text = text[len(take):]
        if text:
            self.tail = (self.tail + text)[-self.tail_cap:]

    def text(self) -> str:
        head = "".join(self.head)
        kept = len(head) + len(self.tail)
        if self.total > kept:
            return f"{head}\n[… {self.total - kept:,} characters omitted …]\n{self.tail}"
        return head + self.tail


def _shell() -> list[str]:
    bash = shutil.which("bash")
    return [bash, "-c"] if bash else ["/bin/sh", "-c"]


async def _kill_group(proc: asyncio.subprocess.Process, grace_s: float) -> None:
    if proc.returncode is not None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)  # stragglers left in the group
        return
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            break
        try:
            await asyncio.wait_for(proc.wait(), timeout=wait_s)
            break
        except asyncio.TimeoutError:
            continue
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


async def run_command(
    command: str,
    cwd: str,
    *,
    timeout_s: float,
    max_output_chars: int,
    on_output: Callable[[str], None] | None = None,
    kill_grace_s: float = 2.0,
    env: Mapping[str, str] | None = None,
    sandbox: SandboxPolicy | None,
    attended: bool = False,
) -> CommandResult:
    """Run ``command`` through the shell in ``cwd``; cancellation kills its process group.

    With ``sandbox``, it runs confined (bubblewrap where usable) under resource limits; a
    command that cannot run at all raises ``ToolError`` — among them, where bubblewrap is
    unusable, every command a person did not approve (``attended``), unless the policy's
    mode is ``off``. ``sandbox=None`` runs it unconfined: only for callers that are not an
    agent (the runner's own tests); it must be said, so there is no default."""
    started = time.monotonic()
    environment = dict(env) if env is not None else scrubbed_environment()
    if sandbox is None:
        proc = await _spawn([*_shell(), command], cwd, environment, None, _kill_group)
        return await _supervise(proc, started, timeout_s, max_output_chars, on_output, kill_grace_s)
    from workstation.agent.sandbox import end_sandbox, prepare

    prepared = await prepare(command, cwd, sandbox, environment, _shell(), attended=attended)
    kill = end_sandbox if prepared.sandboxed else _kill_group
    try:
        proc = await _spawn(prepared.argv, cwd, prepared.env, prepared.preexec_fn, kill)
        return await _supervise(proc, started, timeout_s, max_output_chars, on_output, kill_grace_s, kill=kill)
    finally:
        prepared.release()


async def _spawn(
    argv: list[str],
    cwd: str,
    env: dict[str, str],
    preexec_fn: Callable[[], None] | None,
    kill: Callable[[asyncio.subprocess.Process, float], Awaitable[None]],
) -> asyncio.subprocess.Process:
    """Start the process; a cancellation that arrives while it is starting still ends it
    (asyncio would only SIGKILL the direct child, leaving what it started)."""
    spawn = asyncio.ensure_future(asyncio.create_subprocess_exec(
        *argv, cwd=cwd, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT, env=env, start_new_session=True, preexec_fn=preexec_fn,
    ))
    try:
        return await asyncio.shield(spawn)
    except asyncio.CancelledError:
        with contextlib.suppress(OSError):
            proc = await spawn
            await kill(proc, 0.0)
        raise


async def _supervise(
    proc: asyncio.subprocess.Process,
    started: float,
    timeout_s: float,
    max_output_chars: int,
    on_output: Callable[[str], None] | None,
    kill_grace_s: float,
    kill: Callable[[asyncio.subprocess.Process, float], Awaitable[None]] = _kill_group,
) -> CommandResult:
    cap = OutputCap(max_output_chars)
    decoder_tail = b""

    async def read_output() -> None:
        nonlocal decoder_tail
        assert proc.stdout is not None
        while True:
            chunk = await proc.stdout.read(65536)
            if not chunk:
                return
            data = decoder_tail + chunk
            try:
                text = data.decode("utf-8")
                decoder_tail = b""
            except UnicodeDecodeError as exc:
                if exc.start >= len(data) - 3:  # a character cut at the chunk's end
                    text, decoder_tail = data[: exc.start].decode("utf-8"), data[exc.start:]
                else:
                    text, decoder_tail = data.decode("utf-8", errors="replace"), b""
            if text:
                live = cap.total < LIVE_SCRUB_CHARS
                cap.add(text)
                if on_output is not None:
                    on_output(scrub(text) if live else text)

    async def pump() -> None:
        reader = asyncio.create_task(read_output(), name=f"command-output-{proc.pid}")
        try:
            # asyncio's wait() also waits for the pipe to close, which a background child
            # can hold open for ever: watch the shell's exit status instead.
            while proc.returncode is None and not reader.done():
                await asyncio.wait({reader}, timeout=0.1)
            if not reader.done():  # the shell is gone, a child holds the pipe: drain, then end it
                done, _ = await asyncio.wait({reader}, timeout=1.0)
                if not done:
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.killpg(proc.pid, signal.SIGKILL)
                    await asyncio.wait({reader}, timeout=2.0)
            await proc.wait()
        finally:
            if not reader.done():
                reader.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await reader

    timed_out = False
    try:
        # asyncio.timeout, not wait_for: on Python 3.11 wait_for can return the inner result
        # when the caller's cancel lands just as the inner await ends (3.12 rebuilt wait_for on
        # asyncio.timeout for that), and the cancelled caller then runs on. A local CI run saw
        # the cancel-at-any-moment test's task return instead of raising, on a loaded 2-core host
        try:
            async with asyncio.timeout(timeout_s):
                await pump()
        except TimeoutError:
            timed_out = True
            await kill(proc, kill_grace_s)
    except BaseException:
        await asyncio.shield(kill(proc, kill_grace_s))
        raise
    # the shell exited; children it left behind in the group must not outlive the call
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    return CommandResult(
        exit_code=None if timed_out else proc.returncode,
        output=scrub(cap.text()),
        timed_out=timed_out,
        duration_s=time.monotonic() - started,
        total_chars=cap.total,
    )
