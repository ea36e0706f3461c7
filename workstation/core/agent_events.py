"""Events of one coding agent, as frozen past-tense dataclasses, plus its enums.

The agent (``workstation.agent.Agent``) calls its ``on_event`` callback with each of these,
in order, on the event loop's thread. Every event carries ``session_id`` first. Together
they are enough to rebuild the session's transcript (``workstation.agent.transcript``)
and, through :class:`MessageAppended` / :class:`HistoryReplaced`, the exact message
history the agent would resume from.

Order of one model turn: ``AgentStateChanged(… GENERATING)`` → ``TurnStarted`` →
``TextStreamed`` / ``ReasoningStreamed`` / ``ToolCallStreamed`` (many) → ``UsageReported``
→ ``TurnFinished`` → ``MessageAppended`` (the assistant message) → per tool call
``ToolCallStarted`` → [``ApprovalRequested`` → ``ApprovalResolved``] →
[``CommandOutputStreamed`` …] → ``ToolCallFinished`` → ``MessageAppended`` (the result) →
[``CheckpointCreated``]. A run ends with ``RunFinished``.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any

from workstation.core.approvals import ApprovalRequest


class AgentState(str, Enum):
    """Where one agent stands. Names match the fleet's ``SessionState`` where they overlap."""

    IDLE = "idle"
    """Not running: constructed, or between runs."""
    WAITING_SLOT = "waiting_slot"
    """Wants to generate; waits for the fleet's generation slot."""
    GENERATING = "generating"
    """A model turn is streaming (or the history is being condensed)."""
    RUNNING_TOOL = "running_tool"
    AWAITING_APPROVAL = "awaiting_approval"
    PAUSED = "paused"
    NEEDS_INPUT = "needs_input"
    """Asked a question, or made too many mistakes in a row: waits for ``reply()``."""
    DONE = "done"
    """Called ``attempt_completion``."""
    STOPPED = "stopped"
    FAILED = "failed"
    """Engine error that retries did not cure, or a budget ran out."""


class AgentMode(str, Enum):
    PLAN = "plan"
    """May only read and search."""
    ACT = "act"
    """May also edit files and run commands."""


class ToolProtocol(str, Enum):
    """How tool calls travel between the agent and the model."""

    NATIVE = "native"
    """OpenAI ``tools`` with ``tool_choice: "auto"``; raw ``<tool_call>`` text is recovered."""
    TOOL_ONLY = "tool_only"
    """``tool_choice: "required"``: every turn is a tool call (for weak models)."""
    TEXT = "text"
    """XML-style blocks in the reply text (endpoints without tool support)."""
    GUIDED = "guided"
    """Small models: few tools, the next call narrowed by the task's state and held to a
    regular expression (structured outputs), code written one function at a time."""


class RunStatus(str, Enum):
    """Why ``Agent.run()`` returned."""

    COMPLETED = "completed"
    NEEDS_INPUT = "needs_input"
    STOPPED = "stopped"
    BUDGET_EXHAUSTED = "budget_exhausted"
    FAILED = "failed"


class SlotRefused(Exception):
    """The fleet will not start this session's next model turn: its budget is used up, or
    its engine was drained and the session continues on another one. The agent ends its run
    without starting the turn (its history stays whole) and reports ``status``."""

    def __init__(self, message: str, *, status: RunStatus = RunStatus.STOPPED) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True, slots=True)
class AgentStateChanged:
    session_id: str
    old: AgentState
    new: AgentState
    detail: str = ""


@dataclass(frozen=True, slots=True)
class ModeChanged:
    session_id: str
    mode: AgentMode


@dataclass(frozen=True, slots=True)
class ProtocolSelected:
    session_id: str
    protocol: ToolProtocol
    reason: str


@dataclass(frozen=True, slots=True)
class RulesLoaded:
    """The rules files the session follows (in its system prompt), paths relative to the
    worktree root."""

    session_id: str
    files: tuple[str, ...]
    cut: tuple[str, ...] = ()
    """Files cut at the rules cap (a note in the prompt says so)."""
    left_out: tuple[str, ...] = ()
    """Files that did not fit the cap at all."""
    skipped: tuple[str, ...] = ()
    """Files not read, with why (a link out of the worktree, unreadable)."""
    chars: int = 0


@dataclass(frozen=True, slots=True)
class McpServerReady:
    """An MCP server of the session started (its tools, as offered to the model), or could not
    (``error`` says why; the session goes on without it)."""

    session_id: str
    server: str
    tools: tuple[str, ...] = ()
    error: str = ""
    confined: bool = True
    """Its program runs inside the session's sandbox (always true for a URL server)."""


@dataclass(frozen=True, slots=True)
class TurnStarted:
    session_id: str
    turn: int
    """Counts model turns of this agent from 1 (across runs)."""


@dataclass(frozen=True, slots=True)
class TextStreamed:
    session_id: str
    turn: int
    text: str
    tokens: int = 1
    """Tokens in ``text``: streams arrive coalesced, several tokens per event."""


@dataclass(frozen=True, slots=True)
class ReasoningStreamed:
    session_id: str
    turn: int
    text: str
    tokens: int = 1


@dataclass(frozen=True, slots=True)
class ToolCallStreamed:
    """A piece of a tool call while the model still writes it (for live display only)."""

    session_id: str
    turn: int
    index: int
    name: str
    arguments_delta: str
    tokens: int = 1


@dataclass(frozen=True, slots=True)
class UsageReported:
    session_id: str
    turn: int
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    context_tokens: int
    """Tokens the conversation holds after this turn (prompt + completion)."""
    context_window_tokens: int
    model: str = ""
    """What the request named as the model: the session's LoRA adapter, or the base model."""


@dataclass(frozen=True, slots=True)
class TurnFinished:
    session_id: str
    turn: int
    finish_reason: str
    """``stop``, ``tool_calls``, ``length``, or ``error`` when the stream broke."""
    text: str
    tool_calls: int


@dataclass(frozen=True, slots=True)
class ToolCallStarted:
    session_id: str
    call_id: str
    tool: str
    arguments: dict[str, Any]
    """Normalized arguments (treat as read-only)."""
    summary: str
    """One line for people, e.g. ``read_file app.py``."""


@dataclass(frozen=True, slots=True)
class CommandOutputStreamed:
    session_id: str
    call_id: str
    text: str


@dataclass(frozen=True, slots=True)
class ToolCallFinished:
    session_id: str
    call_id: str
    tool: str
    status: str
    """``ok``, ``error``, ``denied``, ``skipped`` or ``interrupted``."""
    result: str
    """What the model is told (possibly capped)."""
    duration_s: float = 0.0
    exit_code: int | None = None
    """A command's exit status (None: not a command, or it was killed at its time limit)."""

    @property
    def ok(self) -> bool:
        return self.status == "ok"


@dataclass(frozen=True, slots=True)
class ApprovalRequested(ApprovalRequest):
    """An action waits for approve / deny / edit-then-approve: the request itself (the exact
    action, why it needs approval), announced as an event and handed to the approver."""


@dataclass(frozen=True, slots=True)
class ApprovalResolved:
    session_id: str
    request_id: str
    approved: bool
    feedback: str = ""
    edited: bool = False
    by: str = "user"
    """``user``, or ``nobody`` when no one could approve (headless) and it was refused."""


@dataclass(frozen=True, slots=True)
class MistakeCounted:
    session_id: str
    count: int
    limit: int
    message: str


@dataclass(frozen=True, slots=True)
class QuestionAsked:
    session_id: str
    call_id: str
    question: str
    options: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class UserMessageAdded:
    session_id: str
    text: str


@dataclass(frozen=True, slots=True)
class ImagesAttached:
    """Images went with the task or with the user's message (shown as thumbnails)."""

    session_id: str
    paths: tuple[str, ...]
    names: tuple[str, ...] = ()
    with_task: bool = False


@dataclass(frozen=True, slots=True)
class CheckpointCreated:
    session_id: str
    commit: str
    message_index: int
    """Length of the message history when the checkpoint was taken."""
    label: str


@dataclass(frozen=True, slots=True)
class CheckpointRestored:
    session_id: str
    commit: str
    files: bool
    conversation: bool


@dataclass(frozen=True, slots=True)
class ContextCondensed:
    session_id: str
    tokens_before: int
    messages_before: int
    messages_after: int
    summary: str


@dataclass(frozen=True, slots=True)
class MessageAppended:
    """One message was appended to the history the agent sends (JSON of the OpenAI message)."""

    session_id: str
    index: int
    role: str
    message_json: str


@dataclass(frozen=True, slots=True)
class HistoryReplaced:
    """The history was rewritten (condensed or restored); JSON list of messages."""

    session_id: str
    messages_json: str


@dataclass(frozen=True, slots=True)
class ErrorOccurred:
    session_id: str
    message: str
    retrying: bool = False


@dataclass(frozen=True, slots=True)
class TaskCompleted:
    session_id: str
    result: str
    command: str = ""


@dataclass(frozen=True, slots=True)
class RunFinished:
    session_id: str
    status: RunStatus
    message: str
    turns: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0


AgentEvent = (
    AgentStateChanged | ModeChanged | ProtocolSelected | RulesLoaded | McpServerReady | TurnStarted | TextStreamed
    | ReasoningStreamed | ToolCallStreamed | UsageReported | TurnFinished | ToolCallStarted
    | CommandOutputStreamed | ToolCallFinished | ApprovalRequested | ApprovalResolved
    | MistakeCounted | QuestionAsked | UserMessageAdded | ImagesAttached | CheckpointCreated
    | CheckpointRestored | ContextCondensed | MessageAppended | HistoryReplaced
    | ErrorOccurred | TaskCompleted | RunFinished
)
"""Any event of an agent."""
