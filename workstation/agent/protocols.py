"""Tool-call protocols: which one to use, what a request carries, how a reply becomes calls.

========== ============================================ ===================================
protocol   request                                      reply
========== ============================================ ===================================
native     ``tools`` + ``tool_choice: "auto"``          ``tool_calls`` deltas, or hermes
                                                        ``<tool_call>`` text (recovered)
tool_only  ``tools`` + ``tool_choice: "required"``      ``tool_calls`` (vLLM guarantees one)
text       no ``tools``; XML tool list in the prompt    ``<read_file>…</read_file>`` blocks
guided     no ``tools``; ``structured_outputs.regex``   one ``<tool_call>`` of the calls the
           of the calls the task's state allows         state allows (see ``agent/guided/``)
========== ============================================ ===================================

``auto`` picks guided for small models (by parameter count, from the served model's
config; by name where the size is unknown), text where the endpoint is known to lack tool
support, native otherwise. When a server refuses ``tools`` (HTTP 400 naming tools), the
agent steps down native → tool_only → text (guided → tool_only when the server refuses
structured outputs); a native model that keeps answering without a tool is stepped up to
tool_only (same prompt and tools, so the prefix cache holds), and one that repeats a call
that already succeeded is switched to guided.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from workstation.agent.config import AgentConfig, ProtocolChoice
from workstation.agent.guided.texts import SYSTEM_PROMPT_GUIDED
from workstation.agent.history import Message
from workstation.agent.prompts import SYSTEM_PROMPT_NATIVE, SYSTEM_PROMPT_TEXT, text_tool_result
from workstation.agent.tool_specs import OPENAI_TOOLS
from workstation.agent.toolcalls import RawCall, new_call_id, parse_text_protocol, recover_tool_calls
from workstation.core.agent_events import ToolProtocol
from workstation.core.endpoints import Endpoint
from workstation.engine.chat_client import ChatClient, EngineHTTPError, EngineUnreachable, Usage

_TOOL_REFUSAL_WORDS = ("tool", "function")
_GUIDED_REFUSAL_WORDS = ("structured", "regex", "grammar", "guided", "extra")
_CONTEXT_WORDS = ("maximum context length", "context length", "too long", "max_model_len",
                  "maximum model length", "exceeds")


def count_text(parameters: int) -> str:
    """``135M``, ``1.5B``."""
    if parameters >= 1_000_000_000:
        return f"{parameters / 1e9:.3g}B"
    return f"{parameters / 1e6:.3g}M"


def choose_protocol(config: AgentConfig, endpoint: Endpoint) -> tuple[ToolProtocol, str]:
    """The protocol to start with, and why (shown to the user)."""
    if config.protocol is not ProtocolChoice.AUTO:
        return ToolProtocol(config.protocol.value), "chosen in the settings"
    size = config.model_parameters
    limit = config.guided_max_parameters
    if size is not None and size <= limit:
        return ToolProtocol.GUIDED, (f"'{endpoint.model}' has {count_text(size)} parameters (at most "
                                     f"{count_text(limit)}): guided small-model protocol")
    if size is None:
        model = endpoint.model.lower()
        for pattern in config.weak_model_patterns:
            if pattern.lower() in model:
                return ToolProtocol.GUIDED, f"'{endpoint.model}' is a small model: guided small-model protocol"
    if endpoint.native_tools is False:
        return ToolProtocol.TEXT, "the endpoint does not parse tool calls"
    if size is not None:
        return ToolProtocol.NATIVE, f"'{endpoint.model}' has {count_text(size)} parameters: full protocol"
    return ToolProtocol.NATIVE, "the endpoint takes OpenAI tool definitions"


def step_down(protocol: ToolProtocol) -> ToolProtocol | None:
    """The next protocol to try after the server refused this one's request."""
    return {ToolProtocol.NATIVE: ToolProtocol.TOOL_ONLY, ToolProtocol.TOOL_ONLY: ToolProtocol.TEXT,
            ToolProtocol.GUIDED: ToolProtocol.TOOL_ONLY}.get(protocol)


def is_tool_refusal(status: int | None, message: str, protocol: ToolProtocol | None = None) -> bool:
    """The server refused what this protocol's request carries (tools; for guided, the
    structured-output field)."""
    text = message.lower()
    if status != 400 or is_context_overflow(status, message):
        return False
    words = _GUIDED_REFUSAL_WORDS if protocol is ToolProtocol.GUIDED else _TOOL_REFUSAL_WORDS
    return any(w in text for w in words)


def is_context_overflow(status: int | None, message: str) -> bool:
    text = message.lower()
    return status == 400 and any(w in text for w in _CONTEXT_WORDS) and "token" in text


def system_prompt(protocol: ToolProtocol) -> str:
    if protocol is ToolProtocol.GUIDED:
        return SYSTEM_PROMPT_GUIDED
    return SYSTEM_PROMPT_TEXT if protocol is ToolProtocol.TEXT else SYSTEM_PROMPT_NATIVE


def request_fields(protocol: ToolProtocol, tools: tuple[dict[str, Any], ...] = OPENAI_TOOLS) -> dict[str, Any]:
    """``tools`` / ``tool_choice`` keyword arguments of ``ChatClient.stream_chat`` (``tools``:
    the built-in definitions, then a run's MCP tools)."""
    if protocol in (ToolProtocol.TEXT, ToolProtocol.GUIDED):
        return {}
    return {"tools": tools, "tool_choice": "required" if protocol is ToolProtocol.TOOL_ONLY else "auto"}


@dataclass(slots=True)
class ReplyCalls:
    """What one model reply amounts to."""

    message: Message
    """The assistant message to append to the history."""
    calls: list[RawCall]
    """Tool calls to run, in order (text protocol: at most one)."""
    recovered: bool = False
    """Calls came from text the server did not parse."""
    ignored_blocks: int = 0
    """Text protocol: further tool blocks in the same reply that are not run."""
    incomplete: bool = False
    """Text protocol: the tool block was cut off."""


def _safe_arguments(raw: str) -> str:
    """Arguments as stored in the history: the model's text when it is a JSON object, else ``{}``."""
    try:
        call = RawCall("", "", raw)
        return raw if isinstance(call.parsed_arguments(), dict) else "{}"
    except ValueError:
        return "{}"


def native_reply(content: str, calls: list[RawCall]) -> ReplyCalls:
    recovered = False
    if not calls and ("<tool_call>" in content or content.lstrip().startswith(("{", "[", "```"))):
        calls, content = recover_tool_calls(content)
        recovered = bool(calls)
    message: Message = {"role": "assistant", "content": content if content else None}
    if calls:
        message["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": _safe_arguments(c.arguments)}}
            for c in calls
        ]
    elif not content:
        message["content"] = ""
    return ReplyCalls(message, calls, recovered=recovered)


def text_reply(content: str) -> ReplyCalls:
    blocks = parse_text_protocol(content)
    if not blocks:
        return ReplyCalls({"role": "assistant", "content": content}, [])
    first = blocks[0]
    kept = content[: first.end]  # drop what the model wrote after its tool use
    call = RawCall(new_call_id(), first.name, orjson.dumps(first.arguments).decode())
    return ReplyCalls({"role": "assistant", "content": kept}, [call],
                      ignored_blocks=len(blocks) - 1, incomplete=not first.complete)


def tool_result_message(protocol: ToolProtocol, call: RawCall, args: dict[str, Any], text: str) -> Message:
    if protocol is ToolProtocol.TEXT:
        return {"role": "user", "content": text_tool_result(call.name, args, text)}
    return {"role": "tool", "tool_call_id": call.id, "content": text}


def shared_prefix_messages(protocol: ToolProtocol) -> list[Message]:
    """The start every session of ``protocol`` shares: the system prompt (tools travel apart)."""
    return [{"role": "system", "content": system_prompt(protocol)}, {"role": "user", "content": "."}]


async def prime_prefix_cache(client: ChatClient, protocol: ToolProtocol) -> Usage | None:
    """Make the engine compute the shared system prompt + tools once, before sessions start.

    Sessions that start together would otherwise all compute the same prefix in the same
    scheduler step (nothing is cached yet). One request of a single token is enough; a
    fleet calls this once per endpoint. Returns the request's usage; None when refused.
    """
    usage: Usage | None = None
    try:
        async for delta in client.stream_chat(shared_prefix_messages(protocol), max_tokens=1, temperature=0.0,
                                              **request_fields(protocol)):
            usage = delta.usage or usage
    except (EngineHTTPError, EngineUnreachable):
        return None
    return usage or Usage()
