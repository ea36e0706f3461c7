"""Where a task stands, read from the conversation itself (so a resumed session, or one
switched to the guided protocol half-way, needs no extra bookkeeping): which files were
read, which were changed, whether the tests ran since, and how they ended."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import orjson

from workstation.agent.guided.workspace import is_test_command
from workstation.agent.history import Message
from workstation.agent.prompts import FEEDBACK_OPEN

_FAILED_PREFIXES = ("[ERROR]", "[DENIED]", "[REFUSED]", "[SKIPPED]", "[INTERRUPTED]")
_NOT_ALLOWED = ("[DENIED]", "[REFUSED]")
_EXIT = re.compile(r"^Exit code: (-?\d+)")
EDIT_TOOLS = ("replace_in_file", "write_to_file")


@dataclass(slots=True)
class GuidedState:
    reads: dict[str, int] = field(default_factory=dict)
    """Path → index (in the history) of its last successful read."""
    first_reads: dict[str, str] = field(default_factory=dict)
    """Path → the text its first successful read showed (the code before this session's edits)."""
    changes: dict[str, int] = field(default_factory=dict)
    """Path → index of its last successful change."""
    edit_attempts: dict[str, int] = field(default_factory=dict)
    """``path::target`` → how many times it was rewritten."""
    changed_since_test: int = 0
    test_runs: int = 0
    last_test_passed: bool | None = None
    last_test_output: str = ""
    tests_refused: str = ""
    """Why the test command may not run in this session (denied by the user, or refused:
    no one can approve it), as its result said; empty while it may. Asking again gets the
    same answer, so the tests are then left out of the steps (they are not retried)."""
    last_call: tuple[str, str] | None = None
    """(tool, arguments JSON) of the last call that succeeded."""
    completed: bool = False

    @property
    def changed_any(self) -> bool:
        return bool(self.changes)

    def shown_current(self, path: str) -> bool:
        """The model saw this file as it is now (read, or written by itself, since its last
        change)."""
        read = self.reads.get(path)
        return read is not None and read >= self.changes.get(path, -1)

    def attempts(self, path: str, target: str) -> int:
        return self.edit_attempts.get(f"{path}::{target}", 0)


def _args(call: dict[str, Any]) -> dict[str, Any]:
    fn = call.get("function") or {}
    raw = fn.get("arguments") or "{}"
    try:
        value = orjson.loads(raw) if isinstance(raw, str) else raw
    except orjson.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def _strip_read_header(text: str) -> str:
    if text.startswith("[") and "]\n" in text.split("\n", 1)[0] + "\n":
        first, _, rest = text.partition("\n")
        if first.endswith("]") and ":" in first:
            return rest
    return text


def _is_feedback(content: object) -> bool:
    """A user's message (a reply or follow-up, ``prompts.user_feedback``), in text or with images."""
    if isinstance(content, list):
        content = next((p.get("text") for p in content if isinstance(p, dict) and p.get("type") == "text"), "")
    return isinstance(content, str) and content.startswith(FEEDBACK_OPEN)


def read_state(messages: list[Message], test_command: str | None) -> GuidedState:
    """Fold the history into a :class:`GuidedState`."""
    state = GuidedState()
    calls: dict[str, tuple[str, dict[str, Any], str]] = {}
    for index, message in enumerate(messages):
        role = message.get("role")
        if role == "assistant":
            for call in message.get("tool_calls") or ():
                fn = call.get("function") or {}
                calls[call.get("id", "")] = (fn.get("name", ""), _args(call), fn.get("arguments") or "{}")
            continue
        if role == "user" and _is_feedback(message.get("content")):
            # a person spoke after a refusal or a finish: they may allow the tests now, or
            # want more; asked again, a headless session is refused once more and stops there
            state.tests_refused = ""
            state.completed = False
            continue
        if role != "tool":
            continue
        found = calls.get(message.get("tool_call_id", ""))
        if found is None:
            continue
        name, args, raw = found
        text = message.get("content") or ""
        if not isinstance(text, str):
            continue
        if text.startswith(_FAILED_PREFIXES):
            if (name == "execute_command" and text.startswith(_NOT_ALLOWED)
                    and is_test_command(str(args.get("command", "")), test_command)):
                state.tests_refused = text.split("\n", 1)[0][:300]
            continue
        path = str(args.get("path", ""))
        if name == "read_file":
            state.reads[path] = index
            state.first_reads.setdefault(path, _strip_read_header(text))
        elif name in EDIT_TOOLS:
            target = str(args.get("target", ""))
            key = f"{path}::{target}"
            state.edit_attempts[key] = state.edit_attempts.get(key, 0) + 1
            if "is unchanged" not in text.split("\n", 1)[0]:
                state.changes[path] = index
                state.reads[path] = index  # the model wrote it: it knows the new text
                state.changed_since_test += 1
        elif name == "execute_command":
            command = str(args.get("command", ""))
            if is_test_command(command, test_command):
                match = _EXIT.match(text)
                state.test_runs += 1
                state.last_test_passed = bool(match and int(match.group(1)) == 0)
                state.last_test_output = text
                state.changed_since_test = 0
        elif name == "attempt_completion":
            state.completed = True
        state.last_call = (name, raw)
    return state


def failure_summary(output: str, max_lines: int = 12, max_chars: int = 900) -> str:
    """The lines of a test run that say what failed (pytest's ``E`` lines and its summary)."""
    lines = output.splitlines()
    keep = [ln for ln in lines if ln.startswith(("E ", ">", "FAILED", "ERROR")) or " failed" in ln or "Error" in ln]
    text = "\n".join(keep[:max_lines]) if keep else "\n".join(lines[-max_lines:])
    return text[:max_chars]


def request_view(messages: list[Message], *, keep_exchanges: int = 2) -> list[Message]:
    """What a guided turn sends: the system prompt and the task, a note of how many steps
    are left out, and the last ``keep_exchanges`` calls with their results. A small model
    gains nothing from its old drafts (it copies them), and the prompt stays short; the
    steps left out are in the state (files read and changed, the last test run)."""
    starts = [i for i, m in enumerate(messages) if m.get("role") == "assistant"]
    if len(starts) <= keep_exchanges:
        return list(messages)
    head = messages[: starts[0]]
    cut = starts[-keep_exchanges]
    left_out = len(starts) - keep_exchanges
    note: Message = {"role": "user", "content": f"[{left_out} earlier step{'s' if left_out > 1 else ''} "
                                                  "not shown: files read, drafts tried, test runs.]"}
    return [*head, note, *messages[cut:]]
