"""The focus view's review: its Diff tab follows the session's worktree (read again whenever
the agent changed files, a review action finished, or the tab comes into view), and its
actions — commit (a dialog with a message drawn from the changes), commit and merge in one
step (target branch, merge or rebase, an optional gate; through the merge queue; merged, the
session goes to the archive; conflicts are shown with their files), discard (after a
confirmation naming the branch and its commits), and restoring a checkpoint.

It owns the open dialog and the diff it last showed; it calls the window's commands as owned
tasks and redraws from what they return and from the bridge's events."""

from __future__ import annotations

from typing import Protocol

from workstation.core.errors import UserError
from workstation.ui.approval_controls import Command
from workstation.ui.backend import MergeOutcome, ReviewPlan, SessionCommands
from workstation.ui.bridge import FleetBridge
from workstation.ui.dialogs.commit_merge import CommitMergeDialog
from workstation.ui.dialogs.confirm import Confirmations
from workstation.ui.dialogs.restore_checkpoint import RestoreDialog
from workstation.ui.panes.focus_view import FocusView
from workstation.ui.panes.transcript_doc import diff_counts
from workstation.ui.tasks import TaskOwner


class ReviewWindow(Protocol):
    """What the review asks of the window (:class:`~workstation.ui.main_window.MainWindow`)."""

    @property
    def focus(self) -> FocusView: ...
    @property
    def commands(self) -> SessionCommands | None: ...
    @property
    def tasks(self) -> TaskOwner: ...
    @property
    def confirmations(self) -> Confirmations: ...
    def show_status(self, message: str, timeout_ms: int = 8000) -> None: ...


class ReviewFlow:
    def __init__(self, window: ReviewWindow, command: Command) -> None:
        """``window``: the :class:`~workstation.ui.main_window.MainWindow` (its focus view,
        commands, tasks, confirmations and status line); ``command``: its way to run one."""
        self.window = window
        self._command = command
        self.dialog: CommitMergeDialog | RestoreDialog | None = None
        self._loading = False
        self._again = False
        focus = window.focus
        focus.diff.refresh_requested.connect(self.refresh_diff)
        focus.diff.integrate_requested.connect(self.integrate)
        focus.checkpoints.restore_requested.connect(self.restore)
        focus.tabs.currentChanged.connect(lambda _i: self._on_tab())

    def attach(self, bridge: FleetBridge) -> None:
        """Follow the worktree: a checkpoint means the agent changed files."""
        bridge.checkpoints_changed.connect(self._on_changed)
        bridge.integrated.connect(lambda event: self._on_changed(event.session_id))

    def _session(self) -> str | None:
        pane = self.window.focus.pane
        return pane.info.session_id if pane is not None else None

    def _on_tab(self) -> None:
        if self.window.focus.tabs.currentWidget() is self.window.focus.diff:
            self.refresh_diff()

    def _on_changed(self, session_id: str) -> None:
        if session_id == self._session():
            self.refresh_diff()

    # ----- the diff -----
    def refresh_diff(self) -> None:
        """Read the diff again (one read at a time; a change meanwhile reads once more after)."""
        sid = self._session()
        commands = self.window.commands
        if sid is None or commands is None:
            return
        if self._loading:
            self._again = True
            return
        self._loading = True

        async def load() -> None:
            try:
                text = await commands.diff(sid)
            finally:
                self._loading = False
            if self._session() == sid:
                added, removed = diff_counts(text)
                self.window.focus.diff.set_diff(text, f"+{added} −{removed}" if text else "")
            if self._again:
                self._again = False
                self.refresh_diff()

        self.window.tasks.spawn(load(), "diff")

    # ----- actions -----
    def integrate(self, action: str) -> None:
        sid = self._session()
        commands = self.window.commands
        if sid is None or commands is None:
            return
        if action == "discard":
            self._ask_discard(sid)
            return

        async def open_dialog() -> None:
            plan = await commands.review_plan(sid)
            self._open(plan, "merge" if action == "merge" else "commit")

        self.window.tasks.spawn(open_dialog(), f"review-{action}")

    def _open(self, plan: ReviewPlan, mode: str) -> CommitMergeDialog:
        dialog = CommitMergeDialog(plan, self.window, mode=mode)
        dialog.merge_requested.connect(lambda *args: self._merge(dialog, *args))
        dialog.commit_requested.connect(lambda message: self._commit(dialog, message))
        dialog.finished.connect(dialog.deleteLater)
        self.dialog = dialog
        dialog.open()
        return dialog

    def _merge(self, dialog: CommitMergeDialog, message: str, into: str, rebase: bool, gate: str) -> None:
        commands = self.window.commands
        sid = dialog.plan.session_id

        async def merge() -> None:
            try:
                outcome = await commands.merge_one(sid, message, into, rebase, gate)
            except UserError as exc:
                outcome = MergeOutcome(False, str(exc))
            dialog.show_outcome(outcome)
            self.window.show_status(outcome.message, 20000)

        self.window.tasks.spawn(merge(), "merge-one")

    def _commit(self, dialog: CommitMergeDialog, message: str) -> None:
        commands = self.window.commands
        sid = dialog.plan.session_id

        async def commit() -> None:
            try:
                said = await commands.commit(sid, message)
            except UserError as exc:
                dialog.show_outcome(MergeOutcome(False, str(exc)))
                return
            dialog.show_outcome(MergeOutcome(True, said))
            self.window.show_status(said, 15000)
            self.refresh_diff()

        self.window.tasks.spawn(commit(), "commit")

    def _ask_discard(self, sid: str) -> None:
        commands = self.window.commands

        async def ask() -> None:
            plan = await commands.review_plan(sid)
            items = [*plan.files, *(f"commit {c}" for c in plan.commits)]
            self.window.confirmations.ask(
                lambda: self._command("discard", lambda c: c.discard(sid)),
                title=f"Discard {plan.name}", confirm="Discard",
                headline=f"Throw away everything {plan.name} did on {plan.branch}?",
                items=items,
                note=f"{len(plan.files)} changed file(s) and {len(plan.commits)} commit(s) go back to where "
                     f"{plan.branch} started from {plan.base}; this cannot be undone. The session then "
                     "goes to the archive.")

        self.window.tasks.spawn(ask(), "discard-ask")

    def restore(self, commit: str, label: str) -> None:
        pane = self.window.focus.pane
        if pane is None or self.window.commands is None:
            return
        sid = pane.info.session_id
        dialog = RestoreDialog(pane.info.name, label, commit, self.window, working=pane.info.state.is_active)
        dialog.restore_requested.connect(lambda files, conversation: self._command(
            "restore-checkpoint", lambda c: c.restore_checkpoint(sid, commit, files, conversation)))
        self.dialog = dialog
        dialog.open()
