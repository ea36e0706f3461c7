"""A responder for the scripted server that plays a small, deterministic coding session:
write a note, run a command that appends to a log, read the note back, finish.

The step is the number of assistant messages already in the request, so a session resumed
from any point continues with the next step; the note carries the session's own token
(taken from its task) so cross-talk between worktrees would show.
"""

from __future__ import annotations

import re
from typing import Any

from tests.helpers.scripted_server import Reply, ToolCall

STEPS = 4


def token_of(messages: list[dict[str, Any]]) -> str:
    for m in messages:
        found = re.search(r"token=(\w+)", str(m.get("content") or ""))
        if found:
            return found.group(1)
    return "none"


def make_responder(delay_s: float = 0.0, chunk_chars: int = 4):  # type: ignore[no-untyped-def]
    def respond(body: dict[str, Any], n: int) -> Reply:
        messages = body.get("messages", [])
        step = sum(1 for m in messages if m.get("role") == "assistant")
        token = token_of(messages)
        calls = [
            ToolCall("write_to_file", {"path": "note.txt", "content": f"{token}\n"}),
            ToolCall("execute_command", {"command": "echo ran >> runs.log"}),
            ToolCall("read_file", {"path": "note.txt"}),
            ToolCall("attempt_completion", {"result": f"wrote {token}"}),
        ]
        call = calls[min(step, STEPS - 1)]
        return Reply(text="", tool_calls=[call], delay_s=delay_s, chunk_chars=chunk_chars)

    return respond
