"""Approval policy of the coding agent: which actions run by themselves, which ask first.

Pure rules, no I/O. The agent asks :meth:`ApprovalPolicy.reason_to_ask` before each tool
call; a non-empty answer means "ask a person" (or, headless, refuse with feedback to the
model). The deny-list names commands that always ask, even under "auto-approve all".
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any


class ToolCategory(str, Enum):
    READ = "read"
    """Reads and searches inside the session's root."""
    EDIT = "edit"
    """Writes files inside the session's root."""
    COMMAND = "command"
    """Runs a shell command."""
    OTHER = "other"
    """Anything else that acts on the world."""
    MCP = "mcp"
    """A tool of an MCP server (``mcp__<server>__<tool>``): it may do anything, so only ``mcp``
    (or ``all``) approves it without asking — never ``edit``."""
    INTERACTION = "interaction"
    """Asking the user and finishing: never needs approval."""


DEFAULT_ALWAYS_ASK: tuple[str, ...] = (
    r"\brm\s+(-\S*\s+)*-\S*[rRfF]",   # rm -rf, rm -r, rm -f, rm --force …
    r"\brm\s+(-\S*\s+)*--(recursive|force)\b",
    r"\bgit\s+push\b",
    r"\bgit\s+reset\s+--hard\b",
    r"\bgit\s+clean\b.*\s-\S*f",
    r"\bgit\s+(checkout|restore)\s+(--\s+)?\.(\s|$)",
    r"\b(sudo|doas|pkexec)\b",
    r"(^|[;&|]\s*)su(\s|$)",
    r"\bmkfs(\.\w+)?\b",
    r"\bdd\s+.*\bof=",
    r"\bchmod\s+(-\S+\s+)*-R\b",
    r"\bchown\b",
    r"\b(shutdown|reboot|halt|poweroff)\b",
    r"\b(kill|pkill|killall)\b",
    r"(curl|wget)\b[^|]*\|\s*(ba|z|da)?sh\b",
    r":\(\)\s*\{",                      # fork bomb
    r">\s*/dev/(sd|nvme|hd)",
)
"""Regular expressions (searched, case-sensitive) of commands that always need a person."""


_ALL = frozenset({ToolCategory.READ, ToolCategory.EDIT, ToolCategory.COMMAND, ToolCategory.OTHER, ToolCategory.MCP})


@dataclass(frozen=True, slots=True)
class ApprovalPolicy:
    """Which tool categories run without asking, and which commands always ask."""

    auto_approve: frozenset[ToolCategory] = frozenset({ToolCategory.READ})
    always_ask: tuple[str, ...] = DEFAULT_ALWAYS_ASK
    _compiled: tuple[re.Pattern[str], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_compiled", tuple(re.compile(p) for p in self.always_ask))

    @classmethod
    def parse(cls, spec: str | Iterable[str], *, always_ask: tuple[str, ...] = DEFAULT_ALWAYS_ASK) -> ApprovalPolicy:
        """Build a policy from ``"all"``, ``"none"`` or categories like ``"read,edit"``.

        Raises ``ValueError`` naming the unknown word.
        """
        words = spec.replace(",", " ").split() if isinstance(spec, str) else list(spec)
        cats: set[ToolCategory] = set()
        for word in (w.strip().lower() for w in words):
            if word in ("", "none"):
                continue
            if word == "all":
                cats.update(_ALL)
                continue
            if word in ("commands", "cmd"):
                word = "command"
            try:
                cats.add(ToolCategory(word))
            except ValueError:
                known = ", ".join(["all", "none", "read", "edit", "command", "other", "mcp"])
                raise ValueError(f"unknown approval category '{word}' (known: {known})") from None
        return cls(auto_approve=frozenset(cats), always_ask=always_ask)

    @property
    def approves_all(self) -> bool:
        return _ALL <= self.auto_approve

    def matching_rule(self, command: str) -> str | None:
        """The deny-list pattern ``command`` matches, or None."""
        for pattern in self._compiled:
            if pattern.search(command):
                return pattern.pattern
        return None

    def reason_to_ask(self, category: ToolCategory, command: str | None = None) -> str:
        """Why this action needs a person's approval; the empty string when it does not."""
        if category is ToolCategory.INTERACTION:
            return ""
        if command is not None:
            rule = self.matching_rule(command)
            if rule is not None:
                return f"the command matches the always-ask rule {rule!r}"
        if category in self.auto_approve:
            return ""
        return f"{category.value} actions need approval"

    def describe(self) -> str:
        if self.approves_all:
            return "auto-approve all (deny-list still asks)"
        if not self.auto_approve:
            return "ask for everything"
        return "auto-approve " + ", ".join(sorted(c.value for c in self.auto_approve))


@dataclass(frozen=True, slots=True)
class ApprovalRequest:
    """The exact action waiting for a decision."""

    request_id: str
    session_id: str
    call_id: str
    tool: str
    category: ToolCategory
    arguments: dict[str, Any]
    summary: str
    reason: str
    preview: str = ""
    """What a file edit would change, as a unified diff (``agent/edit_preview.py``); empty
    for other actions."""


@dataclass(frozen=True, slots=True)
class ApprovalDecision:
    """A person's answer: approve, deny with feedback, or approve edited arguments."""

    approved: bool
    feedback: str = ""
    """Told to the model (on deny: why; on approve: optional remark)."""
    arguments: dict[str, Any] | None = None
    """Edited arguments to run instead of the model's (edit-then-approve)."""

    @classmethod
    def approve(cls, feedback: str = "") -> ApprovalDecision:
        return cls(True, feedback)

    @classmethod
    def deny(cls, feedback: str = "") -> ApprovalDecision:
        return cls(False, feedback)

    @classmethod
    def edit(cls, arguments: dict[str, Any], feedback: str = "") -> ApprovalDecision:
        return cls(True, feedback, dict(arguments))
