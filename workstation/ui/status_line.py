"""The status bar's summary of the sessions, as one line of words (pure: no widgets)."""

from __future__ import annotations

from collections.abc import Iterable

from workstation.core.session_state import SessionState


def session_summary_line(states: Iterable[SessionState], waiting: int, slots_text: str, tokens_per_s: float,
                         cost_text: str = "") -> str:
    """``32 sessions · 28 running · 3 need you · 1 done · generating 28/32 · 11,840 tok/s ·
    $0.034 at m1 prices``; ``tokens_per_s`` is the fleet's one token rate (the sum of the
    sessions'). The cost is a part of this line, not a label beside it: the status bar's gap
    between labels and a "· " of its own read as a double gap."""
    states = list(states)
    total = len(states)
    parts = [f"{total} session{'s' if total != 1 else ''}"]
    for state, word in ((SessionState.RUNNING, "running"), (SessionState.QUEUED, "queued")):
        n = sum(1 for s in states if s is state)
        if n:
            parts.append(f"{n} {word}")
    if waiting:
        parts.append(f"{waiting} need you")
    for state, word in ((SessionState.DONE, "done"), (SessionState.FAILED, "failed")):
        n = sum(1 for s in states if s is state)
        if n:
            parts.append(f"{n} {word}")
    if slots_text:
        parts.append(slots_text)
    if tokens_per_s >= 1:
        parts.append(f"{tokens_per_s:,.0f} tok/s")
    if cost_text:
        parts.append(cost_text)
    return " · ".join(parts)
