"""The window's worktree tools: each pane's menu (ready to merge, dev server, setup again)
and the toolbar's merge queue. Owns the merge action and the open dialog; calls the
window's commands (``SessionCommands``) as owned tasks, and redraws from the events the
bridge turns into pane state (``SessionReadyChanged``, ``DevServerChanged``)."""

from __future__ import annotations

from typing import Protocol

from PySide6.QtCore import QPoint, QUrl
from PySide6.QtGui import QAction, QDesktopServices
from PySide6.QtWidgets import QMenu, QWidget

from workstation.ui.backend import SessionCommands, SessionTools
from workstation.ui.dialogs.merge_dialog import MergeDialog
from workstation.ui.icons_fallback import safe_icon
from workstation.ui.panes.session_pane import SessionPane
from workstation.ui.tasks import TaskOwner


class ToolsWindow(Protocol):
    """What the tools ask of the window (:class:`workstation.ui.main_window.MainWindow`, a
    QWidget that parents their menus and dialogs)."""

    @property
    def commands(self) -> SessionCommands | None: ...
    @property
    def tasks(self) -> TaskOwner: ...
    def show_status(self, message: str, timeout_ms: int = 8000) -> None: ...
    def show_error(self, message: str) -> None: ...


def session_menu(tools: SessionTools, parent: QWidget | None = None) -> QMenu:
    """The pane's menu; each action's ``data()`` names what it does."""
    menu = QMenu(parent)

    def add(text: str, what: str, enabled: bool = True, icon: str = "") -> QAction:
        action = menu.addAction(safe_icon(icon), text) if icon else menu.addAction(text)
        action.setData(what)
        action.setEnabled(enabled)
        return action

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
    return menu


class SessionActions:
    def __init__(self, window: ToolsWindow, parent: QWidget) -> None:
        self.window = window
        self._parent = parent
        self.menu: QMenu | None = None
        self.dialog: MergeDialog | None = None
        self.merge_action = QAction(safe_icon("merge"), "Merge ready…", parent)
        self.merge_action.setToolTip("Merge the sessions marked ready, gated by the test command")
        self.merge_action.triggered.connect(self.open_merge)

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
        elif what == "open":
            url = commands.session_tools(session_id).server_url
            if url:
                QDesktopServices.openUrl(QUrl(url))

    def open_merge(self) -> MergeDialog | None:
        commands = self.window.commands
        if commands is None:
            self.window.show_error("no sessions service is running")
            return None
        self.dialog = MergeDialog(commands.merge_plan(), self._parent)
        self.dialog.merge_requested.connect(self._merge)
        self.dialog.open()
        return self.dialog

    def _merge(self, into: str, gate: str, rebase: bool) -> None:
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

        self.window.tasks.spawn(merge(), "merge-queue")
