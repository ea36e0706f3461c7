"""What the fleet knows about one session: its spec (what the user asked for), its record
(what the fleet made of it: worktree, branch, endpoint, state)."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from workstation.core.fleet_events import SessionSummary
from workstation.core.session_state import SessionState


@dataclass(frozen=True, slots=True)
class SessionSpec:
    """What a new session should do and where. Persisted as the session's settings."""

    task: str
    repo: str
    """A local repository folder, or a URL / path to clone (see ``clone``)."""
    name: str | None = None
    """Session name (branch ``ws/<name>``); None derives one from the task."""
    base_branch: str | None = None
    """Branch to start from; None takes the one checked out in the repository."""
    clone: bool = False
    """``repo`` is a URL or path to clone into the fleet's folder first."""
    init_if_plain: bool = False
    """``repo`` may be a plain folder: ``git init`` it (with a first commit) instead of refusing."""
    mode: str = "act"
    """Agent mode: ``plan`` (read and search only) or ``act``."""
    auto_approve: tuple[str, ...] = ()
    """Tool categories approved without asking (``read``, ``edit``, ``command``, ``all`` …)."""
    headless: bool = False
    """No one is there to approve or answer: such requests are refused back to the model."""
    endpoint: str | None = None
    """Pin to a named endpoint; None lets the router pick the least loaded one."""
    max_steps: int | None = None
    """Step budget for the agent; None uses the agent's default."""
    temperature: float | None = None
    shared_links: tuple[str, ...] = ()
    """Read-only cache folders of the main checkout to link into the worktree (never writable)."""
    rules: bool = True
    """Follow the repository's rules files (``AGENTS.md``, ``CLAUDE.md``, ``.clinerules``)."""
    rules_files: tuple[str, ...] = ()
    """Further rules files (absolute paths), after the repository's."""
    copy_files: tuple[str, ...] | None = None
    """Bootstrap: paths of the main checkout copied into the new worktree (``.env``, local
    config). None (here and in the next four): what the repository's settings say; a
    created session keeps the values it was made with."""
    link_files: tuple[str, ...] | None = None
    """Bootstrap: big ignored folders of the main checkout linked into the worktree."""
    setup_command: str | None = None
    """Bootstrap: run once in the new worktree, inside the sandbox; empty for none."""
    ports: int | None = None
    """Size of the session's port block (``WORKSTATION_PORT`` …)."""
    run_command: str | None = None
    """The session's dev server, started and stopped from its pane; empty for none."""
    mcp_servers: str = ""
    """The session's own MCP servers, as ``{"mcpServers": …}`` JSON (besides the app's)."""
    images: tuple[str, ...] = ()
    """Images (paths) that go with the task, for a model that takes them."""
    adapter: str | None = None
    """A LoRA adapter the engine serves (or loads from ``adapter_path``): the session's requests
    name it as the model."""
    adapter_path: str | None = None
    """The adapter's folder, loaded at run time where the engine does not serve it yet."""
    background: bool = False
    """Marked background: its model turns let the others' go first (it never starves)."""
    budget_tokens: int | None = None
    """Tokens (prompt + completion, over the session's life) after which it pauses in
    ``budget_reached``; None: no token budget."""
    budget_usd: float | None = None
    """Money, at the chosen paid API's prices for the same tokens, after which it pauses in
    ``budget_reached``; None: no money budget."""

    @property
    def environment_paths(self) -> tuple[str, ...]:
        """What the fleet puts into the worktree besides git's files (shared links, bootstrap
        copies and links): the session's environment, never its work."""
        return (*self.shared_links, *(self.copy_files or ()), *(self.link_files or ()))

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SessionSpec:
        known = {f for f in cls.__dataclass_fields__}
        clean = {k: v for k, v in data.items() if k in known}
        for key in ("auto_approve", "shared_links", "rules_files", "copy_files", "link_files", "images"):
            if key in clean and clean[key] is not None:
                clean[key] = tuple(clean[key])
        return cls(**clean)


@dataclass(slots=True)
class SessionRecord:
    """One row of the store's ``sessions`` table."""

    session_id: str
    name: str
    spec: SessionSpec
    state: SessionState
    repo_path: str = ""
    worktree_path: str = ""
    branch: str = ""
    base_branch: str = ""
    start_commit: str = ""
    endpoint_name: str = ""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    error: str = ""
    agent_meta: dict[str, Any] = field(default_factory=dict)
    """The agent's resumable state besides its messages (protocol, turns, mode, flags)."""
    created_at: float = field(default_factory=time.time)
    updated_at: float = field(default_factory=time.time)
    position: int = 0
    """Order in which sessions were created (tile order)."""
    ready_at: float = 0.0
    """When the user marked the session's work ready to merge (0: not marked); the merge
    queue takes ready sessions in this order."""
    archived: str = ""
    """Why it left the grid for the archive ("merged into main (1a2b3c4d)", "discarded",
    "archived"); empty while it is in the grid."""

    def summary(self, tokens_per_s: float = 0.0, cost_usd: float | None = None) -> SessionSummary:
        return SessionSummary(
            session_id=self.session_id,
            name=self.name,
            state=self.state,
            task=self.spec.task,
            repo_path=self.repo_path,
            worktree_path=self.worktree_path,
            branch=self.branch,
            base_branch=self.base_branch,
            mode=self.spec.mode,
            endpoint_name=self.endpoint_name,
            prompt_tokens=self.prompt_tokens,
            completion_tokens=self.completion_tokens,
            cached_tokens=self.cached_tokens,
            tokens_per_s=tokens_per_s,
            error=self.error,
            created_at=self.created_at,
            ready=bool(self.ready_at),
            adapter=self.spec.adapter or "",
            archived=self.archived,
            cost_usd=cost_usd,
            budget_tokens=self.spec.budget_tokens,
            budget_usd=self.spec.budget_usd,
            background=self.spec.background,
        )

    def copy(self) -> SessionRecord:
        return replace(self, agent_meta=dict(self.agent_meta))
