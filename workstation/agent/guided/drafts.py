"""Drafts of one function's new code: the block they are held to, which one to try, and
the queue of those not tried yet.

A small model asked for several drafts at once (vLLM's ``n``: one prefill, decoded as a
batch) writes some that do not parse, some that change nothing and some that do what the
task asks. The one tried first parses, changes something, uses most of the code the task
spells out that the old version lacks (``self.items[number - 1]``), and changes the fewest
lines; the tests decide whether it is right. The others wait in the session's
:class:`GuidedMemory`: when the tests fail, the next edit of the same function tries the next
draft without asking the model again (generate, then test), and new ones are drawn only
when the queue is empty.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field

from workstation.agent.guided.actions import regex_escape

_TOKEN = re.compile(r"\w+|[^\w\s]")


def body_regex(kind: str, must_contain: str | None = None) -> str:
    """The lines after the header: indented (a function or class body), or, for an
    assignment, also closing brackets; one of them holds ``must_contain``; then the fence."""
    start = r"[ \t\)\]\}]" if kind == "assign" else r"[ \t]"
    line = f"({start}[^\\n]*)?\\n"
    if must_contain is not None:
        forced = start + r"[^\n]*" + regex_escape(must_contain) + r"[^\n]*\n"
        return f"({line})*{forced}({line})*```"
    if kind == "assign":
        return f"({line})*```"
    return start + r"[^\n]*\n" + f"({line})*```"


def code_regex(language: str, header: str | None, kind: str, must_contain: str | None = None) -> str:
    """A fenced block of ``language`` that starts with ``header`` (None: a whole file) and,
    given ``must_contain``, has it on one of its lines."""
    fence = regex_escape(f"```{language}\n")
    if header is None:  # a whole file: any lines but a closing fence
        if must_contain is not None:
            return fence + r"([^`\n][^\n]*\n|\n)*[^`\n]*" + regex_escape(must_contain) + \
                r"[^\n]*\n([^`\n][^\n]*\n|\n)*```"
        return fence + r"([^`\n][^\n]*\n|\n)*```"
    return fence + regex_escape(header + "\n") + body_regex(kind, must_contain)


def extract_code(text: str) -> str:
    """The code inside a fenced block, ending with one newline."""
    body = text.split("\n", 1)[1] if text.startswith("```") and "\n" in text else text
    if body.rstrip().endswith("```"):
        body = body.rstrip()[:-3]
    return body.rstrip("\n") + "\n"


def max_draft_tokens(before: str, cap: int) -> int:
    """Room for a rewrite of ``before``: about twice its length (a draft that runs on and
    on is cut there instead of at the turn's whole budget)."""
    return max(128, min(cap, 2 * len(before) // 3 + 96))


@dataclass(slots=True)
class Draft:
    text: str
    """As the model wrote it (the fenced block)."""
    new_text: str
    """The whole file with it applied."""
    problem: str | None
    """Why it cannot be kept (does not parse, changes nothing), or None."""
    hits: int = 0
    changed_lines: int = 0
    ident: str = ""
    """What tells it apart from other drafts (for Python: what the code does); empty: its text."""


def _trigrams(text: str) -> set[tuple[str, ...]]:
    tokens = _TOKEN.findall(text)
    return {tuple(tokens[i:i + 3]) for i in range(len(tokens) - 2)}


def score(drafts: list[Draft], before: str, task: str) -> None:
    """Fill ``hits`` (task trigrams the draft has and ``before`` lacks) and ``changed_lines``."""
    wanted = _trigrams(task) - _trigrams(before)
    old_lines = before.splitlines()
    for draft in drafts:
        draft.hits = len(wanted & _trigrams(draft.text))
        diff = difflib.ndiff(old_lines, draft.text.splitlines()[1:-1])
        draft.changed_lines = sum(1 for line in diff if line.startswith(("+ ", "- ")))


def rank(drafts: list[Draft], before: str, task: str) -> list[Draft]:
    """The usable drafts, best first (each distinct one once: by ``ident``, else text)."""
    seen: set[str] = set()
    usable: list[Draft] = []
    for draft in drafts:
        if draft.problem is None and (draft.ident or draft.text) not in seen:
            seen.add(draft.ident or draft.text)
            usable.append(draft)
    score(usable, before, task)
    order = {id(d): i for i, d in enumerate(usable)}
    return sorted(usable, key=lambda d: (-d.hits, d.changed_lines, order[id(d)]))


def pick(drafts: list[Draft], before: str, task: str) -> Draft:
    """The draft to keep (the first when none is usable: the tests will say so)."""
    ranked = rank(drafts, before, task)
    return ranked[0] if ranked else drafts[0]


def layout_key(code: str) -> str:
    """``code`` without trailing whitespace and blank lines at the end (what an edit would not change)."""
    return "\n".join(line.rstrip() for line in code.rstrip().splitlines())


def same_code(a: str | None, b: str | None) -> bool:
    """Equal but for trailing whitespace and blank lines at the end."""
    if a is None or b is None:
        return a is b
    return layout_key(a) == layout_key(b)


@dataclass(slots=True)
class GuidedMemory:
    """What the guided protocol keeps beyond the conversation, per session (in memory only:
    after a restart new drafts are drawn): each file as it was first read, and the drafts of
    one function not tried yet."""

    originals: dict[str, str] = field(default_factory=dict)
    """Path → its text when first read (a condensed history may have lost the read)."""
    key: tuple[str, ...] = ()
    """(path, target, the code they rewrite): the waiting drafts are for that code only."""
    waiting: list[str] = field(default_factory=list)
    """The drafts not tried yet, in the order :meth:`take` hands them out: each once, none
    of ``tried`` (:meth:`keep` makes it so), so the check processes walk this list as it is."""
    tried: set[str] = field(default_factory=set)

    def take(self, key: tuple[str, ...]) -> str | None:
        """The next untried draft for ``key``, best first; None when there is none."""
        if key != self.key or not self.waiting:
            return None
        text = self.waiting.pop(0)
        self.tried.add(text)
        return text

    def keep(self, key: tuple[str, ...], tried: str, rest: list[str]) -> None:
        """``tried`` is being tried now; ``rest`` (best first) wait for later, before those
        already waiting (a draft that is both waits at its first place)."""
        if key != self.key:
            self.key, self.waiting, self.tried = key, [], set()
        self.tried.add(tried)
        self.waiting = [t for t in dict.fromkeys([*rest, *self.waiting]) if t not in self.tried]
