"""The seam between the fleet and the coding agent.

The fleet builds an agent for a session through an :data:`AgentFactory` from an
:class:`AgentSetup` (everything the agent needs: root, task, endpoint, the history to resume
from, callbacks) and drives it through the small :class:`AgentHandle` protocol. The real
factory wraps ``workstation.agent.Agent`` (:func:`real_agent_factory`); tests may pass their
own to drive the fleet deterministically.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from workstation.core.approvals import ApprovalDecision, ApprovalRequest
from workstation.core.endpoints import Endpoint
from workstation.fleet.session import SessionSpec

Approver = Callable[[ApprovalRequest], Awaitable[ApprovalDecision]]


@dataclass(frozen=True, slots=True)
class AgentSetup:
    session_id: str
    name: str
    root: Path
    """The session's worktree: the agent's jail."""
    task: str
    spec: SessionSpec
    endpoint: Endpoint
    history: list[dict[str, Any]]
    """Messages to resume from (empty: a fresh start with ``task``)."""
    user_message: str | None
    """A follow-up from the user to add before continuing (answer, new instruction)."""
    on_event: Callable[[object], None]
    approver: Approver | None
    """None when nobody can approve (headless): such actions are refused to the model."""
    generation_slot: Callable[[], AbstractAsyncContextManager[Any]]


class AgentHandle(Protocol):
    """What the fleet needs of an agent."""

    async def run(self) -> Any:
        """Work until done, needing input, stopped, failed; the result (or the last
        ``RunFinished`` event) carries ``status`` (``RunStatus``) and ``message``."""
        ...

    def stop(self) -> None:
        ...


AgentFactory = Callable[[AgentSetup], AgentHandle]
