"""What a run's model turns cost, and how full the context is: one owner for both.

The engine's ``usage`` of a turn counts into the run's totals (the token budget, the
outcome) whether or not the turn produced a reply — a guided turn that failed after a
choice and some drafts still spent their tokens. Only a turn whose reply was appended
also measures the context; what came after it is estimated.
"""

from __future__ import annotations

from dataclasses import dataclass

from workstation.agent.history import Message, estimate_tokens
from workstation.engine.chat_client import Usage


@dataclass(slots=True)
class TokenAccount:
    run_prompt: int = 0
    run_completion: int = 0
    context_tokens: int = 0
    """Prompt and completion of the last turn whose reply is in the history."""
    measured_len: int = 0
    """How many messages ``context_tokens`` covers (0: nothing measured yet)."""

    def new_run(self) -> None:
        self.run_prompt = self.run_completion = 0

    def forget_context(self) -> None:
        """The history was replaced: nothing of it is measured."""
        self.context_tokens = self.measured_len = 0

    @property
    def run_total(self) -> int:
        return self.run_prompt + self.run_completion

    def count(self, usage: Usage, *, history_len: int | None) -> None:
        """A turn's ``usage``; ``history_len``: the history's length with the turn's reply in
        it, or ``None`` for a turn that failed (its tokens count, the context is not measured)."""
        self.run_prompt += usage.prompt_tokens
        self.run_completion += usage.completion_tokens
        if history_len is not None:
            self.context_tokens = usage.prompt_tokens + usage.completion_tokens
            self.measured_len = history_len

    def estimate_context(self, messages: list[Message], unmeasured_extra: int = 0) -> int:
        """The context's size: measured plus what came since, or (nothing measured) the
        estimate of the whole history plus ``unmeasured_extra`` (the tools' schemas)."""
        if self.measured_len == 0:
            return estimate_tokens(messages) + unmeasured_extra
        return self.context_tokens + estimate_tokens(messages[self.measured_len:])


__all__ = ["TokenAccount"]
