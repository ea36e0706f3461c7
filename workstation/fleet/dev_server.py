"""A session's dev server: its repository's ``run`` command, started and stopped from its
pane (or ``workstation serve``), inside the sandbox like any command, on its own ports.

The server gets the scrubbed environment plus its port block (``WORKSTATION_PORT`` …, and
``PORT``, which most dev servers read). Where it runs depends on the sandbox, and nothing
is widened for it:

- bubblewrap with ``sandbox.network = "none"`` (the default): the server has no network but
  its own loopback. It is reached from the host through the port bridge
  (``port_bridge.py``) on exactly its session's ports, on the host's 127.0.0.1; the server
  itself reaches nothing (not the engine, not the internet).
- ``network = "host"``: it shares the host's network, as every command of that policy does,
  and listens on the host's ports directly.
- no usable bubblewrap: as for any command, the sandbox refuses an unattended start
  (``mode = "auto"``) or every start (``"required"``); a start a person asked for (the
  pane's button, ``workstation serve``) runs with the limits only, and on the host's network.

Its ports must be free on the host at start (a port taken by another program is named).
It is stopped with its session (stop, remove) and when the fleet closes; with bubblewrap it
also dies with the app (``--die-with-parent``). Its output streams to the pane's Output
(``CommandOutputStreamed``); its start and end are in the transcript as a ``dev_server``
tool call, and ``DevServerChanged`` announces it.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import logging
import os
import shutil
import signal
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from workstation.core import agent_events as ev
from workstation.core.errors import UserError
from workstation.core.fleet_events import DevServerChanged
from workstation.core.secrets import scrub
from workstation.fleet.bootstrap import unseen_in_sandbox
from workstation.fleet.port_bridge import INNER_SOURCE, PortBridge
from workstation.fleet.ports import PortBlock, busy_ports

log = logging.getLogger(__name__)

DEV_SERVER_TOOL = "dev_server"
OUTPUT_TAIL_CHARS = 64_000
STOP_GRACE_S = 3.0


@dataclass(frozen=True, slots=True)
class DevServerStatus:
    session_id: str
    command: str
    url: str
    ports: PortBlock
    sandboxed: bool
    """It runs under bubblewrap."""
    bridged: bool
    """It has no network of its own and is reached through the port bridge."""
    started_at: float
    pid: int


def _sandbox_python(policy: Any) -> str:
    """A Python the sandbox shows, for the bridge's inside half (standard library only)."""
    for candidate in (os.path.realpath(sys.executable), shutil.which("python3") or ""):
        if candidate and os.access(candidate, os.X_OK) and not unseen_in_sandbox(policy, candidate):
            return candidate
    raise UserError("the dev server cannot be bridged: no Python the sandbox shows was found",
                    hint="install python3 outside the app's data folder, or set sandbox.network = \"host\"")


def _shell() -> list[str]:
    bash = shutil.which("bash")
    return [bash, "-c"] if bash else ["/bin/sh", "-c"]


class DevServer:
    """One running server process (with its bridge). Made by :meth:`launch`."""

    def __init__(self, status: DevServerStatus, proc: asyncio.subprocess.Process, prepared: Any,
                 bridge: PortBridge | None, on_output: Callable[[str], None]) -> None:
        self.status = status
        self._proc = proc
        self._prepared = prepared
        self._bridge = bridge
        self._on_output = on_output
        self._tail = ""
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.stopping = False
        self.watch: asyncio.Task[int | None] | None = None

    @classmethod
    async def launch(cls, session_id: str, command: str, cwd: str, block: PortBlock, *, sandbox: Any,
                     attended: bool, on_output: Callable[[str], None]) -> DevServer:
        from workstation.agent.commands import scrubbed_environment
        from workstation.agent.sandbox import NetworkAccess, SandboxMode, prepare, probe_bwrap
        from workstation.agent.tool_api import ToolError

        if sandbox is None:
            raise UserError("the dev server was not started: no sandbox policy was given to the fleet")
        busy = busy_ports(block)
        if busy:
            raise UserError(f"port {busy[0]} of this session is in use by another program",
                            hint="stop what listens there (is this server already running elsewhere?)")
        bridged = False
        if sandbox.mode is not SandboxMode.OFF and sandbox.network is NetworkAccess.NONE:
            bridged = (await probe_bwrap(sandbox.network, bwrap=sandbox.bwrap or None)).usable
        env = {**scrubbed_environment(), **block.env(), "PORT": str(block.first)}
        shell = _shell()
        app_end = inner_end = None
        if bridged:
            app_end, inner_end = socket.socketpair()
            shell = [_sandbox_python(sandbox), "-I", "-S", "-c", INNER_SOURCE, str(inner_end.fileno()),
                     ",".join(str(p) for p in block.ports), "--", *shell]
        try:
            prepared = await prepare(command, cwd, sandbox, env, shell, attended=attended)
        except ToolError as exc:
            for s in (app_end, inner_end):
                if s is not None:
                    s.close()
            raise UserError(f"the dev server was not started: {exc}") from None
        if bridged and not prepared.sandboxed:  # the probe said yes a moment ago
            prepared.release()
            raise UserError("the dev server was not started: the sandbox changed while it started")
        try:
            proc = await asyncio.create_subprocess_exec(
                *prepared.argv, cwd=cwd, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT, env=prepared.env, start_new_session=True,
                preexec_fn=prepared.preexec_fn, pass_fds=(inner_end.fileno(),) if inner_end else ())
        except OSError as exc:
            prepared.release()
            if app_end is not None:
                app_end.close()
            raise UserError(f"the dev server could not be started: {exc}") from exc
        finally:
            if inner_end is not None:
                inner_end.close()
        bridge = PortBridge(app_end, block.ports) if app_end is not None else None
        status = DevServerStatus(session_id, command, f"http://127.0.0.1:{block.first}/", block,
                                 prepared.sandboxed, bridged, time.time(), proc.pid)
        server = cls(status, proc, prepared, bridge, on_output)
        if bridge is not None:
            try:
                await bridge.start()
            except OSError as exc:
                await server._kill()
                raise UserError(f"the dev server's ports {block.describe()} cannot be listened on: {exc}") from exc
        return server

    async def run(self) -> int | None:
        """Pump its output until it exits; its exit status (None when it was killed)."""
        assert self._proc.stdout is not None
        try:
            while chunk := await self._proc.stdout.read(65536):
                self._output(self._decoder.decode(chunk))
            self._output(self._decoder.decode(b"", final=True))
            return await self._proc.wait()
        finally:
            await self._kill()

    def _output(self, text: str) -> None:
        if not text:
            return
        text = scrub(text)
        self._tail = (self._tail + text)[-OUTPUT_TAIL_CHARS:]
        self._on_output(text)

    def output_tail(self, chars: int = 4000) -> str:
        return self._tail[-chars:]

    async def _kill(self) -> None:
        from workstation.agent.sandbox import end_sandbox

        proc = self._proc
        if self._prepared.sandboxed:
            await end_sandbox(proc, STOP_GRACE_S)
        elif proc.returncode is None:
            for sig, wait_s in ((signal.SIGTERM, STOP_GRACE_S), (signal.SIGKILL, 5.0)):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, sig)
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(proc.wait(), wait_s)
                    break
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)  # what it left in its group
        if self._bridge is not None:
            await self._bridge.aclose()
        self._prepared.release()

    async def stop(self) -> None:
        self.stopping = True
        await self._kill()
        if self.watch is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self.watch


class DevServers:
    """The running dev servers, one per session at most; each has a named watch task
    (held here) that pumps its output and notices when it ends."""

    def __init__(self, *, sandbox: Any, emit: Callable[[object], None],
                 emit_event: Callable[[str, object], None]) -> None:
        """``emit`` announces fleet events; ``emit_event(session_id, agent_event)`` writes
        into a session's transcript (the live output too)."""
        self._sandbox = sandbox
        self._emit = emit
        self._emit_event = emit_event
        self._servers: dict[str, DevServer] = {}
        self._starting: set[str] = set()

    def status(self, session_id: str) -> DevServerStatus | None:
        server = self._servers.get(session_id)
        return server.status if server is not None else None

    def running(self) -> list[DevServerStatus]:
        return [s.status for s in self._servers.values()]

    def output_tail(self, session_id: str, chars: int = 4000) -> str:
        server = self._servers.get(session_id)
        return server.output_tail(chars) if server is not None else ""

    async def start(self, session_id: str, command: str, cwd: str, block: PortBlock, *,
                    attended: bool = True) -> DevServerStatus:
        if session_id in self._servers or session_id in self._starting:
            raise UserError("its dev server is already running",
                            hint=f"open {self._servers[session_id].status.url}" if session_id in self._servers else "")
        call_id = f"devserver-{time.time_ns()}"
        emit = self._emit_event
        self._starting.add(session_id)
        try:
            server = await DevServer.launch(
                session_id, command, cwd, block, sandbox=self._sandbox, attended=attended,
                on_output=lambda text: emit(session_id, ev.CommandOutputStreamed(session_id, call_id, text)))
        except UserError as exc:
            self._emit(DevServerChanged(session_id, False, "", str(exc)))
            raise
        finally:
            self._starting.discard(session_id)
        self._servers[session_id] = server
        st = server.status
        how = "bridged to its sandbox" if st.bridged else ("in the sandbox" if st.sandboxed else "unconfined")
        emit(session_id, ev.ToolCallStarted(session_id, call_id, DEV_SERVER_TOOL,
                                            {"command": command, "url": st.url, "ports": block.describe()},
                                            f"dev server: {command} → {st.url}"))
        server.watch = asyncio.create_task(self._watch(session_id, server, call_id),
                                           name=f"dev-server-{session_id}")
        self._emit(DevServerChanged(session_id, True, st.url, f"{st.url} ({how}, ports {block.describe()})"))
        return st

    async def _watch(self, session_id: str, server: DevServer, call_id: str) -> int | None:
        code: int | None = None
        try:
            code = await server.run()
        finally:
            if self._servers.get(session_id) is server:
                del self._servers[session_id]
            ran = time.time() - server.status.started_at
            if server.stopping:
                what, status = f"stopped after {ran:.0f} s", "ok"
            else:
                what, status = f"exited with status {code} after {ran:.0f} s", "ok" if code == 0 else "error"
            tail = server.output_tail(2000).strip()
            self._emit_event(session_id, ev.ToolCallFinished(
                session_id, call_id, DEV_SERVER_TOOL, status, what + (f"\n{tail}" if tail else ""), ran))
            self._emit(DevServerChanged(session_id, False, "", f"dev server {what}"))
        return code

    async def stop(self, session_id: str) -> bool:
        """Stop the session's server; False when none ran."""
        server = self._servers.get(session_id)
        if server is None:
            return False
        await server.stop()
        return True

    async def stop_all(self) -> None:
        for session_id in list(self._servers):
            await self.stop(session_id)
