"""Attention: counts the sessions that wait for a person, and tells the desktop once
when a session needs input, finishes or fails (system tray where there is one)."""

from __future__ import annotations

import logging

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QSystemTrayIcon, QWidget

from workstation.core.session_state import SessionState

log = logging.getLogger(__name__)

NOTIFY_STATES = {
    SessionState.AWAITING_APPROVAL: "waits for your approval",
    SessionState.NEEDS_INPUT: "needs your input",
    SessionState.DONE: "finished",
    SessionState.FAILED: "failed",
}


class Attention(QObject):
    waiting_changed = Signal(int)
    """How many sessions wait for the user now."""
    notified = Signal(str, str)
    """(title, message) of each notification, also where no tray exists (tests, status bar)."""

    def __init__(self, window: QWidget) -> None:
        super().__init__(window)
        self._waiting: set[str] = set()
        self._tray: QSystemTrayIcon | None = None
        if QSystemTrayIcon.isSystemTrayAvailable():
            self._tray = QSystemTrayIcon(window.windowIcon(), self)
            self._tray.setToolTip("workstation")
            self._tray.show()

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def waiting_ids(self) -> set[str]:
        return set(self._waiting)

    def state_changed(self, session_id: str, name: str, old: SessionState | None, new: SessionState,
                      reason: str = "") -> None:
        before = len(self._waiting)
        if new.wants_user:
            self._waiting.add(session_id)
        else:
            self._waiting.discard(session_id)
        if len(self._waiting) != before:
            self.waiting_changed.emit(len(self._waiting))
        if new is not old and new in NOTIFY_STATES:
            message = f"{name} {NOTIFY_STATES[new]}" + (f": {reason}" if reason else "")
            self.notify("workstation", message, error=new is SessionState.FAILED)

    def forget(self, session_id: str) -> None:
        if session_id in self._waiting:
            self._waiting.discard(session_id)
            self.waiting_changed.emit(len(self._waiting))

    def notify(self, title: str, message: str, *, error: bool = False) -> None:
        log.info("notify: %s", message)
        if self._tray is not None and QSystemTrayIcon.supportsMessages():
            icon = QSystemTrayIcon.MessageIcon.Critical if error else QSystemTrayIcon.MessageIcon.Information
            self._tray.showMessage(title, message, icon, 8000)
        self.notified.emit(title, message)
