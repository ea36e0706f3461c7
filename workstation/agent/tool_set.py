"""The tools of one agent run: the built-in ones (constant, ``tool_specs.py``) and, after
them, the tools of the session's MCP servers (``mcp/hub.py``).

Native protocols offer the MCP tools in ``tools`` after the built-in definitions, so the
built-in part of every request stays byte-identical across sessions. The text protocol has no
``tools`` field: its system prompt gets one more section (after the constant part) that
describes Cline's ``use_mcp_tool`` block and lists each MCP tool with its JSON schema; such a
block is turned into the call of ``mcp__<server>__<tool>`` before it runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from workstation.agent.tool_specs import OPENAI_TOOLS, SPECS_BY_NAME, TOOL_NAMES, ToolSpec, canonical_tool_name
from workstation.agent.toolcalls import USE_MCP_TOOL, RawCall


class ToolSet:
    def __init__(self, extra: Sequence[ToolSpec] = ()) -> None:
        self.extra: dict[str, ToolSpec] = {s.name: s for s in extra}
        self.openai: tuple[dict[str, Any], ...] = OPENAI_TOOLS + tuple(s.openai() for s in extra)
        """The ``tools`` field of a native request."""
        self.definition_tokens = _BUILTIN_TOKENS + (_tokens_of(self.openai[len(OPENAI_TOOLS):]) if extra else 0)
        """About how many prompt tokens the definitions take (before the engine reports usage)."""

    def spec(self, name: str) -> ToolSpec | None:
        builtin = canonical_tool_name(name)
        if builtin is not None:
            return SPECS_BY_NAME[builtin]
        text = name.strip().strip("`\"'")
        for prefix in ("functions.", "function.", "tools.", "tool."):
            if text.startswith(prefix):
                text = text[len(prefix):]
        return self.extra.get(text)

    def names(self) -> tuple[str, ...]:
        return (*TOOL_NAMES, *self.extra)

    def translate(self, call: RawCall) -> str | None:
        """A text protocol's ``use_mcp_tool`` block becomes the call of its MCP tool (name and
        JSON arguments); returns a message for the model when the block is unusable."""
        if call.name != USE_MCP_TOOL:
            return None
        try:
            block = call.parsed_arguments()
        except ValueError:
            block = None
        if not isinstance(block, dict):
            return "use_mcp_tool needs <server_name>, <tool_name> and <arguments> (a JSON object)"
        name = f"mcp__{str(block.get('server_name', '')).strip()}__{str(block.get('tool_name', '')).strip()}"
        if name not in self.extra:
            return f"there is no MCP tool {block.get('tool_name')!r} on server {block.get('server_name')!r}"
        raw = block.get("arguments") or "{}"
        try:
            arguments = orjson.loads(raw) if isinstance(raw, str) else raw
        except orjson.JSONDecodeError as exc:
            return f"the <arguments> of use_mcp_tool must be a JSON object: {exc}"
        call.name = name
        call.arguments = orjson.dumps(arguments).decode()
        return None

    def text_section(self) -> str:
        """The text protocol's system prompt section for the MCP tools (empty without any)."""
        if not self.extra:
            return ""
        lines = [
            "# MCP tools",
            "More tools, from the MCP servers of this session. Use one with:",
            f"<{USE_MCP_TOOL}>\n<server_name>the server</server_name>\n<tool_name>the tool</tool_name>\n"
            f"<arguments>{{\"a JSON object\": \"of its parameters\"}}</arguments>\n</{USE_MCP_TOOL}>",
        ]
        for spec in self.extra.values():
            _, server, tool = spec.name.split("__", 2)
            schema = orjson.dumps(spec.input_schema or {}).decode()
            lines.append(f"## {tool} (server {server})\n{spec.description}\nParameters (JSON schema): {schema}")
        return "\n\n".join(lines)


def _tokens_of(definitions: Sequence[dict[str, Any]]) -> int:
    return len(orjson.dumps({"t": list(definitions)}).decode()) // 3


_BUILTIN_TOKENS = _tokens_of(OPENAI_TOOLS)

BUILTIN = ToolSet()
"""The built-in tools alone (a run without MCP servers)."""
