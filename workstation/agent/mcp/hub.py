"""One session's MCP servers while its agent runs: started, their tools listed and offered
to the model as ``mcp__<server>__<tool>``, called, and stopped with the run.

Each server is an ``mcp.Client`` (the official SDK) over a streamable HTTP URL or over the
stdio of a program started inside the session's sandbox (``stdio.py``). The sandbox rule is
the agents' commands' rule, fail closed (``sandbox_status.py``): where commands are confined,
so is every stdio server; where they are not and a person is there, it starts and each of its
calls asks that person; where nobody is there, or the sandbox is required, it does not start.
A server that fails to start is told (``McpServerReady`` with the error) and left out; the
session goes on with the rest.

Every call is a tool call like any other: the approval policy's category ``mcp`` (which
``edit`` never covers), Plan mode (only tools the server marks read-only), the result cap.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp_types
import orjson
from mcp import Client
from mcp.shared.exceptions import MCPError

from workstation.agent.mcp_servers import McpServer
from workstation.agent.mcp.stdio import ServerProcess, sandboxed_stdio
from workstation.agent.sandbox import SandboxPolicy
from workstation.agent.sandbox_status import Confinement, sandbox_status
from workstation.agent.tool_api import CallOptions, ToolError, ToolRun
from workstation.agent.tool_specs import ToolSpec
from workstation.core import agent_events as ev
from workstation.core.approvals import ToolCategory

log = logging.getLogger(__name__)

PREFIX = "mcp__"
MAX_NAME = 64
_BAD = re.compile(r"[^A-Za-z0-9_-]")


def tool_name(server: str, tool: str, taken: set[str]) -> str:
    """``mcp__<server>__<tool>``, fit for an OpenAI function name (letters, digits, _ and -,
    at most 64), unique among ``taken``."""
    base = f"{PREFIX}{server}__{_BAD.sub('_', tool)}"[:MAX_NAME]
    name, n = base, 2
    while name in taken:
        suffix = f"_{n}"
        name, n = base[: MAX_NAME - len(suffix)] + suffix, n + 1
    return name


def result_text(result: mcp_types.CallToolResult) -> str:
    """What the model is told of a tool's result."""
    parts: list[str] = []
    for block in result.content:
        if isinstance(block, mcp_types.TextContent):
            parts.append(block.text)
        elif isinstance(block, mcp_types.ImageContent | mcp_types.AudioContent):
            parts.append(f"[{block.type} from the tool: {block.mime_type}, {len(block.data) * 3 // 4:,} bytes]")
        elif isinstance(block, mcp_types.EmbeddedResource):
            res = block.resource
            text = getattr(res, "text", None)
            parts.append(text if isinstance(text, str) else f"[resource {res.uri}: {res.mime_type or 'binary'}]")
        elif isinstance(block, mcp_types.ResourceLink):
            parts.append(f"[resource link {block.uri}]")
    if not parts and result.structured_content is not None:
        parts.append(orjson.dumps(result.structured_content).decode())
    return "\n".join(parts) if parts else "(the tool returned nothing)"


def _cap(text: str, max_chars: int) -> str:
    if len(text) <= max_chars:
        return text
    return text[:max_chars] + f"\n[… cut at {max_chars:,} characters]"


@dataclass(slots=True)
class _Connected:
    server: McpServer
    client: Client
    process: ServerProcess | None
    confined: bool
    """The server's program runs in the sandbox (or it is a URL server, no program of ours)."""


class McpHub:
    """The MCP servers of one agent run. ``await start()`` inside the run's task, then
    ``specs`` are its tools; ``await aclose()`` in the same task stops everything."""

    def __init__(self, session_id: str, root: Path, servers: tuple[McpServer, ...], policy: SandboxPolicy, *,
                 user_present: bool, emit: Callable[[ev.AgentEvent], None], max_result_chars: int,
                 start_timeout_s: float = 30.0) -> None:
        self.session_id = session_id
        self.root = root
        self.servers = tuple(s for s in servers if not s.disabled)
        self.policy = policy
        self.user_present = user_present
        self._emit = emit
        self.max_result_chars = max_result_chars
        self.start_timeout_s = start_timeout_s
        self._stack = contextlib.AsyncExitStack()
        self._connected: dict[str, _Connected] = {}
        self._routes: dict[str, tuple[str, str]] = {}
        self.specs: tuple[ToolSpec, ...] = ()

    async def start(self) -> tuple[ToolSpec, ...]:
        taken: set[str] = set()
        specs: list[ToolSpec] = []
        for server in self.servers:
            process = ServerProcess(server) if server.stdio else None
            try:
                tools = await self._connect(server, process)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # one broken server must not end the session
                message = self._why(exc, process)
                log.warning("session %s: MCP server %s: %s", self.session_id, server.name, message)
                self._emit(ev.McpServerReady(self.session_id, server.name, (), message))
                continue
            names: list[str] = []
            for tool in tools:
                name = tool_name(server.name, tool.name, taken)
                taken.add(name)
                names.append(name)
                self._routes[name] = (server.name, tool.name)
                specs.append(self._spec(name, server, tool))
            self._emit(ev.McpServerReady(self.session_id, server.name, tuple(names), "",
                                         self._connected[server.name].confined))
        self.specs = tuple(specs)
        return self.specs

    async def aclose(self) -> None:
        """Stop every server (stdio programs end with their sandbox)."""
        self._connected.clear()
        try:
            await self._stack.aclose()
        except Exception:  # a server that dies badly on the way out must not fail the run
            log.exception("session %s: stopping its MCP servers", self.session_id)

    # ----- internals -----
    @staticmethod
    def _why(exc: BaseException, process: ServerProcess | None) -> str:
        while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
            exc = exc.exceptions[0]
        if isinstance(exc, BaseExceptionGroup):
            text = "; ".join(str(e) or type(e).__name__ for e in exc.exceptions)
        elif isinstance(exc, TimeoutError):
            text = "it did not answer in time"
        else:
            text = str(exc) or type(exc).__name__
        tail = process.last_words() if process is not None else ""
        return f"could not start: {text}" + (f" (its last words: {tail})" if tail else "")

    async def _connect(self, server: McpServer, process: ServerProcess | None) -> list[mcp_types.Tool]:
        confined = True
        if server.stdio:
            status = await sandbox_status(self.policy)
            if status.confinement is Confinement.REFUSED:
                raise ToolError(f"not started: {status.refusal}")
            if status.needs_person and not self.user_present:
                raise ToolError(f"not started: programs are not confined here ({status.reason}) and nobody "
                                "is there to approve its calls")
            confined = status.confinement is Confinement.CONFINED
            transport: Any = sandboxed_stdio(server, self.root, self.policy, attended=self.user_present,
                                             process=process)
        else:
            from mcp.client.streamable_http import streamable_http_client

            http = httpx2.AsyncClient(headers=dict(server.headers), timeout=httpx2.Timeout(30.0, read=300.0),
                                      trust_env=False)
            await self._stack.enter_async_context(http)
            transport = streamable_http_client(server.url, http_client=http)
        # the handshake is bounded by the client's read timeout (a scope around entering the
        # client would close before the client's own scopes do); each call passes its own
        client = Client(transport, read_timeout_seconds=self.start_timeout_s, cache=None)
        inner = contextlib.AsyncExitStack()
        try:
            await inner.enter_async_context(client)
            with anyio.fail_after(self.start_timeout_s):
                tools: list[mcp_types.Tool] = []
                cursor: str | None = None
                for _ in range(50):
                    page = await client.list_tools(cursor=cursor)
                    tools.extend(page.tools)
                    cursor = page.next_cursor
                    if not cursor:
                        break
        except BaseException:
            with anyio.CancelScope(shield=True):
                with contextlib.suppress(Exception):
                    await inner.aclose()
            raise
        self._stack.push_async_exit(inner)
        self._connected[server.name] = _Connected(server, client, process, confined)
        return tools

    def _spec(self, name: str, server: McpServer, tool: mcp_types.Tool) -> ToolSpec:
        schema = dict(tool.input_schema or {"type": "object"})
        schema.setdefault("type", "object")
        schema.pop("title", None)
        description = (tool.description or tool.title or tool.name).strip()
        read_only = bool(tool.annotations and tool.annotations.read_only_hint)

        async def run(box: Any, args: dict[str, Any], options: CallOptions) -> ToolRun:
            return await self.call(name, args)

        return ToolSpec(
            name, ToolCategory.MCP, f"{description} (MCP server {server.name})", (), read_only, run=run,
            shell=server.stdio and not self._connected[server.name].confined, mark="◆",
            input_schema=schema,
        )

    async def call(self, name: str, args: dict[str, Any]) -> ToolRun:
        route = self._routes.get(name)
        connected = self._connected.get(route[0]) if route else None
        if route is None or connected is None:
            raise ToolError(f"{name} is not available (its MCP server is not running)", mistake=False)
        server, tool = route
        try:
            result = await connected.client.call_tool(tool, args, read_timeout_seconds=connected.server.timeout_s)
        except MCPError as exc:
            raise ToolError(f"the MCP server {server} refused the call: {exc.error.message}") from None
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream) as exc:
            tail = connected.process.last_words() if connected.process else ""
            raise ToolError(f"the MCP server {server} is gone ({type(exc).__name__})"
                            + (f"; its last words: {tail}" if tail else ""), mistake=False) from None
        except TimeoutError:
            raise ToolError(f"the MCP server {server} did not answer within {connected.server.timeout_s:g} s",
                            mistake=False) from None
        text = _cap(result_text(result), self.max_result_chars)
        if result.is_error:
            raise ToolError(f"{tool} (MCP server {server}) failed: {text}")
        return ToolRun(text, False)
