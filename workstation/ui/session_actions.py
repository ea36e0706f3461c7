"""Each pane's menu and the toolbar's session tools: stop, restart, rename, commit and merge,
archive, remove (worktree and branch, after a confirmation); the worktree tools (ready to
merge, dev server, setup again); its scheduling (background, a budget); the merge queue;
and the archive of sessions that left the grid (merged, discarded or archived), from where
they come back or are removed for good.

Owns the open menu and dialogs; calls the window's commands (``SessionCommands``) as owned
tasks, and redraws from the events the bridge turns into pane state."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol

from PySide6.QtCore import QPoint, QUrl
from PySide6.QtGui import QAction, QDesktopServices
from PySide6.QtWidgets import QInputDialog, QLineEdit, QMenu, QWidget

from workstation.ui.backend import SessionCommands, SessionTools
from workstation.ui.dialogs.archive_dialog import ArchiveDialog
from workstation.ui.dialogs.budget_dialog import BudgetDialog
from workstation.ui.dialogs.merge_dialog import MergeDialog
from workstation.ui.icons_fallback import safe_icon
from workstation.ui.panes.session_pane import SessionPane
from workstation.ui.tasks import TaskOwner

if TYPE_CHECKING:
    from workstation.ui.approval_controls import Command
    from workstation.ui.bridge import FleetBridge
    from workstation.ui.dialogs.confirm import Confirmations
    from workstation.ui.review_flow import ReviewFlow

RESTARTABLE = ("running", "queued", "awaiting_approval", "needs_input", "engine_wait", "paused", "failed",
               "stopped")


class ToolsWindow(Protocol):
    """What the tools ask of the window (:class:`workstation.ui.main_window.MainWindow`, a
    QWidget that parents their menus and dialogs)."""

    @property
    def commands(self) -> SessionCommands | None: ...
    @property
    def tasks(self) -> TaskOwner: ...
    @property
    def bridge(self) -> FleetBridge | None: ...
    def show_status(self, message: str, timeout_ms: int = 8000) -> None: ...
    def show_error(self, message: str) -> None: ...
    @property
    def panes(self) -> Mapping[str, SessionPane]: ...
    @property
    def confirmations(self) -> Confirmations: ...
    @property
    def review(self) -> ReviewFlow: ...
    def show_focus(self, pane: SessionPane) -> None: ...


def session_menu(tools: SessionTools, parent: QWidget | None = None) -> QMenu:
    """The pane's menu; each action's ``data()`` names what it does."""
    menu = QMenu(parent)

    def add(text: str, what: str, enabled: bool = True, icon: str = "") -> QAction:
        action = menu.addAction(safe_icon(icon), text) if icon else menu.addAction(text)
        action.setData(what)
        action.setEnabled(enabled)
        return action

    add("Stop", "stop", tools.active, "stop")
    add("Restart (stop, then run again from its history)", "restart", tools.state in RESTARTABLE, "restart")
    add(f"Rename… (its branch stays {tools.branch})" if tools.branch else "Rename…", "rename")
    menu.addSeparator()
    add("Commit and merge…", "merge", not tools.working, "merge")
    if tools.ready:
        add("Take back the ready mark", "unready")
    else:
        add("Mark ready to merge (commits its work)", "ready", not tools.working, "check")
    menu.addSeparator()
    if tools.server_url:
        add(f"Open {tools.server_url}", "open")
        add("Stop dev server", "server-stop", icon="stop")
    elif tools.run_command:
        add(f"Start dev server ({tools.run_command})", "server-start", icon="start")
    else:
        add("No dev server: set `run` for its repository", "", False)
    if tools.setup_command:
        add(f"Run setup again ({tools.setup_command})", "setup", not tools.working)
    menu.addSeparator()
    if tools.background:
        add("Back to the foreground", "foreground")
    else:
        add("Run in the background (others' turns go first)", "background")
    add("Budget…", "budget")
    add("Archive (leaves the grid; its branch stays)", "archive", icon="archive")
    add("Remove… (deletes its worktree and branch)", "remove", icon="discard")
    return menu


class SessionActions:
    def __init__(self, window: ToolsWindow, parent: QWidget, command: Command) -> None:
        self.window = window
        self._command = command
        self._parent = parent
        self.menu: QMenu | None = None
        self.dialog: MergeDialog | ArchiveDialog | QInputDialog | None = None
        self.budget: BudgetDialog | None = None
        self.merge_action = QAction(safe_icon("merge"), "Merge ready…", parent)
        self.merge_action.setToolTip("Merge the sessions marked ready, gated by the test command")
        self.merge_action.triggered.connect(self.open_merge)
        self.archive_action = QAction(safe_icon("archive"), "Archive…", parent)
        self.archive_action.setToolTip("Sessions that left the grid: merged, discarded or archived")
        self.archive_action.triggered.connect(self.open_archive)

    def attach(self, pane: SessionPane) -> None:
        pane.menu_requested.connect(lambda pos, p=pane: self.open_menu(p, pos))

    def open_menu(self, pane: SessionPane, pos: QPoint | None = None) -> QMenu | None:
        commands = self.window.commands
        if commands is None:
            return None
        sid = pane.info.session_id
        self.menu = session_menu(commands.session_tools(sid), self._parent)
        self.menu.triggered.connect(lambda action: self.run(sid, action.data() or ""))
        if pos is not None:
            self.menu.popup(pos)
        return self.menu

    def run(self, session_id: str, what: str) -> None:
        commands = self.window.commands
        if commands is None or not what:
            return
        spawn = self.window.tasks.spawn
        if what in ("ready", "unready"):
            spawn(commands.mark_ready(session_id, what == "ready"), f"mark-{what}")
        elif what in ("server-start", "server-stop"):
            spawn(commands.dev_server(session_id, what == "server-start"), what)
        elif what == "setup":
            spawn(commands.run_setup(session_id), "setup-again")
        elif what in ("background", "foreground"):
            spawn(commands.set_background(session_id, what == "background"), what)
        elif what == "budget":
            self.open_budget(session_id)
        elif what == "open":
            url = commands.session_tools(session_id).server_url
            if url:
                QDesktopServices.openUrl(QUrl(url))
        elif what == "stop":
            spawn(commands.stop(session_id), "stop")
        elif what == "restart":
            spawn(commands.restart(session_id), "restart")
        elif what == "archive":
            spawn(commands.archive(session_id), "archive")
        elif what == "rename":
            self._rename(session_id)
        elif what == "remove":
            self.ask_remove(session_id)
        elif what == "merge":
            pane = self.window.panes.get(session_id)
            if pane is not None:
                self.window.show_focus(pane)
                self.window.review.integrate("merge")

    def _rename(self, session_id: str) -> None:
        tools = self.window.commands.session_tools(session_id)
        dialog = QInputDialog(self._parent)
        dialog.setWindowTitle(f"Rename {tools.name}")
        dialog.setLabelText(f"New name (its branch stays {tools.branch}):")
        dialog.setTextEchoMode(QLineEdit.EchoMode.Normal)
        dialog.setTextValue(tools.name)
        dialog.textValueSelected.connect(
            lambda name: self._command("rename", lambda c: c.rename(session_id, name)))
        dialog.finished.connect(dialog.deleteLater)
        self.dialog = dialog
        dialog.open()

    def ask_remove(self, session_id: str) -> None:
        tools = self.window.commands.session_tools(session_id)
        self.window.confirmations.ask(
            lambda: self._command("remove", lambda c: c.remove(session_id)),
            title=f"Remove {tools.name}", confirm="Remove",
            headline=f"Remove {tools.name}, its worktree and its branch?",
            items=[f"worktree {tools.worktree}", f"branch {tools.branch} in {tools.repo}",
                   "its transcript and checkpoints"],
            note="What it did that is not merged is lost; this cannot be undone."
                 + (" It is working: it is stopped first." if tools.active else ""))

    def open_budget(self, session_id: str) -> BudgetDialog | None:
        commands = self.window.commands
        pane = self.window.panes.get(session_id)
        if commands is None or pane is None:
            return None
        self.budget = BudgetDialog(pane.info.name, commands.session_tools(session_id), self._parent)
        self.budget.budget_set.connect(lambda tokens, usd: self.window.tasks.spawn(
            commands.set_budget(session_id, tokens or None, usd or None), "set-budget"))
        self.budget.open()
        return self.budget

    def open_merge(self) -> MergeDialog | None:
        commands = self.window.commands
        if commands is None:
            self.window.show_error("no sessions service is running")
            return None
        self.dialog = MergeDialog(commands.merge_plan(), self._parent)
        self.dialog.merge_requested.connect(self._merge)
        self.dialog.open()
        return self.dialog

    def open_archive(self) -> ArchiveDialog | None:
        commands = self.window.commands
        if commands is None:
            self.window.show_error("no sessions service is running")
            return None
        dialog = ArchiveDialog(commands.archived_sessions(), self._parent)
        dialog.unarchive_requested.connect(lambda sid: self._command("unarchive", lambda c: c.unarchive(sid)))
        dialog.remove_requested.connect(self.ask_remove)
        if self.window.bridge is not None:  # a removed or unarchived session leaves the list
            # (bound methods of the dialog: the connections end with it)
            self.window.bridge.session_removed.connect(dialog.forget)
            self.window.bridge.session_unarchived.connect(dialog.forget)
        dialog.finished.connect(dialog.deleteLater)
        self.dialog = dialog
        dialog.open()
        return dialog

    def _merge(self, into: str, gate: str, rebase: bool) -> None:
        """Run the queue; into a branch that is checked out somewhere, only after a
        confirmation naming that folder and the commits that land there."""
        commands = self.window.commands
        if commands is None:
            self.window.show_error("no sessions service is running")
            return

        async def merge() -> None:
            self.merge_action.setEnabled(False)
            self.window.show_status(f"merge queue: merging into {into}, gate `{gate}`…", 60000)
            try:
                self.window.show_status(await commands.merge_ready(into, gate, rebase), 20000)
            finally:
                self.merge_action.setEnabled(True)

        async def check() -> None:
            preview = await commands.merge_preview(into)
            if not preview.checked_out_at:
                await merge()
                return
            n = len(preview.commits)
            self.window.confirmations.ask(
                lambda: self.window.tasks.spawn(merge(), "merge-queue"), title=f"Merge into {into}",
                confirm=f"Merge into {into}",
                headline=f"{into} is checked out in {preview.checked_out_at}: merge {n} commit{'s' if n != 1 else ''} "
                         "into it?",
                items=list(preview.commits),
                note="Once every session merged and passed the gate, the files there change to the merged "
                     "result (refused if that checkout has uncommitted changes).")

        self.window.tasks.spawn(check(), "merge-queue-check")
