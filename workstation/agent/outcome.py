"""What ``Agent.run()`` returns, and the agent state each outcome leaves it in."""

from __future__ import annotations

from dataclasses import dataclass

from workstation.agent.history import Message
from workstation.agent.protocols import system_prompt
from workstation.core.agent_events import AgentState, RunStatus, ToolProtocol


@dataclass(frozen=True, slots=True)
class AgentOutcome:
    """Why ``run()`` returned, and what came of it."""

    status: RunStatus
    message: str
    result: str = ""
    """``attempt_completion``'s result (completed)."""
    question: str = ""
    """The question asked (needs_input after ``ask_followup_question``)."""
    options: tuple[str, ...] = ()
    turns: int = 0
    """Model turns in this run."""
    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def ok(self) -> bool:
        return self.status is RunStatus.COMPLETED


class TurnFailed(Exception):
    """A model turn failed for good (retries spent, or an error retrying cannot cure)."""


STATE_AFTER: dict[RunStatus, AgentState] = {
    RunStatus.COMPLETED: AgentState.DONE, RunStatus.NEEDS_INPUT: AgentState.NEEDS_INPUT,
    RunStatus.STOPPED: AgentState.STOPPED, RunStatus.BUDGET_EXHAUSTED: AgentState.FAILED,
    RunStatus.FAILED: AgentState.FAILED,
}


def protocol_of(history: list[Message]) -> ToolProtocol | None:
    """The protocol a persisted history was written in, where it shows (text and guided have
    their own prompts)."""
    if history and history[0].get("role") == "system":
        for protocol in (ToolProtocol.TEXT, ToolProtocol.GUIDED):
            if history[0].get("content") == system_prompt(protocol):
                return protocol
    return None
