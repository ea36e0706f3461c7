"""A stdio MCP server started inside the session's sandbox, as an MCP client transport.

Why not the SDK's ``stdio_client``: it spawns the program itself and cannot take what the
sandbox needs — the bubblewrap argv, the resource limits and the pids cgroup set in the child
before it execs (``sandbox.prepare``), and the namespace-aware kill (``end_sandbox``). So the
program is started exactly like an agent's command (``agent/sandbox.py``: its worktree
read-write, the rest read-only, secrets hidden, no network unless ``sandbox.network = host``),
and its pipes are bridged to the SDK's message streams here; the SDK's ``Client`` does the
protocol on top. Stopping closes its stdin, waits a moment, then ends the whole sandbox.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import shlex
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import mcp_types
from mcp.shared.message import SessionMessage

from workstation.agent.commands import _kill_group, _shell, scrubbed_environment  # noqa: PLC2701 - one runner
from workstation.agent.mcp_servers import McpServer
from workstation.agent.sandbox import SandboxPolicy, end_sandbox, prepare

log = logging.getLogger(__name__)

STOP_GRACE_S = 2.0
STDERR_LINES = 40


class ServerProcess:
    """The running program of one stdio server: its pipes, its sandbox and its last stderr lines."""

    def __init__(self, server: McpServer) -> None:
        self.server = server
        self.proc: asyncio.subprocess.Process | None = None
        self.sandboxed = False
        self.stderr_tail: collections.deque[str] = collections.deque(maxlen=STDERR_LINES)

    def last_words(self) -> str:
        lines = [ln for ln in self.stderr_tail if ln.strip()][-5:]
        return " | ".join(ln[-200:] for ln in lines)


def server_command(server: McpServer, root: Path) -> str:
    """The shell line that starts ``server`` (in its ``cwd`` below the worktree)."""
    line = "exec " + shlex.join([server.command, *server.args])
    if server.cwd:
        cwd = Path(server.cwd) if os.path.isabs(server.cwd) else root / server.cwd
        line = f"cd {shlex.quote(str(cwd))} && {line}"
    return line


@contextlib.asynccontextmanager
async def sandboxed_stdio(server: McpServer, root: Path, policy: SandboxPolicy, *, attended: bool,
                          process: ServerProcess | None = None) -> AsyncIterator[tuple[object, object]]:
    """Start ``server`` for the session in ``root`` and yield ``(read_stream, write_stream)``
    for ``mcp.Client``. Raises ``ToolError`` when the sandbox policy refuses to run it."""
    state = process or ServerProcess(server)
    env = scrubbed_environment()
    env.update(dict(server.env))  # what the user configured for this server reaches it
    prepared = await prepare(server_command(server, root), str(root), policy, env, _shell(), attended=attended)
    kill = end_sandbox if prepared.sandboxed else _kill_group
    state.sandboxed = prepared.sandboxed
    try:
        proc = await asyncio.create_subprocess_exec(
            *prepared.argv, cwd=str(root), stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, env=prepared.env, start_new_session=True,
            preexec_fn=prepared.preexec_fn, limit=16 << 20,
        )
    except BaseException:
        prepared.release()
        raise
    state.proc = proc
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    stdin, stdout, stderr = proc.stdin, proc.stdout, proc.stderr
    to_client, client_reads = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    client_writes, from_client = anyio.create_memory_object_stream[SessionMessage](0)

    async def read_stdout() -> None:
        async with to_client:
            while True:
                try:
                    raw = await stdout.readline()
                except (ValueError, asyncio.LimitOverrunError) as exc:  # a line past the limit
                    await to_client.send(exc)
                    continue
                if not raw:
                    return
                line = raw.decode("utf-8", "replace").strip()
                if not line:
                    continue
                try:
                    message = mcp_types.jsonrpc_message_adapter.validate_json(line, by_name=False)
                except ValueError as exc:
                    log.info("MCP server %s wrote a line that is not JSON-RPC: %s", server.name, line[:200])
                    await to_client.send(exc)
                    continue
                await to_client.send(SessionMessage(message))

    async def write_stdin() -> None:
        async with from_client:
            async for message in from_client:
                data = message.message.model_dump_json(by_alias=True, exclude_unset=True) + "\n"
                try:
                    stdin.write(data.encode())
                    await stdin.drain()
                except (BrokenPipeError, ConnectionResetError):
                    return

    async def read_stderr() -> None:
        while True:
            raw = await stderr.readline()
            if not raw:
                return
            state.stderr_tail.append(raw.decode("utf-8", "replace").rstrip())

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(read_stdout)
            tg.start_soon(write_stdin)
            tg.start_soon(read_stderr)
            try:
                yield client_reads, client_writes
            finally:
                with anyio.CancelScope(shield=True):
                    await _stop(proc, kill)
                tg.cancel_scope.cancel()
    finally:
        prepared.release()


async def _stop(proc: asyncio.subprocess.Process, kill) -> None:  # type: ignore[no-untyped-def]
    """Close its stdin (the spec's way to ask it to end), wait a moment, then end everything."""
    if proc.stdin is not None:
        with contextlib.suppress(OSError, RuntimeError):
            proc.stdin.close()
    if proc.returncode is None:
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(proc.wait(), timeout=STOP_GRACE_S)
    await kill(proc, 1.0)  # also what it started (a sandbox's namespace, a process group)
    with contextlib.suppress(asyncio.TimeoutError):
        await asyncio.wait_for(proc.wait(), timeout=5.0)
