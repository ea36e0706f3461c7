"""Events of the session fleet, as frozen past-tense dataclasses.

The fleet (``workstation.fleet.Fleet``) emits each of them through one psygnal signal,
``fleet.events.changed`` (and a typed signal per kind, see the fleet's API notes); the UI
bridge turns them into Qt signals on the GUI thread. They carry everything a pane needs
to redraw, so a view never has to call back into the fleet to draw.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from workstation.core.session_state import SessionState


@dataclass(frozen=True, slots=True)
class SessionSummary:
    """What a pane header and the summary table show about one session."""

    session_id: str
    name: str
    state: SessionState
    task: str
    repo_path: str
    """The repository the session is attached to (its main working tree)."""
    worktree_path: str
    """The session's own worktree (where the agent works)."""
    branch: str
    """``ws/<name>``: moves only when the user commits in review."""
    base_branch: str
    mode: str
    """Agent mode, ``plan`` or ``act``."""
    endpoint_name: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    tokens_per_s: float = 0.0
    """Generated tokens per second over the last few seconds (0 when quiet)."""
    error: str = ""
    """Why it failed, paused for the engine, or needs input, in plain words; empty otherwise."""
    created_at: float = 0.0
    ready: bool = False
    """Marked ready to merge (the merge queue takes it)."""
    archived: str = ""
    """Why it is in the archive instead of the grid; empty while it is in the grid."""
    adapter: str = ""
    """The LoRA adapter its requests name; empty for the base model."""
    cost_usd: float | None = None
    """What its tokens would have cost at the chosen paid API (None: no price chosen)."""
    budget_tokens: int | None = None
    budget_usd: float | None = None
    background: bool = False


@dataclass(frozen=True, slots=True)
class SessionCreated:
    summary: SessionSummary


@dataclass(frozen=True, slots=True)
class SessionStateChanged:
    session_id: str
    old: SessionState
    new: SessionState
    reason: str = ""


@dataclass(frozen=True, slots=True)
class SessionSettingsChanged:
    """A session's settings changed (background mark, budget)."""

    summary: SessionSummary


@dataclass(frozen=True, slots=True)
class SessionRemoved:
    session_id: str
    name: str


@dataclass(frozen=True, slots=True)
class SessionArchived:
    """A session left the grid for the archive (``note`` says why), or came back (``note``
    empty)."""

    session_id: str
    note: str


@dataclass(frozen=True, slots=True)
class SessionsMovedEndpoint:
    """After a restart, sessions that were working ran on an endpoint that is no longer there
    (another model, another engine): they are paused until a person says to go on with
    ``current``."""

    session_ids: tuple[str, ...]
    previous: str
    current: str


@dataclass(frozen=True, slots=True)
class SessionRenamed:
    session_id: str
    name: str


@dataclass(frozen=True, slots=True)
class SessionStatsChanged:
    """Token counters of one session moved (emitted at most a few times a second)."""

    session_id: str
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    tokens_per_s: float
    cost_usd: float | None = None
    """Its tokens at the chosen paid API's prices (None: no price chosen)."""


@dataclass(frozen=True, slots=True)
class FleetCostChanged:
    """Every session's tokens together, and what they would have cost at the chosen paid API
    (the same cost model as the meters: ``core/cost.py``)."""

    prompt_tokens: int
    cached_tokens: int
    completion_tokens: int
    cost_usd: float | None
    api_model: str | None
    """``provider/model`` of the price used (None: no price chosen)."""


@dataclass(frozen=True, slots=True)
class SessionAgentEvent:
    """One event of a session's agent (``workstation.core.agent_events``), in order.

    ``seq`` numbers the session's transcript from 1 and matches the store, so a view that
    loaded the history from the store can continue from the live stream without gaps.
    """

    session_id: str
    seq: int
    event: Any


@dataclass(frozen=True, slots=True)
class AttachProgress:
    """Progress of a long repository operation (clone, worktree checkout, cleanup)."""

    key: str
    """The session id, or the clone's destination when no session exists yet."""
    phase: str
    """``clone``, ``worktree``, ``cleanup`` …"""
    message: str
    fraction: float | None = None
    """0..1 where the operation reports it; None when unknown."""


@dataclass(frozen=True, slots=True)
class GenerationSlotsChanged:
    generating: int
    waiting: int
    cap: int


@dataclass(frozen=True, slots=True)
class SessionWaitChanged:
    """Why a queued session waits changed ("engine full: KV 97 %", "fleet cap: 32 generating")."""

    session_id: str
    reason: str


@dataclass(frozen=True, slots=True)
class AdmissionChanged:
    """Adaptive admission moved an engine's limit, or its reason (at most once a scrape)."""

    endpoint_name: str
    limit: int
    """Sessions that may generate on the engine at once now (never above the fleet's cap)."""
    verdict: str
    """``room``, ``full``, ``steady`` or ``blind`` (no readings: the cap applies)."""
    reason: str
    kv_usage_pct: float | None
    waiting: int | None
    """Requests queued inside the engine."""
    ttft_p95_s: float | None
    generating: int
    """The fleet's sessions generating on the engine."""
    queued: int
    """The fleet's sessions waiting for a slot on it."""


@dataclass(frozen=True, slots=True)
class OrphanWorktree:
    """A worktree of the fleet's naming (branch ``ws/…``) that no session in the store owns."""

    repo_path: str
    worktree_path: str
    branch: str
    disk_bytes: int | None = None
    missing: bool = False
    """The worktree folder is gone but git still lists it (``git worktree prune`` clears it)."""


@dataclass(frozen=True, slots=True)
class OrphanWorktreesFound:
    orphans: tuple[OrphanWorktree, ...]


@dataclass(frozen=True, slots=True)
class EndpointAvailabilityChanged:
    endpoint_name: str
    available: bool
    message: str = ""


@dataclass(frozen=True, slots=True)
class SessionMoved:
    """A session left an engine that stopped answering; it continues on another from its
    stored history."""

    session_id: str
    from_endpoint: str
    to_endpoint: str


@dataclass(frozen=True, slots=True)
class SessionIntegrated:
    """The user committed, merged, rebased or discarded a session's work."""

    session_id: str
    action: str
    """``commit``, ``merge``, ``rebase``, ``discard``, ``cleanup``."""
    ok: bool
    message: str
    conflicts: tuple[str, ...] = ()
    """Paths in conflict when a merge or rebase was refused (and rolled back)."""


@dataclass(frozen=True, slots=True)
class SessionReadyChanged:
    """A session was marked ready to merge, or the mark was taken back (also when it starts
    working again: its work is changing)."""

    session_id: str
    ready: bool
    message: str = ""


@dataclass(frozen=True, slots=True)
class DevServerChanged:
    """A session's dev server started (``url`` where it answers) or ended."""

    session_id: str
    running: bool
    url: str = ""
    message: str = ""


FleetEvent = (
    SessionCreated
    | SessionStateChanged
    | SessionRemoved
    | SessionArchived
    | SessionRenamed
    | SessionsMovedEndpoint
    | SessionSettingsChanged
    | SessionStatsChanged
    | FleetCostChanged
    | SessionAgentEvent
    | AttachProgress
    | GenerationSlotsChanged
    | SessionWaitChanged
    | AdmissionChanged
    | OrphanWorktreesFound
    | EndpointAvailabilityChanged
    | SessionMoved
    | SessionIntegrated
    | SessionReadyChanged
    | DevServerChanged
)
