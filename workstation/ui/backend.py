"""What the window asks of the services, as protocols: the window calls these, and
redraws from events only (commands return; views redraw when events arrive).

:mod:`workstation.ui.fleet_backend` implements :class:`SessionCommands` over the fleet;
:mod:`workstation.ui.engine_adapter` implements :class:`EngineControl` over the live
engine's owner.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from workstation.ui.panes.session_pane import PaneInfo
    from workstation.ui.panes.transcript_doc import TranscriptDoc


@dataclass(frozen=True, slots=True)
class NewSessionRequest:
    """What the new-session dialog collects."""

    task: str
    repo_path: str = ""
    """A local repository folder (empty when cloning)."""
    clone_url: str = ""
    base_branch: str = ""
    mode: str = "act"
    """``plan`` or ``act``."""
    auto_approve: str = "reads"
    """``reads`` (reads run, the rest waits), ``ask`` (every action waits, reads too),
    ``edits`` (reads and file edits run, commands ask) or ``all``."""
    copies: int = 1
    endpoint_name: str = ""
    name: str = ""
    adapter: str = ""
    """A LoRA adapter the engine serves (empty: the base model)."""
    images: tuple[str, ...] = ()
    """Images (paths) that go with the task."""
    mcp_config: str = ""
    """An ``mcpServers`` JSON file with the session's own MCP servers."""


@dataclass(frozen=True, slots=True)
class EngineView:
    """What the engine dock and toolbar show."""

    state: str
    """``stopped``, ``starting``, ``ready``, ``stopping``, ``failed``, ``external``."""
    model: str = ""
    profile: str = ""
    detail: str = ""
    managed: bool = True
    profiles: tuple[str, ...] = field(default_factory=tuple)


@dataclass(frozen=True, slots=True)
class SessionTools:
    """What a pane's menu offers for one session (its worktree tools)."""

    ready: bool = False
    """Marked ready to merge."""
    working: bool = False
    """Its agent works: it cannot be marked ready or set up again now."""
    run_command: str = ""
    """Its dev server command; empty when its repository has none."""
    server_url: str = ""
    """Where its dev server answers; empty when none runs."""
    setup_command: str = ""
    state: str = ""
    """Its state (``running``, ``done`` …)."""
    active: bool = False
    """It has an agent run alive or waiting (stop applies)."""
    name: str = ""
    branch: str = ""
    worktree: str = ""
    repo: str = ""
    background: bool = False
    """Marked background (its turns let the others' go first)."""
    budget_tokens: int | None = None
    budget_usd: float | None = None
    spent: str = ""
    """What it used so far, in words ("12,400 tokens, $0.031 at gpt-4.1-mini prices")."""
    priced: bool = False
    """A paid API is chosen: money is counted."""


@dataclass(frozen=True, slots=True)
class MergePlan:
    """What the merge dialog starts from: the ready sessions in queue order, a target, a gate."""

    names: tuple[str, ...] = ()
    into: str = ""
    gate: str = ""


@dataclass(frozen=True, slots=True)
class MergePreview:
    """What the merge queue would touch in ``into``."""

    into: str
    checked_out_at: str = ""
    """The folder where ``into`` is checked out (its files change); empty when it is not."""
    commits: tuple[str, ...] = ()
    """``name: abc1234 subject`` of each ready session's commits that its base lacks."""


@dataclass(frozen=True, slots=True)
class ReviewPlan:
    """What the commit-and-merge dialog starts from: the session's actual changes."""

    session_id: str
    name: str
    branch: str
    base: str
    message: str
    """A commit message drawn from the changes (editable)."""
    files: tuple[str, ...] = ()
    """``path  +a −r`` of each changed file."""
    commits: tuple[str, ...] = ()
    """Commits on its branch the base lacks (``abc1234 subject``)."""
    uncommitted: int = 0
    branches: tuple[str, ...] = ()
    checkouts: tuple[tuple[str, str], ...] = ()
    """(branch, folder) of each branch checked out somewhere."""
    gate: str = ""
    working: bool = False
    """It generates (or will again on its own): merging waits until it is paused."""
    waiting_action: str = ""
    """The action it waits to have approved: merging pauses it, withdrawing that action."""


@dataclass(frozen=True, slots=True)
class MergeOutcome:
    ok: bool
    message: str
    conflicts: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ArchivedSession:
    session_id: str
    name: str
    note: str
    branch: str
    repo: str


class SessionCommands(Protocol):
    async def create_sessions(self, request: NewSessionRequest) -> None: ...
    async def start_all(self) -> None: ...
    async def pause_all(self) -> None: ...
    async def toggle_pause(self, session_id: str) -> None: ...
    async def approve(self, session_id: str, edited_arguments: str | None = None) -> None: ...
    def waiting_actions(self) -> dict[str, str]:
        """The action each session waits to have approved (its summary, else the tool), by
        session id — what the approvals desk holds, never what a pane's label shows."""
        ...
    async def deny(self, session_id: str, feedback: str) -> None: ...
    async def follow_up(self, session_id: str, text: str, images: tuple[str, ...] = ()) -> None: ...
    async def diff(self, session_id: str) -> str: ...
    async def integrate(self, session_id: str, action: str) -> None: ...
    def endpoint_names(self) -> list[str]: ...
    def recent_repositories(self) -> list[str]: ...
    def adapter_names(self) -> list[str]: ...
    def images_refusal(self) -> str:
        """Why images cannot go to the model (empty when they can)."""
        ...
    def attachments_dir(self) -> str: ...
    def session_tools(self, session_id: str) -> SessionTools: ...
    async def mark_ready(self, session_id: str, ready: bool) -> None: ...
    async def dev_server(self, session_id: str, start: bool) -> None: ...
    async def run_setup(self, session_id: str) -> None: ...
    def set_focus(self, session_id: str | None) -> None:
        """The session the user watches in the focus view (its turns go first); None: none."""
        ...
    async def set_background(self, session_id: str, background: bool) -> None: ...
    async def set_budget(self, session_id: str, tokens: int | None, usd: float | None) -> None: ...
    def merge_plan(self) -> MergePlan: ...
    async def merge_ready(self, into: str, gate: str, rebase: bool) -> str: ...
    async def merge_preview(self, into: str) -> MergePreview: ...
    async def review_plan(self, session_id: str) -> ReviewPlan: ...
    async def commit(self, session_id: str, message: str) -> str: ...
    async def merge_one(self, session_id: str, message: str, into: str, rebase: bool, gate: str) -> MergeOutcome: ...
    async def discard(self, session_id: str) -> str: ...
    async def stop(self, session_id: str) -> None: ...
    async def restart(self, session_id: str) -> None: ...
    async def rename(self, session_id: str, name: str) -> None: ...
    async def archive(self, session_id: str) -> None: ...
    async def unarchive(self, session_id: str) -> None: ...
    async def remove(self, session_id: str) -> None: ...
    async def restore_checkpoint(self, session_id: str, commit: str, files: bool, conversation: bool) -> None: ...
    def archived_sessions(self) -> list[ArchivedSession]: ...


class EngineControl(Protocol):
    def view(self) -> EngineView: ...
    def log_tail(self) -> list[str]: ...
    async def start(self, profile: str | None = None) -> None: ...
    async def stop(self) -> None: ...
    async def restart(self, profile: str | None = None) -> None: ...


class SessionView(Protocol):
    """What the fleet's bridge asks of the window (:class:`workstation.ui.main_window.MainWindow`):
    it hands over what a session's pane shows and writes into the session's document, and never
    reaches into a pane."""

    def add_session(self, info: PaneInfo) -> TranscriptDoc: ...
    def update_session(self, info: PaneInfo, reason: str = "") -> None: ...
    def session_info(self, session_id: str) -> PaneInfo | None: ...
    def update_stats(self, session_id: str, tokens: int, tokens_per_s: float) -> None: ...
    def set_session_mode(self, session_id: str, mode: str) -> None: ...
    def remove_session(self, session_id: str) -> None: ...
    def show_approval(self, session_id: str, title: str, summary: str, arguments: str,
                      preview: str = "") -> None: ...
    def clear_approval(self, session_id: str) -> None: ...
