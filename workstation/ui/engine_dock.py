"""The engine dock: state, profile, start / stop / restart, and the live log tail.

Log lines arrive from the launcher's event; they are buffered and appended on the
window's flush tick (a starting vLLM prints bursts of hundreds of lines)."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QTextCursor
from PySide6.QtWidgets import (
    QComboBox,
    QDockWidget,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from workstation.ui import theme
from workstation.ui.backend import EngineView
from workstation.ui.icons_fallback import safe_icon

LOG_MAX_BLOCKS = 3000

STATE_WORDS = {
    "stopped": "stopped",
    "starting": "starting…",
    "ready": "ready",
    "stopping": "stopping…",
    "failed": "failed",
    "external": "external endpoint",
}


class EngineDock(QDockWidget):
    start_requested = Signal(str)
    """Profile name."""
    stop_requested = Signal()
    restart_requested = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("Engine", parent)
        self.setObjectName("engine-dock")
        body = QWidget()
        layout = QVBoxLayout(body)
        layout.setContentsMargins(6, 4, 6, 6)
        row = QHBoxLayout()
        self.state_label = QLabel("Engine: not started")
        self.state_label.setTextFormat(Qt.TextFormat.PlainText)
        row.addWidget(self.state_label, 1)
        row.addWidget(QLabel("Profile"))
        self.profile = QComboBox()
        self.profile.setMinimumWidth(120)
        row.addWidget(self.profile)
        self.start_button = QPushButton(safe_icon("start"), "Start")
        self.stop_button = QPushButton(safe_icon("stop"), "Stop")
        self.restart_button = QPushButton(safe_icon("engine"), "Restart")
        for button in (self.start_button, self.stop_button, self.restart_button):
            row.addWidget(button)
        layout.addLayout(row)
        self.detail = QLabel("")
        self.detail.setWordWrap(True)
        self.detail.setTextFormat(Qt.TextFormat.PlainText)
        layout.addWidget(self.detail)
        self.log = QPlainTextEdit()
        self.log.setReadOnly(True)
        self.log.setFont(theme.mono_font(8.5))
        self.log.setMaximumBlockCount(LOG_MAX_BLOCKS)
        self.log.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        self.log.setPlaceholderText("The engine's log appears here while it runs.")
        layout.addWidget(self.log, 1)
        self.setWidget(body)
        self._pending: list[str] = []
        self.start_button.clicked.connect(lambda: self.start_requested.emit(self.profile.currentText()))
        self.stop_button.clicked.connect(self.stop_requested)
        self.restart_button.clicked.connect(lambda: self.restart_requested.emit(self.profile.currentText()))
        self.set_view(EngineView(state="stopped"))

    def set_view(self, view: EngineView) -> None:
        words = STATE_WORDS.get(view.state, view.state)
        model = f"{view.model} · " if view.model else ""
        self.state_label.setText(f"Engine: {model}{words}")
        self.detail.setText(view.detail)
        self.detail.setVisible(bool(view.detail))
        if view.profiles and [self.profile.itemText(i) for i in range(self.profile.count())] != list(view.profiles):
            self.profile.clear()
            self.profile.addItems(list(view.profiles))
        if view.profile:
            self.profile.setCurrentText(view.profile)
        managed = view.managed
        busy = view.state in ("starting", "stopping")
        self.start_button.setEnabled(managed and view.state in ("stopped", "failed"))
        self.stop_button.setEnabled(managed and view.state in ("ready", "starting"))
        starting = view.state == "starting"
        self.stop_button.setText("Cancel start" if starting else "Stop")
        self.stop_button.setToolTip("Stop the engine while it loads; nothing is left running" if starting
                                    else "Stop the engine (asks first while requests are in flight)")
        self.restart_button.setEnabled(managed and not busy and view.state != "stopped")
        self.profile.setEnabled(managed and not busy)

    def add_log_line(self, line: str) -> None:
        """Buffered; call :meth:`flush` on the tick."""
        self._pending.append(line.rstrip("\n"))
        if len(self._pending) > LOG_MAX_BLOCKS:
            del self._pending[: len(self._pending) - LOG_MAX_BLOCKS]

    def set_log(self, lines: list[str]) -> None:
        self.log.setPlainText("\n".join(lines[-LOG_MAX_BLOCKS:]))
        self._pending.clear()
        self.log.moveCursor(QTextCursor.MoveOperation.End)

    def flush(self) -> None:
        if not self._pending:
            return
        text = "\n".join(self._pending)
        self._pending.clear()
        bar = self.log.verticalScrollBar()
        at_end = bar.value() >= bar.maximum() - 2
        self.log.appendPlainText(text)
        if at_end:
            bar.setValue(bar.maximum())
