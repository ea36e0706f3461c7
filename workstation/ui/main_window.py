"""The main window: toolbar, meter strip, tile grid / focus view, status bar, docks.

Services never touch widgets: the bridge (fleet events) or a backend calls the
``*_session`` methods here; token text goes straight into each pane's document and
reaches the screen on one flush tick (``settings.ui.flush_hz``), which repaints only
the panes that are visible and changed.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from PySide6.QtCore import QSettings, Qt, QTimer, Signal
from PySide6.QtGui import QAction, QCloseEvent, QKeySequence, QShortcut
from PySide6.QtWidgets import (
    QDockWidget,
    QLabel,
    QMainWindow,
    QMenu,
    QSizePolicy,
    QStackedWidget,
    QToolBar,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from workstation.config import Settings
from workstation.core.errors import UserError
from workstation.core.session_state import SessionState
from workstation.ui.approval_controls import ApprovalControls
from workstation.ui.attention import Attention
from workstation.ui.backend import EngineControl, EngineView, SessionCommands
from workstation.ui.dialogs.confirm import Confirmations
from workstation.ui.engine_dock import STATE_WORDS, EngineDock
from workstation.ui.icons_fallback import safe_app_icon, safe_icon
from workstation.ui.panes.focus_view import FocusView
from workstation.ui.panes.session_pane import PaneInfo, SessionPane
from workstation.ui.panes.tile_grid import TileGrid
from workstation.ui.panes.transcript_doc import TranscriptDoc
from workstation.ui.new_session_flow import NewSessionFlow
from workstation.ui.restart_flow import RestartFlow
from workstation.ui.review_flow import ReviewFlow
from workstation.ui.sandbox_banner import SandboxBanner
from workstation.ui.session_actions import SessionActions
from workstation.ui.status_line import session_summary_line
from workstation.ui.stop_guard import StopGuard
from workstation.ui.tasks import TaskOwner
from workstation.ui.window_placement import WindowPlacement

if TYPE_CHECKING:
    from workstation.ui.bridge import FleetBridge
    from workstation.ui.dialogs.new_session import NewSessionDialog
    from workstation.ui.dialogs.settings_dialog import SettingsDialog

log = logging.getLogger(__name__)

PER_PAGE_CHOICES = (4, 9, 16, 32, 64)
STATS_INTERVAL_MS = 1000


class MainWindow(QMainWindow):
    close_requested = Signal()
    """The user closed the window: the app runs its staged shutdown."""
    settings_saved = Signal(object)
    """The settings dialog wrote new :class:`Settings`."""

    def __init__(
        self,
        settings: Settings,
        *,
        commands: SessionCommands | None = None,
        engine: EngineControl | None = None,
    ) -> None:
        super().__init__()
        self.settings = settings
        self.commands = commands
        self.engine = engine
        self.tasks = TaskOwner("window", on_error=self.show_error)
        self.panes: dict[str, SessionPane] = {}
        self.bridge: FleetBridge | None = None
        self._slots_text = ""
        self._token_rate: float | None = None
        self._cost_text = ""
        """Every session's tokens at the chosen paid API's prices (:meth:`set_fleet_cost`)."""
        self.new_session_dialog: NewSessionDialog | None = None
        self.settings_dialog: SettingsDialog | None = None
        self.gpu_name = ""
        """The GPU model the meters saw (the settings offer its typical hourly price)."""
        self._closing = False
        self._allow_close = False
        self.setWindowTitle("workstation")
        self.setWindowIcon(safe_app_icon())
        self.setObjectName("main-window")
        self._qsettings = QSettings(str(settings.data_dir / "window.ini"), QSettings.Format.IniFormat)

        # ----- central: meter strip over a stack of grid / focus view -----
        central = QWidget()
        column = QVBoxLayout(central)
        column.setContentsMargins(4, 2, 4, 2)
        column.setSpacing(3)
        self.sandbox_banner = SandboxBanner()  # shown while agents' commands are not confined
        self.sandbox_banner.settings_requested.connect(lambda: self.open_settings("sandbox"))
        column.addWidget(self.sandbox_banner)
        self.meter_strip_host = QVBoxLayout()
        self.meter_strip_host.setContentsMargins(0, 0, 0, 0)
        column.addLayout(self.meter_strip_host)
        self.stack = QStackedWidget()
        per_page = int(self._qsettings.value("grid/per_page", 32))
        self.grid = TileGrid(max_per_page=per_page)
        self.focus = FocusView()
        self.stack.addWidget(self.grid)
        self.stack.addWidget(self.focus)
        column.addWidget(self.stack, 1)
        self.setCentralWidget(central)

        self.attention = Attention(self)
        self.confirmations = Confirmations(self)  # destructive actions ask first, naming what they affect
        self.approvals = ApprovalControls(self.panes, self.focus, self._command, self.confirmations)
        self.review = ReviewFlow(self, self._command)  # the focus view's Diff tab, commit and merge, checkpoints
        self.new_sessions = NewSessionFlow(self, lambda: self.commands)
        self.restart = RestartFlow(self, self._command)  # sessions moved to another endpoint ask first
        self.guard = StopGuard(self)  # asks before the engine stops mid-request and before quitting
        self.generating = 0
        self._build_toolbar()
        self._build_status_bar()
        self.engine_dock = EngineDock(self)
        self.addDockWidget(Qt.DockWidgetArea.BottomDockWidgetArea, self.engine_dock)
        self.engine_dock.hide()
        from workstation.ui.tuning_dock import TuningDock

        self.tuning_dock = TuningDock(settings, self, tasks=self.tasks)
        self.addDockWidget(Qt.DockWidgetArea.BottomDockWidgetArea, self.tuning_dock)
        self.tuning_dock.hide()
        self.meters_dock: QDockWidget | None = None
        self._build_shortcuts()
        self._wire()

        self.flush_timer = QTimer(self)
        self.flush_timer.setTimerType(Qt.TimerType.CoarseTimer)
        self.flush_timer.setInterval(max(10, round(1000 / max(1.0, settings.ui.flush_hz))))
        self.flush_timer.timeout.connect(self.flush)
        self.flush_timer.start()
        self.stats_timer = QTimer(self)
        self.stats_timer.setInterval(STATS_INTERVAL_MS)
        self.stats_timer.timeout.connect(self._on_stats_tick)
        self.stats_timer.start()
        self.placement = WindowPlacement(self, self._qsettings)
        """Where it opens; what of its geometry and docks is remembered."""
        self.placement.restore()
        self.set_engine_view(engine.view() if engine else EngineView(state="stopped", managed=False))
        self._update_counts()

    # ----- construction -----
    def _build_toolbar(self) -> None:
        bar = QToolBar("Main")
        bar.setObjectName("main-toolbar")
        bar.setMovable(False)
        bar.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.toolbar = bar
        self.addToolBar(Qt.ToolBarArea.TopToolBarArea, bar)
        self.new_action = QAction(safe_icon("new"), "New", self)
        self.new_action.setToolTip("New session (Ctrl+N)")
        self.start_all_action = QAction(safe_icon("start"), "Start all", self)
        self.pause_all_action = QAction(safe_icon("pause"), "Pause all", self)
        self.approve_all_action = QAction(safe_icon("approve"), "Approve", self)
        self.approve_all_action.setToolTip("Approve every pending request (Ctrl+Shift+A)")
        self.layout_action = QAction(safe_icon("layout"), "Layout", self)
        self.session_actions = SessionActions(self, self, self._command)  # pane menus (ready, dev server, setup), merge queue
        for action in (self.new_action, self.start_all_action, self.pause_all_action, self.approve_all_action,
                       self.session_actions.merge_action, self.session_actions.archive_action):
            bar.addAction(action)
        layout_menu = QMenu(self)
        self.per_page_actions: dict[int, QAction] = {}
        for n in PER_PAGE_CHOICES:
            act = layout_menu.addAction(f"Up to {n} panes per page")
            act.setCheckable(True)
            act.setChecked(n == self.grid.max_per_page)
            act.triggered.connect(lambda _=False, k=n: self.set_per_page(k))
            self.per_page_actions[n] = act
        layout_menu.addSeparator()
        self.engine_dock_action = layout_menu.addAction("Engine dock")
        self.meters_dock_action = layout_menu.addAction("Meters dock")
        self.meters_dock_action.setEnabled(False)
        self.tuning_dock_action = layout_menu.addAction(safe_icon("tuning"), "Tuning dock")
        self.layout_action.setMenu(layout_menu)
        bar.addAction(self.layout_action)
        button = bar.widgetForAction(self.layout_action)
        if isinstance(button, QToolButton):
            button.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        self.record_slot = bar.addSeparator()
        """The recorder inserts its action before this separator (``install_record_action``)."""
        self.record_action: QAction | None = None
        spacer = QWidget()
        spacer.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Preferred)
        bar.addWidget(spacer)
        self.settings_action = QAction(safe_icon("settings"), "Settings", self)
        self.settings_action.setToolTip("Settings (Ctrl+,)")
        bar.addAction(self.settings_action)
        self.engine_label = QLabel("Engine: —")
        self.engine_label.setContentsMargins(8, 0, 6, 0)
        self.engine_button = QToolButton()
        self.engine_button.setAutoRaise(True)
        self.engine_button.setIcon(safe_icon("engine"))
        self.engine_button.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.engine_button.setToolTip("Show the engine dock")
        bar.addWidget(self.engine_button)

    def _build_status_bar(self) -> None:
        status = self.statusBar()
        # All permanent: a transient showMessage() would hide the session summary.
        self.summary_label = QLabel()
        self.notice_label = QLabel()
        self.notice_label.setTextFormat(Qt.TextFormat.PlainText)
        self.page_label = QLabel()
        self.engine_status = QLabel()
        status.addPermanentWidget(self.summary_label)
        status.addPermanentWidget(self.notice_label, 1)
        status.addPermanentWidget(self.page_label)
        status.addPermanentWidget(self.engine_status)
        self._notice_timer = QTimer(self)
        self._notice_timer.setSingleShot(True)
        self._notice_timer.timeout.connect(self.notice_label.clear)

    def _build_shortcuts(self) -> None:
        def key(seq: str | QKeySequence, slot: Callable[[], None]) -> QShortcut:
            sc = QShortcut(QKeySequence(seq), self)
            sc.setContext(Qt.ShortcutContext.WindowShortcut)
            sc.activated.connect(slot)
            return sc

        self.new_action.setShortcut(QKeySequence("Ctrl+N"))
        self.addAction(self.new_action)
        self.approve_all_action.setShortcut(QKeySequence("Ctrl+Shift+A"))
        self.addAction(self.approve_all_action)
        self.settings_action.setShortcut(QKeySequence("Ctrl+,"))
        self.addAction(self.settings_action)
        key("Ctrl+Return", self.approve_focused)
        key("Ctrl+Enter", self.approve_focused)
        key("Ctrl+P", self.pause_focused)
        key("F11", self.toggle_full_screen)
        key("Escape", self.show_grid)

    def _wire(self) -> None:
        self.new_action.triggered.connect(lambda: self.open_new_session(""))
        self.grid.repository_dropped.connect(self.open_new_session)
        self.start_all_action.triggered.connect(lambda: self._command("start-all", lambda c: c.start_all()))
        self.pause_all_action.triggered.connect(lambda: self._command("pause-all", lambda c: c.pause_all()))
        self.approve_all_action.triggered.connect(lambda: self.approvals.approve_all(self.attention.waiting_ids()))
        self.settings_action.triggered.connect(lambda: self.open_settings())
        self.engine_button.clicked.connect(self.toggle_engine_dock)
        self.engine_dock_action.triggered.connect(self.toggle_engine_dock)
        self.tuning_dock_action.triggered.connect(lambda: self.tuning_dock.setVisible(not self.tuning_dock.isVisible()))
        self.attention.waiting_changed.connect(lambda _n: self._update_counts())
        self.attention.notified.connect(lambda _t, m: self.show_status(m))
        self.grid.page_changed.connect(lambda _p, _n: self._update_page_label())
        self.focus.back_requested.connect(self.show_grid)
        self.focus.follow_up.connect(self._on_focus_follow_up)
        self.focus.follow_up_images.connect(
            lambda sid, text, images: self._follow_up(sid, text, tuple(images)))
        self.engine_dock.start_requested.connect(lambda p: self.engine_verb("start", lambda e: e.start(p or None)))
        self.engine_dock.stop_requested.connect(self.guard.stop_engine)
        self.engine_dock.restart_requested.connect(lambda p: self.engine_verb("restart", lambda e: e.restart(p or None)))

    # ----- sessions (called by the bridge / backends) -----
    def add_session(self, info: PaneInfo) -> TranscriptDoc:
        """A pane for the session; returns its document (what the bridge writes into)."""
        existing = self.panes.get(info.session_id)
        if existing is not None:
            self.update_session(info)
            return existing.doc
        doc = TranscriptDoc(max_lines=self.settings.ui.pane_max_blocks)
        pane = SessionPane(info, doc)
        self.panes[info.session_id] = pane
        pane.activated.connect(lambda p=pane: self.show_focus(p))
        self.approvals.attach(pane)
        self.session_actions.attach(pane)
        self.grid.add_pane(pane)
        self.attention.state_changed(info.session_id, info.name, None, info.state)
        self._update_counts()
        return doc

    def update_session(self, info: PaneInfo, reason: str = "") -> None:
        pane = self.panes.get(info.session_id)
        if pane is None:
            return
        old = pane.info.state
        pane.set_info(info)
        if info.state is not old:
            self.attention.state_changed(info.session_id, info.name, old, info.state, reason)
            self._update_counts()
            if self.focus.pane is pane:
                self.focus.sync_approval()

    def session_info(self, session_id: str) -> PaneInfo | None:
        pane = self.panes.get(session_id)
        return pane.info if pane is not None else None

    def update_stats(self, session_id: str, tokens: int, tokens_per_s: float, cost_usd: float | None = None) -> None:
        """A session's tokens and their cost at the chosen paid API (the status bar sums rates at its tick)."""
        pane = self.panes.get(session_id)
        if pane is not None:
            pane.set_stats(tokens, tokens_per_s, cost_usd)

    def set_session_mode(self, session_id: str, mode: str) -> None:
        pane = self.panes.get(session_id)
        if pane is not None:
            pane.set_info(replace(pane.info, mode=mode))

    def remove_session(self, session_id: str) -> None:
        pane = self.panes.pop(session_id, None)
        if pane is None:
            return
        self.restart.forget(session_id)
        if self.focus.pane is pane:
            self.show_grid()
        self.attention.forget(session_id)
        self.grid.remove_pane(pane)
        pane.deleteLater()
        self._update_counts()

    def doc(self, session_id: str) -> TranscriptDoc:
        return self.panes[session_id].doc

    def show_approval(self, session_id: str, title: str, summary: str, arguments: str, preview: str = "") -> None:
        self.approvals.show(session_id, title, summary, arguments, preview)

    def clear_approval(self, session_id: str) -> None:
        self.approvals.clear(session_id)

    def attach_bridge(self, bridge: FleetBridge) -> None:
        """Follow a fleet through its bridge (status lines, slots, output, checkpoints)."""
        self.bridge = bridge
        bridge.message.connect(self.show_status)
        bridge.slots_changed.connect(self._on_slots_changed)
        bridge.output_appended.connect(self._on_output)
        bridge.checkpoints_changed.connect(self._on_checkpoints)
        bridge.session_created.connect(lambda summary: self.grid.bring_into_view(summary.session_id))
        bridge.session_unarchived.connect(lambda sid: self.tasks.spawn(bridge.load_history(sid), "unarchive"))
        self.review.attach(bridge)
        bridge.endpoint_moved.connect(self.restart.ask_moved)

    def _on_slots_changed(self, generating: int, waiting: int, cap: int) -> None:
        self.generating = generating
        self._slots_text = f"generating {generating}/{cap}" + (f" · waiting {waiting}" if waiting else "")
        self._update_counts()

    def _on_output(self, session_id: str, text: str) -> None:
        if self.focus.pane is not None and self.focus.pane.info.session_id == session_id:
            self.focus.append_output(text)

    def _on_checkpoints(self, session_id: str) -> None:
        if self.focus.pane is not None and self.focus.pane.info.session_id == session_id:
            self._fill_checkpoints(session_id)

    def _fill_checkpoints(self, session_id: str) -> None:
        items = self.bridge.checkpoints_of(session_id) if self.bridge is not None else []
        self.focus.set_checkpoints([(f"{c.label}  ·  {c.commit[:8]}", c.commit) for c in items])

    # ----- the tick -----
    def flush(self) -> None:
        """Move coalesced deltas into documents; repaint visible panes that changed."""
        for pane in self.grid.panes:
            pane.doc.flush()
        if self.stack.currentWidget() is self.grid:
            for pane in self.grid.visible_panes():
                pane.view.refresh()
        else:
            self.focus.refresh()
        self.engine_dock.flush()

    def _on_stats_tick(self) -> None:
        self._update_counts()

    # ----- views -----
    def show_focus(self, pane: SessionPane) -> None:
        self.grid.set_focus(self.grid.panes.index(pane))
        commands = self.commands
        if commands is not None:
            self.focus.configure_images(commands.attachments_dir(), commands.images_refusal())
        self.focus.show_pane(pane)
        session_id = pane.info.session_id
        if commands is not None:
            commands.set_focus(session_id)  # the watched session's turns go first
        self.focus.output.clear()
        if self.bridge is not None:
            self.focus.append_output(self.bridge.output_of(session_id))
            self._fill_checkpoints(session_id)
        self.stack.setCurrentWidget(self.focus)
        self.review.refresh_diff()

    def show_grid(self) -> None:
        if self.stack.currentWidget() is self.focus:
            self.focus.leave()
            self.stack.setCurrentWidget(self.grid)
            if self.commands is not None:
                self.commands.set_focus(None)  # no session goes first any more
        elif self.isFullScreen():
            self.showNormal()
        self.grid.setFocus()

    @property
    def in_focus_view(self) -> bool:
        return self.stack.currentWidget() is self.focus

    def toggle_full_screen(self) -> None:
        self.showNormal() if self.isFullScreen() else self.showFullScreen()

    def toggle_engine_dock(self) -> None:
        self.engine_dock.setVisible(not self.engine_dock.isVisible())

    def set_per_page(self, n: int) -> None:
        for k, act in self.per_page_actions.items():
            act.setChecked(k == n)
        self.grid.max_per_page = n
        self.grid.relayout()
        self._qsettings.setValue("grid/per_page", n)
        self._update_page_label()

    def set_token_rate(self, rate: float | None) -> None:
        """The meters' one token rate (``Meters.tokens_per_s``, what the strip shows); without
        meters the status bar sums the panes' streams."""
        self._token_rate = rate or 0.0
        self._update_counts()

    def set_fleet_cost(self, text: str) -> None:
        """``$0.034 at m1 prices``: the summary line's last part."""
        self._cost_text = text
        self._update_counts()

    def set_meter_strip(self, widget: QWidget) -> None:
        self.meter_strip_host.addWidget(widget)

    def set_meters_dock(self, dock: QDockWidget) -> None:
        self.meters_dock = dock
        self.addDockWidget(Qt.DockWidgetArea.RightDockWidgetArea, dock)
        dock.hide()
        self.meters_dock_action.setEnabled(True)
        self.meters_dock_action.triggered.connect(lambda: dock.setVisible(not dock.isVisible()))
        self.placement.restore_state()

    def install_record_action(self, action: QAction) -> None:
        """The recorder's button goes in its slot of the toolbar; Ctrl+R triggers it."""
        self.record_action = action
        self.toolbar.insertAction(self.record_slot, action)
        if action.shortcut().isEmpty():
            action.setShortcut(QKeySequence("Ctrl+R"))
        self.addAction(action)

    # ----- dialogs (opened with open(), never exec()) -----
    def open_new_session(self, repo_path: str = "") -> None:
        """The form, also while the engine starts (``new_session_flow.py``)."""
        self.new_session_dialog = self.new_sessions.open(repo_path)

    def open_settings(self, section: str = "") -> None:
        from workstation.ui.dialogs.settings_dialog import SettingsDialog

        dialog = SettingsDialog(self.settings, self, section=section, gpu_name=self.gpu_name)
        dialog.saved.connect(self._on_settings_saved)
        dialog.finished.connect(dialog.deleteLater)
        self.settings_dialog = dialog
        dialog.open()

    def _on_settings_saved(self, settings: Settings) -> None:
        self.settings = settings
        self.flush_timer.setInterval(max(10, round(1000 / max(1.0, settings.ui.flush_hz))))
        self.settings_saved.emit(settings)

    # ----- engine -----
    def set_engine_view(self, view: EngineView) -> None:
        words = STATE_WORDS.get(view.state, view.state)
        text = f"{view.model} · {words}" if view.model else words
        self.engine_button.setText(f"Engine: {text}")
        colour = {"ready": "#2e9e44", "external": "#2e9e44", "failed": "#d0453b"}.get(view.state, "#e0a100")
        if view.state == "stopped":
            colour = "#8a8f98"
        self.engine_button.setIcon(safe_icon("engine", colour))
        self.engine_status.setText(f"Engine {words}")
        self.engine_dock.set_view(view)

    def engine_log_line(self, line: str) -> None:
        self.engine_dock.add_log_line(line)

    def engine_verb(self, verb: str, call: Callable[[EngineControl], Awaitable[None]]) -> None:
        if self.engine is not None:
            self.tasks.spawn(call(self.engine), f"engine-{verb}")

    # ----- commands -----
    def _command(self, name: str, call: Callable[[SessionCommands], Awaitable[object]]) -> None:
        """Run one of the sessions' commands as an owned task (its error goes to the status bar)."""
        if self.commands is None:
            self.show_error("no sessions service is running")
            return
        self.tasks.spawn(call(self.commands), name)

    def approve_focused(self) -> None:
        self.approvals.approve_waiting(self.focus.pane if self.in_focus_view else self.grid.focused_pane())

    def pause_focused(self) -> None:
        pane = self.focus.pane if self.in_focus_view else self.grid.focused_pane()
        if pane is not None:
            sid = pane.info.session_id
            self._command("toggle-pause", lambda c: c.toggle_pause(sid))

    def _on_focus_follow_up(self, session_id: str, text: str) -> None:
        self._follow_up(session_id, text, ())

    def _follow_up(self, session_id: str, text: str, images: tuple[str, ...]) -> None:
        """Send a follow-up; a refused one (the session is winding down, over its budget…)
        goes back into the input, its images with it."""

        async def send(commands: SessionCommands) -> None:
            try:
                await commands.follow_up(session_id, text, images)
            except UserError:
                self.focus.keep_unsent(session_id, text, images)
                raise

        self._command("follow-up", send)

    # ----- status -----
    def _update_counts(self) -> None:
        states = [p.info.state for p in self.panes.values()]
        pending = sum(1 for s in states if s is SessionState.AWAITING_APPROVAL)
        self.approve_all_action.setText(f"Approve ({pending})" if pending else "Approve")
        self.approve_all_action.setEnabled(pending > 0)
        rate = self._token_rate
        if rate is None:
            rate = sum(p.display_rate() for p in self.panes.values())
        text = session_summary_line(states, self.attention.waiting, self._slots_text, rate, self._cost_text)
        if self.summary_label.text() != text:
            self.summary_label.setText(text)
        self._update_page_label()

    def _update_page_label(self) -> None:
        shape = self.grid.shape
        text = f"page {self.grid.page + 1}/{shape.pages} (PgUp/PgDn)" if shape.pages > 1 else ""
        if self.page_label.text() != text:
            self.page_label.setText(text)

    def show_status(self, message: str, timeout_ms: int = 8000, *, details: str = "") -> None:
        """A passing line in the status bar, beside the session summary; ``details``: more
        lines for its tooltip (which demo sessions were kept as the user's, and why)."""
        self.notice_label.setText(f"│  {message}")
        self.notice_label.setToolTip(f"{message}\n\n{details}" if details else message)
        self._notice_timer.start(timeout_ms)

    def show_error(self, message: str) -> None:
        log.warning("%s", message)
        self.show_status(message, 10000)

    # ----- state and closing -----
    def show_first(self, size_px: tuple[int, int] | None = None) -> None:
        """Open the window: where the user left it, else filling the screen; ``size_px``: a
        size the app needs (a recording), not remembered as the user's."""
        self.placement.show(size_px)

    def save_layout(self) -> None:
        self.placement.save()

    def stop_accepting_work(self) -> None:
        """The shutdown began: no new sessions, starts or approvals; commands go nowhere."""
        for action in (self.new_action, self.start_all_action, self.approve_all_action):
            action.setEnabled(False)
        self.commands = None

    def allow_close(self) -> None:
        """The app finished its shutdown: the next close really closes."""
        self._allow_close = True

    def closeEvent(self, event: QCloseEvent) -> None:  # noqa: N802
        if self._allow_close:
            self.flush_timer.stop()
            self.stats_timer.stop()
            event.accept()
            return
        event.ignore()
        if not self._closing and self.guard.close_may_go_on():
            self._closing = True
            self.save_layout()
            self.show_status("Shutting down…", 60000)
            self.close_requested.emit()
