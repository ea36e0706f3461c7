"""Settings of one agent (per session), as one frozen dataclass."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from workstation.agent.mcp_servers import McpServer
from workstation.agent.sandbox import SandboxPolicy
from workstation.core.agent_events import AgentMode
from workstation.core.approvals import ApprovalPolicy


class ProtocolChoice(str, Enum):
    """Which tool-call protocol to use; ``auto`` picks per endpoint and model."""

    AUTO = "auto"
    NATIVE = "native"
    TOOL_ONLY = "tool_only"
    TEXT = "text"
    GUIDED = "guided"


@dataclass(frozen=True, slots=True)
class AgentConfig:
    """How one agent behaves. Budgets count per ``Agent.run()`` call."""

    mode: AgentMode = AgentMode.ACT
    protocol: ProtocolChoice = ProtocolChoice.AUTO
    """``auto``: guided for small models (``guided_max_parameters``), text blocks where the
    endpoint has no tool support, native otherwise; falls back when the server refuses."""
    model_parameters: int | None = None
    """Parameters of the served model, where known (read from its config by the fleet)."""
    guided_max_parameters: int = 1_000_000_000
    """Models with at most this many parameters get the guided protocol. Measured: SmolLM2-135M
    finishes no task with the free protocol; larger models were not measured here."""
    weak_model_patterns: tuple[str, ...] = ("smollm",)
    """When the size is unknown: model names containing one of these (case-insensitive) are
    taken for small models and get the guided protocol."""
    guided_retry_temperature: float = 0.5
    """Guided protocol: sampling temperature of a function's second and later drafts (the
    first draft is greedy)."""
    guided_drafts: int = 6
    """Guided protocol: drafts drawn at once (one request, ``n``) once a function's first
    draft failed; the kept one parses, changes something and uses the task's code most."""
    escalate_after_text_turns: int = 2
    """Native protocol: after this many replies in a row without a tool call, require tools."""
    approval: ApprovalPolicy = field(default_factory=ApprovalPolicy)
    user_present: bool = True
    """False (headless): questions are answered "decide yourself" at once, and run() returns
    instead of waiting when the mistakes limit is reached."""
    temperature: float | None = None
    """None leaves the server's default."""
    max_tokens_per_turn: int = 2048
    context_window_tokens: int = 8192
    """The model's context length (vLLM's ``max_model_len``)."""
    condense_at_fraction: float = 0.75
    """Condense older turns into a summary when the history passes this share of the window."""
    keep_recent_exchanges: int = 2
    """Model turns (with their tool results) kept verbatim when condensing."""
    max_turns: int = 50
    """Model turns per run() before it returns ``budget_exhausted``."""
    max_total_tokens: int | None = None
    """Prompt + completion tokens per run() before it returns ``budget_exhausted``."""
    max_consecutive_mistakes: int = 3
    command_timeout_s: float = 120.0
    command_kill_grace_s: float = 2.0
    command_output_max_chars: int = 12_000
    """Command output kept for the model: head and tail, the middle elided."""
    sandbox: SandboxPolicy = field(default_factory=SandboxPolicy)
    """How commands are confined (bubblewrap, network, resource limits); see agent/sandbox.py."""
    command_env: tuple[tuple[str, str], ...] = ()
    """Variables commands get on top of the scrubbed environment (the session's ports)."""
    read_max_bytes: int = 400_000
    """Files larger than this are refused by read_file unless a line range is given."""
    max_tool_result_chars: int = 24_000
    """Upper bound of any tool result; also capped at ~a quarter of the context window."""
    search_max_results: int = 200
    list_max_entries: int = 400
    checkpoints: bool = True
    """Commit every change to a private ref (needs a git repository)."""
    environment_paths: tuple[str, ...] = ()
    """Paths (relative to the worktree's top) the fleet put there besides git's files: its
    shared links and bootstrap files (``SessionSpec.environment_paths``), the session's
    environment and not its work, so checkpoints leave them out."""
    max_retries: int = 3
    """Retries of a model turn after a retryable engine error (429/5xx, broken stream)."""
    retry_backoff_s: float = 1.0
    environment_listing_entries: int = 60
    """Files listed in the first message's environment details."""
    rules: bool = True
    """Read the repository's rules files (``AGENTS.md``, ``CLAUDE.md``, ``.clinerules``) into
    the system prompt (``agent/rules.py``)."""
    rules_files: tuple[str, ...] = ()
    """Further rules files (absolute paths) the session follows, after the repository's."""
    rules_max_chars: int = 12_000
    """Cap of the rules section (also at most ~15 % of the context window)."""
    mcp_servers: tuple[McpServer, ...] = ()
    """MCP servers whose tools the agent gets (``mcp__<server>__<tool>``), started for each run
    and stopped with it (``agent/mcp/``)."""
    mcp_start_timeout_s: float = 30.0
    """How long one MCP server may take to start and list its tools."""
    takes_images: bool | None = None
    """Whether the model takes images (from its config, ``model_info.fetch_takes_images``);
    images go to it only when True, else they are refused with the reason."""
    rules_root: str = ""
    """Where the search for rules files starts (the worktree's root); empty: the agent's root.
    They are looked for from there down to the agent's root (its working folder)."""

    def result_char_cap(self) -> int:
        """Largest tool result the model sees, given the context window."""
        by_window = int(self.context_window_tokens * 0.25 * 3)
        return max(2_000, min(self.max_tool_result_chars, by_window))
