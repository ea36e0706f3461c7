"""Model calls of the loop: one streamed turn (events as it streams), and condensing."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from workstation.agent.config import AgentConfig
from workstation.agent.context import build_condensed, plan_condense, trim_tool_results
from workstation.agent.history import Message, estimate_tokens
from workstation.agent.prompts import CONDENSE_REQUEST
from workstation.agent.protocols import ReplyCalls, native_reply, request_fields, text_reply
from workstation.agent.tool_specs import OPENAI_TOOLS
from workstation.agent.toolcalls import ToolCallAccumulator
from workstation.core import agent_events as ev
from workstation.core.agent_events import ToolProtocol
from workstation.engine.chat_client import ChatClient, EngineHTTPError, EngineUnreachable, Usage

log = logging.getLogger(__name__)


@dataclass(slots=True)
class TurnResult:
    reply: ReplyCalls
    content: str
    finish_reason: str
    """As the server said it (``stop``, ``tool_calls``, ``length``); empty if it did not."""
    usage: Usage | None


async def stream_turn(
    client: ChatClient, messages: list[Message], protocol: ToolProtocol, *, session_id: str, turn: int,
    max_tokens: int, temperature: float | None, emit: Callable[[ev.AgentEvent], None],
    tools: tuple[dict[str, Any], ...] = OPENAI_TOOLS,
) -> TurnResult:
    """Stream one completion, emitting text / reasoning / tool-call pieces as they come.

    On any failure (engine error, cancellation) ``TurnFinished(finish_reason="error")`` is
    emitted and the exception propagates; nothing is appended to the history here.
    """
    emit(ev.TurnStarted(session_id, turn))
    acc = ToolCallAccumulator()
    parts: list[str] = []
    finish = ""
    usage: Usage | None = None
    # aclosing: a consumer's own error (an emit that raises) ends the request now, not when
    # the generator is collected; until then it counts open and the safe switch's drain waits
    try:
        async with contextlib.aclosing(client.stream_chat(
                messages, max_tokens=max_tokens, temperature=temperature,
                **request_fields(protocol, tools))) as deltas:
            async for delta in deltas:
                # a delta may hold several tokens (streams arrive coalesced): one event each
                if delta.content:
                    parts.append(delta.content)
                    emit(ev.TextStreamed(session_id, turn, delta.content, delta.events or 1))
                if delta.reasoning:
                    emit(ev.ReasoningStreamed(session_id, turn, delta.reasoning,
                                              0 if delta.content else (delta.events or 1)))
                if delta.tool_calls:
                    for index, name, piece, tokens in _joined(acc.add(delta.tool_calls)):
                        emit(ev.ToolCallStreamed(session_id, turn, index, name, piece, tokens))
                if delta.finish_reason:
                    finish = delta.finish_reason
                if delta.usage is not None:
                    usage = delta.usage
    except BaseException:
        emit(ev.TurnFinished(session_id, turn, "error", "".join(parts), 0))
        raise
    content = "".join(parts)
    reply = text_reply(content) if protocol is ToolProtocol.TEXT else native_reply(content, acc.finish())
    return TurnResult(reply, content, finish, usage)


def _joined(pieces: list[tuple[int, str, str]]) -> list[tuple[int, str, str, int]]:
    """Consecutive pieces of one call as one (index, name, text, pieces joined)."""
    out: list[tuple[int, str, str, int]] = []
    for index, name, piece in pieces:
        if out and out[-1][0] == index:
            i, n, text, count = out[-1]
            out[-1] = (i, name or n, text + piece, count + 1)
        else:
            out.append((index, name, piece, 1))
    return out


async def summarize(
    client: ChatClient, messages: list[Message], *, window_tokens: int, temperature: float | None,
    slot: contextlib.AbstractAsyncContextManager | None = None,
) -> str:
    """The model's summary of ``messages`` (no tools); empty when it cannot be had."""
    request = [*messages, {"role": "user", "content": CONDENSE_REQUEST}]
    if estimate_tokens(request) > window_tokens - 600:
        return ""
    parts: list[str] = []
    try:
        async with slot or contextlib.nullcontext():
            async for delta in client.stream_chat(request, max_tokens=400, temperature=temperature):
                parts.append(delta.content)
    except (EngineHTTPError, EngineUnreachable) as exc:
        log.info("condensing without a model summary: %s", exc)
        return ""
    return "".join(parts)[:4_000]


@dataclass(slots=True)
class Condensed:
    messages: list[Message]
    summary: str | None
    """The summary message's text; None when old turns could not be folded and long
    results were only cut."""


async def condense(
    client: ChatClient, messages: list[Message], config: AgentConfig, facts: str, *, force: bool,
    slot: Callable[[], contextlib.AbstractAsyncContextManager] | None = None,
) -> Condensed | None:
    """A shorter history: system prompt and task kept byte-identical, older turns folded into
    one summary (the model's, plus ``facts``), the last turns verbatim. ``force`` (the server
    said the context overflowed) keeps only the last turn. None when nothing can be saved."""
    window = config.context_window_tokens
    keep = 1 if force else config.keep_recent_exchanges
    plan = plan_condense(messages, keep_exchanges=keep, tail_budget_tokens=int(window * 0.35))
    if plan is None:
        trimmed = trim_tool_results(messages, max_chars=max(1_000, window // 2))
        return Condensed(trimmed, None) if trimmed != messages else None
    summary = await summarize(client, plan.head + plan.middle, window_tokens=window,
                              temperature=config.temperature, slot=slot() if slot else None)
    text = "\n".join(part for part in (summary.strip(), facts) if part) or "(no summary available)"
    return Condensed(build_condensed(plan, text), text)
