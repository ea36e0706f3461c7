"""The message history an agent sends, its persisted form, and repair on resume.

Messages are OpenAI chat messages (plain dicts, JSON-serializable). The history is
append-only between condensings, so every request extends the previous one byte for byte
and vLLM's prefix cache hits.

:class:`AgentSnapshot` is what the fleet persists and resumes from. A resumed history can
end mid-action; :func:`repair_history` answers every tool call that has no result with an
"interrupted" result (never re-running it), except a pending ``ask_followup_question``,
which stays open for the user's answer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from workstation.agent.images import IMAGE_TOKENS_GUESS
from workstation.agent.prompts import INTERRUPTED_RESULT, text_tool_result
from workstation.agent.toolcalls import parse_text_protocol
from workstation.core.agent_events import AgentMode, ToolProtocol

SNAPSHOT_VERSION = 1

Message = dict[str, Any]


@dataclass(slots=True)
class AgentSnapshot:
    """Everything needed to resume an agent after a restart (JSON via :meth:`to_json`)."""

    session_id: str
    messages: list[Message]
    mode: AgentMode = AgentMode.ACT
    protocol: ToolProtocol | None = None
    turns: int = 0
    pending_question_call: str | None = None
    completed: bool = False
    needs_input: bool = False
    context_tokens: int = 0
    files_read: list[str] = field(default_factory=list)
    files_changed: list[str] = field(default_factory=list)
    commands_run: list[str] = field(default_factory=list)
    version: int = SNAPSHOT_VERSION

    def to_json(self) -> str:
        return orjson.dumps({
            "version": self.version, "session_id": self.session_id, "messages": self.messages,
            "mode": self.mode.value, "protocol": self.protocol.value if self.protocol else None,
            "turns": self.turns, "pending_question_call": self.pending_question_call,
            "completed": self.completed, "needs_input": self.needs_input,
            "context_tokens": self.context_tokens, "files_read": self.files_read,
            "files_changed": self.files_changed, "commands_run": self.commands_run,
        }).decode()

    @classmethod
    def from_json(cls, text: str | bytes) -> AgentSnapshot:
        data = orjson.loads(text)
        if data.get("version", 1) > SNAPSHOT_VERSION:
            raise ValueError(f"agent snapshot version {data['version']} is newer than this app knows")
        return cls(
            session_id=data["session_id"], messages=list(data["messages"]),
            mode=AgentMode(data.get("mode", "act")),
            protocol=ToolProtocol(data["protocol"]) if data.get("protocol") else None,
            turns=int(data.get("turns", 0)), pending_question_call=data.get("pending_question_call"),
            completed=bool(data.get("completed")), needs_input=bool(data.get("needs_input")),
            context_tokens=int(data.get("context_tokens", 0)),
            files_read=list(data.get("files_read", [])),
            files_changed=list(data.get("files_changed", [])),
            commands_run=list(data.get("commands_run", [])),
        )


def valid_text(text: str) -> str:
    """``text`` as valid Unicode: bytes that were not UTF-8 (a file name, command output read
    with ``surrogateescape``) become ``\\xNN``, so the text can be sent, stored and shown."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        try:
            return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
        except UnicodeEncodeError:
            return text.encode("utf-8", "backslashreplace").decode("utf-8")


def valid_message(value: Any) -> Any:
    """A message (or part of one) with every string made :func:`valid_text`."""
    if isinstance(value, str):
        return valid_text(value)
    if isinstance(value, dict):
        return {k: valid_message(v) for k, v in value.items()}
    if isinstance(value, list):
        return [valid_message(v) for v in value]
    return value


def message_json(message: Message) -> str:
    return orjson.dumps(message).decode()


def messages_json(messages: list[Message]) -> str:
    return orjson.dumps(messages).decode()


def estimate_tokens(messages: list[Message]) -> int:
    """A rough token count (JSON characters / 3; an image a fixed guess, not its base64); only
    used between real ``usage`` reports."""
    total = 0
    for m in messages:
        content = m.get("content")
        if isinstance(content, list):
            text = [p for p in content if not (isinstance(p, dict) and p.get("type") == "image_url")]
            total += len(message_json({**m, "content": text})) + 3 * IMAGE_TOKENS_GUESS * (len(content) - len(text))
        else:
            total += len(message_json(m))
    return total // 3


@dataclass(frozen=True, slots=True)
class Repair:
    messages: list[Message]
    interrupted: list[str]
    """Call ids answered as interrupted."""
    pending_question_call: str | None


def _text_tool(message: Message) -> str | None:
    content = message.get("content") or ""
    blocks = parse_text_protocol(content) if isinstance(content, str) else []
    return blocks[0].name if blocks else None


def repair_history(messages: list[Message], protocol: ToolProtocol | None) -> Repair:
    """Answer tool calls that have no result; see the module docstring."""
    out: list[Message] = []
    interrupted: list[str] = []
    pending: str | None = None
    i = 0
    n = len(messages)
    while i < n:
        msg = messages[i]
        out.append(msg)
        i += 1
        if msg.get("role") != "assistant":
            continue
        calls = msg.get("tool_calls") or []
        if calls:
            answered: set[str] = set()
            while i < n and messages[i].get("role") == "tool":
                answered.add(messages[i].get("tool_call_id", ""))
                out.append(messages[i])
                i += 1
            for call in calls:
                cid = call.get("id", "")
                if cid in answered:
                    continue
                name = (call.get("function") or {}).get("name", "")
                if i == n and name == "ask_followup_question" and pending is None:
                    pending = cid
                    continue
                out.append({"role": "tool", "tool_call_id": cid, "content": INTERRUPTED_RESULT})
                interrupted.append(cid)
        elif protocol is ToolProtocol.TEXT and i == n:
            tool = _text_tool(msg)
            if tool == "ask_followup_question":
                pending = "text"
            elif tool is not None and tool != "attempt_completion":
                out.append({"role": "user", "content": text_tool_result(tool, {}, INTERRUPTED_RESULT)})
                interrupted.append("text")
    return Repair(out, interrupted, pending)


def exchange_starts(messages: list[Message]) -> list[int]:
    """Indexes of assistant messages (each starts one model turn and its tool results)."""
    return [i for i, m in enumerate(messages) if m.get("role") == "assistant"]
