"""Context accounting and condensing (pure functions; the loop does the model call).

The loop knows the real size of the conversation after each turn from the stream's
``usage`` (prompt + completion tokens) and estimates what it appended since. Past
``condense_at_fraction`` of the window it condenses: the system prompt and the task
message stay byte-identical (the shared cache prefix), older turns become one summary
message, and the last few turns stay verbatim.
"""

from __future__ import annotations

from dataclasses import dataclass

from workstation.agent.history import Message, estimate_tokens, exchange_starts
from workstation.agent.prompts import condensed_message

HEAD_MESSAGES = 2
"""System prompt and task message: never condensed."""


@dataclass(frozen=True, slots=True)
class CondensePlan:
    head: list[Message]
    middle: list[Message]
    tail: list[Message]


def plan_condense(messages: list[Message], *, keep_exchanges: int, tail_budget_tokens: int) -> CondensePlan | None:
    """Split the history into kept head, condensed middle and kept tail; None if nothing to cut.

    The tail starts at an assistant message (so no tool result loses its call) and holds
    at most ``keep_exchanges`` turns and about ``tail_budget_tokens``.
    """
    starts = [i for i in exchange_starts(messages) if i >= HEAD_MESSAGES]
    if not starts:
        return None
    keep = max(1, keep_exchanges)
    cut = starts[-keep] if len(starts) >= keep else starts[0]
    while estimate_tokens(messages[cut:]) > tail_budget_tokens:
        later = [s for s in starts if s > cut]
        if not later:
            break
        cut = later[0]
    middle = messages[HEAD_MESSAGES:cut]
    if not middle:
        # Nothing older to fold: the last turn alone is big; the caller trims results instead.
        return None
    return CondensePlan(messages[:HEAD_MESSAGES], middle, messages[cut:])


def trim_tool_results(messages: list[Message], max_chars: int) -> list[Message]:
    """Copies of ``messages`` whose tool/user results longer than ``max_chars`` are cut."""
    out: list[Message] = []
    for i, m in enumerate(messages):
        content = m.get("content")
        if i >= HEAD_MESSAGES and m.get("role") in ("tool", "user") and isinstance(content, str) \
                and len(content) > max_chars:
            m = {**m, "content": content[:max_chars] + f"\n[… cut to save space: {len(content) - max_chars:,} "
                                                       f"characters omitted]"}
        out.append(m)
    return out


def facts_summary(files_read: list[str], files_changed: list[str], commands_run: list[str]) -> str:
    """What the agent did, from its own records (always part of a summary)."""
    lines: list[str] = []
    if files_read:
        lines.append("Files read: " + ", ".join(dict.fromkeys(files_read[-30:])))
    if files_changed:
        lines.append("Files changed: " + ", ".join(dict.fromkeys(files_changed[-30:])))
    if commands_run:
        lines.append("Commands run: " + "; ".join(c[:80] for c in commands_run[-10:]))
    return "\n".join(lines)


def build_condensed(plan: CondensePlan, summary: str) -> list[Message]:
    return [*plan.head, {"role": "user", "content": condensed_message(summary)}, *plan.tail]
