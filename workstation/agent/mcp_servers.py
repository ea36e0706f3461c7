"""MCP servers as data: the usual ``mcpServers`` JSON shape (Claude Desktop, Cline, Cursor).

::

    {"mcpServers": {
        "notes":  {"command": "python", "args": ["notes_server.py"], "env": {"NOTES_DIR": "."}},
        "search": {"url": "http://127.0.0.1:8931/mcp", "headers": {"Authorization": "Bearer …"}}
    }}

A server has a ``command`` (stdio: started inside the session's sandbox, in its worktree) or
a ``url`` (streamable HTTP). Also understood: ``cwd`` (relative to the worktree), ``timeout``
(seconds per call, Cline's key), ``disabled``, ``type``/``transportType``
(``stdio``, ``http``, ``streamable-http``, ``streamableHttp``). Keys other tools keep for
themselves (``autoApprove``, ``alwaysAllow`` …) are ignored: every call goes through the app's
own approval policy. Server names become part of tool names (``mcp__<server>__<tool>``), so
they are letters, digits, ``_`` and ``-``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workstation.core.errors import UserError

NAME = re.compile(r"^[A-Za-z0-9_-]{1,32}$")
DEFAULT_CALL_TIMEOUT_S = 60.0
_STDIO, _HTTP = "stdio", "http"
_TYPES = {"stdio": _STDIO, "http": _HTTP, "streamable-http": _HTTP, "streamablehttp": _HTTP,
          "streamable_http": _HTTP}
_KNOWN = {"command", "args", "env", "cwd", "url", "headers", "timeout", "disabled", "type", "transportType"}
_IGNORED = {"autoApprove", "alwaysAllow", "description", "name", "enabled"}


@dataclass(frozen=True, slots=True)
class McpServer:
    """One configured MCP server."""

    name: str
    command: str = ""
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    cwd: str = ""
    """Relative to the session's worktree (absolute is taken as is)."""
    url: str = ""
    headers: tuple[tuple[str, str], ...] = ()
    timeout_s: float = DEFAULT_CALL_TIMEOUT_S
    disabled: bool = False

    @property
    def stdio(self) -> bool:
        return bool(self.command)

    def to_json(self) -> dict[str, Any]:
        """This server in the ``mcpServers`` shape (``parse_servers`` reads it back)."""
        out: dict[str, Any] = {}
        if self.stdio:
            out["command"] = self.command
            if self.args:
                out["args"] = list(self.args)
            if self.env:
                out["env"] = dict(self.env)
            if self.cwd:
                out["cwd"] = self.cwd
        else:
            out["url"] = self.url
            if self.headers:
                out["headers"] = dict(self.headers)
        if self.timeout_s != DEFAULT_CALL_TIMEOUT_S:
            out["timeout"] = self.timeout_s
        if self.disabled:
            out["disabled"] = True
        return out


def _strings(where: str, key: str, value: Any) -> dict[str, str]:
    if not isinstance(value, Mapping) or not all(isinstance(k, str) and isinstance(v, str | int | float)
                                                 for k, v in value.items()):
        raise UserError(f"{where}: {key} must be an object of text values")
    return {k: str(v) for k, v in value.items()}


def _server(where: str, name: str, raw: Any) -> McpServer:
    if not NAME.match(name) or "__" in name:
        raise UserError(f"{where}: the server name {name!r} must be 1–32 letters, digits, _ or - (no __) "
                        "(it becomes part of its tools' names, mcp__<server>__<tool>)")
    here = f"{where}: server {name!r}"
    if not isinstance(raw, Mapping):
        raise UserError(f"{here} must be an object with a command or a url")
    unknown = set(raw) - _KNOWN - _IGNORED
    if unknown:
        raise UserError(f"{here} has unknown key(s) {', '.join(sorted(unknown))}",
                        hint=f"known: {', '.join(sorted(_KNOWN))}")
    kind = raw.get("type", raw.get("transportType"))
    if kind is not None and (not isinstance(kind, str) or kind.lower() not in _TYPES):
        raise UserError(f"{here}: type {kind!r} is not one of stdio, http, streamable-http "
                        "(the older SSE transport is not supported)")
    command, url = raw.get("command"), raw.get("url")
    if bool(command) == bool(url):
        raise UserError(f"{here} needs exactly one of \"command\" (a program started for the session) "
                        "or \"url\" (a streamable HTTP server)")
    if kind is not None and _TYPES[kind.lower()] != (_STDIO if command else _HTTP):
        raise UserError(f"{here}: type {kind!r} does not fit its {'command' if command else 'url'}")
    timeout = raw.get("timeout", DEFAULT_CALL_TIMEOUT_S)
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
        raise UserError(f"{here}: timeout must be a number of seconds above 0")
    disabled = raw.get("disabled", False)
    if not isinstance(disabled, bool):
        raise UserError(f"{here}: disabled must be true or false")
    if command:
        if not isinstance(command, str) or not command.strip():
            raise UserError(f"{here}: command must be a program name or path")
        args = raw.get("args", [])
        if not isinstance(args, list) or not all(isinstance(a, str | int | float) for a in args):
            raise UserError(f"{here}: args must be a list of strings")
        cwd = raw.get("cwd", "")
        if not isinstance(cwd, str):
            raise UserError(f"{here}: cwd must be a path")
        if "headers" in raw:
            raise UserError(f"{here}: headers are for url servers")
        env = _strings(here, "env", raw.get("env", {}))
        return McpServer(name, command=command, args=tuple(str(a) for a in args), env=tuple(sorted(env.items())),
                         cwd=cwd, timeout_s=float(timeout), disabled=disabled)
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise UserError(f"{here}: url must start with http:// or https://")
    for key in ("args", "env", "cwd"):
        if key in raw:
            raise UserError(f"{here}: {key} is for command servers")
    headers = _strings(here, "headers", raw.get("headers", {}))
    return McpServer(name, url=url, headers=tuple(sorted(headers.items())), timeout_s=float(timeout),
                     disabled=disabled)


def parse_servers(data: Any, where: str) -> tuple[McpServer, ...]:
    """Servers from ``{"mcpServers": {...}}`` (or the inner object itself), in file order."""
    if isinstance(data, Mapping) and "mcpServers" in data:
        extra = set(data) - {"mcpServers"}
        if extra:
            raise UserError(f"{where}: unknown top-level key(s) {', '.join(sorted(extra))}",
                            hint='the shape is {"mcpServers": {"NAME": {"command": …} | {"url": …}}}')
        data = data["mcpServers"]
    if not isinstance(data, Mapping):
        raise UserError(f"{where}: mcpServers must be an object of servers by name",
                        hint='{"mcpServers": {"NAME": {"command": "…", "args": […]}}}')
    return tuple(_server(where, str(name), raw) for name, raw in data.items())


def load_servers(path: Path | str) -> tuple[McpServer, ...]:
    """Servers from an ``mcpServers`` JSON file; a clear :class:`UserError` for anything wrong."""
    p = Path(path).expanduser()
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UserError(f"MCP config {p} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"cannot read the MCP config {p}: {exc}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UserError(f"MCP config {p} is not valid JSON: {exc}") from None
    return parse_servers(data, f"MCP config {p}")


def merge_servers(*groups: Iterable[McpServer]) -> tuple[McpServer, ...]:
    """Later groups win by name (the session's servers over the app's)."""
    out: dict[str, McpServer] = {}
    for group in groups:
        for server in group:
            out.pop(server.name, None)
            out[server.name] = server
    return tuple(out.values())


def servers_json(servers: Iterable[McpServer]) -> str:
    """``{"mcpServers": …}`` text (what a session's spec keeps); empty for no servers."""
    items = {s.name: s.to_json() for s in servers}
    return json.dumps({"mcpServers": items}, sort_keys=False) if items else ""


def servers_from_json(text: str, where: str = "the session's MCP servers") -> tuple[McpServer, ...]:
    if not text:
        return ()
    try:
        return parse_servers(json.loads(text), where)
    except json.JSONDecodeError as exc:
        raise UserError(f"{where} are not valid JSON: {exc}") from None
