"""Tool calls out of a model's stream: delta accumulation, raw-text recovery, text blocks.

- :class:`ToolCallAccumulator` joins OpenAI streaming ``tool_calls`` deltas (vLLM sends
  ``id``/``type``/``name`` in the first delta of a call and the ``arguments`` JSON in pieces
  after it, keyed by ``index``) into whole calls.
- :func:`recover_tool_calls` finds calls a server did not parse and left as text in
  ``content``: hermes ``<tool_call>{…}</tool_call>`` blocks (also cut off at the end) and
  a bare JSON call or list of calls.
- :func:`parse_text_protocol` reads the XML-style blocks of the text protocol
  (``<read_file><path>a.py</path></read_file>``).

Nothing here validates arguments against a tool; that is ``tool_specs.normalize_arguments``.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import orjson

from workstation.agent.tool_specs import SPECS_BY_NAME, TOOL_NAMES

_ids = itertools.count(1)


def new_call_id() -> str:
    return f"call_ws_{next(_ids):06d}"


@dataclass(slots=True)
class RawCall:
    """One tool call as the model wrote it: name and the arguments' JSON text."""

    id: str
    name: str
    arguments: str
    """JSON text exactly as streamed (kept byte-for-byte in the history)."""

    def parsed_arguments(self) -> Any:
        """The arguments as Python data; raises ``ValueError`` with a model-facing message."""
        text = self.arguments.strip()
        if text == "":
            return {}
        try:
            return orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            hint = " (it looks cut off)" if not text.endswith("}") else ""
            raise ValueError(
                f"the arguments of {self.name or 'the tool call'} are not valid JSON{hint}: {exc}"
            ) from None

    def as_message_entry(self) -> dict[str, Any]:
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}


@dataclass(slots=True)
class _Partial:
    id: str
    name: str
    args: list[str]


class ToolCallAccumulator:
    """Joins streamed ``tool_calls`` deltas into :class:`RawCall` objects.

    Tolerates what servers do differently: a missing ``index`` (continues the latest call,
    or starts a new one when a new ``id`` arrives), the ``name`` repeated in later deltas,
    ``arguments`` sent whole or as a parsed object, and an ``id`` that arrives late.
    """

    def __init__(self) -> None:
        self._calls: dict[int, _Partial] = {}
        self._last: int | None = None

    def __bool__(self) -> bool:
        return bool(self._calls)

    def add(self, deltas: Iterable[dict[str, Any]]) -> list[tuple[int, str, str]]:
        """Feed the ``tool_calls`` list of one chunk; returns ``(index, name, args_delta)`` pieces."""
        pieces: list[tuple[int, str, str]] = []
        for d in deltas:
            if not isinstance(d, dict):
                continue
            index = d.get("index")
            call_id = d.get("id") or ""
            if not isinstance(index, int):
                if self._last is None or (call_id and call_id != self._calls[self._last].id
                                          and self._calls[self._last].id):
                    index = max(self._calls, default=-1) + 1
                else:
                    index = self._last
            part = self._calls.get(index)
            if part is None:
                part = self._calls[index] = _Partial(call_id, "", [])
            elif call_id and not part.id:
                part.id = call_id
            fn = d.get("function") or {}
            name = fn.get("name") or ""
            if name and name != part.name:
                part.name = name if not part.name or name.startswith(part.name) else part.name + name
            args = fn.get("arguments")
            if args is not None and not isinstance(args, str):
                args = orjson.dumps(args).decode()
            if args:
                part.args.append(args)
            self._last = index
            pieces.append((index, part.name, args or ""))
        return pieces

    def finish(self) -> list[RawCall]:
        """The calls in index order; calls without a name are dropped only if also empty."""
        out: list[RawCall] = []
        for index in sorted(self._calls):
            part = self._calls[index]
            args = "".join(part.args)
            if not part.name and not args.strip():
                continue
            out.append(RawCall(part.id or new_call_id(), part.name, args))
        return out


_TOOL_CALL_BLOCK = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.S)


def _call_from_obj(obj: Any) -> RawCall | None:
    if not isinstance(obj, dict):
        return None
    fn = obj.get("function") if isinstance(obj.get("function"), dict) else obj
    name = fn.get("name")
    if not isinstance(name, str) or not name:
        return None
    args = fn.get("arguments", fn.get("parameters", {}))
    text = args if isinstance(args, str) else orjson.dumps(args).decode()
    return RawCall(new_call_id(), name, text)


def _loads_lenient(text: str) -> Any:
    """JSON, or JSON that lost its closing braces at a cut-off; None when hopeless."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        pass
    for tail in ("}", "}}", "\"}}", "\"}"):
        try:
            return orjson.loads(text + tail)
        except orjson.JSONDecodeError:
            continue
    return None


def recover_tool_calls(content: str) -> tuple[list[RawCall], str]:
    """Calls left as text in ``content``, and the text with them removed.

    Finds hermes ``<tool_call>`` blocks (the last one may be cut off), or, when the whole
    reply is JSON, a call object (``{"name":…, "arguments":…}``) or a list of them.
    """
    calls: list[RawCall] = []
    if "<tool_call>" in content:
        for match in _TOOL_CALL_BLOCK.finditer(content):
            call = _call_from_obj(_loads_lenient(match.group(1).strip()))
            if call is not None:
                calls.append(call)
        if calls:
            rest = content[: content.index("<tool_call>")].strip()
            return calls, rest
    text = content.strip()
    if text.startswith("```"):
        text = re.sub(r"^```\w*\s*|\s*```$", "", text)
    if text.startswith(("{", "[")):
        obj = _loads_lenient(text)
        items = obj if isinstance(obj, list) else [obj]
        for item in items:
            call = _call_from_obj(item)
            if call is not None and call.name in SPECS_BY_NAME:
                calls.append(call)
        if calls:
            return calls, ""
    return [], content


@dataclass(frozen=True, slots=True)
class TextBlock:
    """A tool call of the text protocol, with where it ends in the reply."""

    name: str
    arguments: dict[str, str]
    end: int
    complete: bool


USE_MCP_TOOL = "use_mcp_tool"
"""The text protocol's one block for every MCP tool (Cline's): server, tool and JSON arguments."""
_BLOCK_PARAMS: dict[str, tuple[str, ...]] = {
    **{name: tuple(p.name for p in SPECS_BY_NAME[name].params) for name in TOOL_NAMES},
    USE_MCP_TOOL: ("server_name", "tool_name", "arguments"),
}
_OPEN_TAG = re.compile(r"<(" + "|".join(_BLOCK_PARAMS) + r")>")


def parse_text_protocol(content: str) -> list[TextBlock]:
    """The XML-style tool blocks in a reply, in order (unclosed last block: ``complete=False``).

    A block runs to the first closing tag of its tool. Parameter values run to their
    closing tag; ``content`` and ``diff`` to the *last* one inside the block, so file
    content that itself contains such tags survives.
    """
    blocks: list[TextBlock] = []
    pos = 0
    while True:
        match = _OPEN_TAG.search(content, pos)
        if match is None:
            return blocks
        name = match.group(1)
        close = f"</{name}>"
        body_start = match.end()
        close_at = content.find(close, body_start)
        complete = close_at != -1
        body = content[body_start: close_at] if complete else content[body_start:]
        args: dict[str, str] = {}
        for param in _BLOCK_PARAMS[name]:
            open_p, close_p = f"<{param}>", f"</{param}>"
            start = body.find(open_p)
            if start == -1:
                continue
            start += len(open_p)
            end = body.rfind(close_p) if param in ("content", "diff", "arguments") else body.find(close_p, start)
            if end == -1 or end < start:
                if complete:
                    continue
                value = body[start:]
            else:
                value = body[start:end]
            if value.startswith("\n"):
                value = value[1:]
            if value.endswith("\n") and param not in ("content",):
                value = value[:-1]
            args[param] = value if param in ("content", "diff") else value.strip()
        end_pos = close_at + len(close) if complete else len(content)
        blocks.append(TextBlock(name, args, end_pos, complete))
        pos = end_pos
