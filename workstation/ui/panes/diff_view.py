"""The focus view's Diff tab: the session's diff against its base, following its worktree
(redrawn when the agent changes files), with the review actions: commit, commit and merge in
one step, discard."""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QHBoxLayout, QLabel, QPushButton, QVBoxLayout, QWidget

from workstation.ui.icons_fallback import safe_icon
from workstation.ui.panes.diff_text import DiffText


class DiffView(QWidget):
    refresh_requested = Signal()
    integrate_requested = Signal(str)
    """``commit``, ``merge`` (commit and merge, one step) or ``discard``."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 4, 0, 0)
        row = QHBoxLayout()
        self.summary = QLabel("No changes yet.")
        row.addWidget(self.summary, 1)
        self.refresh_button = QPushButton("Refresh")
        self.refresh_button.setToolTip("The tab follows the worktree; this reads it again now")
        self.commit_button = QPushButton(safe_icon("commit"), "Commit…")
        self.merge_button = QPushButton(safe_icon("merge"), "Commit and merge…")
        self.merge_button.setToolTip("Commit its changes, merge or rebase them into a branch, mark it merged")
        self.discard_button = QPushButton(safe_icon("discard"), "Discard…")
        self.discard_button.setToolTip("Throw away its changes and commits (asks first)")
        row.addWidget(self.refresh_button)
        for button, action in ((self.commit_button, "commit"), (self.merge_button, "merge"),
                               (self.discard_button, "discard")):
            button.clicked.connect(lambda _=False, a=action: self.integrate_requested.emit(a))
            row.addWidget(button)
        self.refresh_button.clicked.connect(self.refresh_requested)
        layout.addLayout(row)
        self.text = DiffText()
        layout.addWidget(self.text, 1)
        self.set_actions_enabled(False)

    def set_actions_enabled(self, enabled: bool) -> None:
        for button in (self.commit_button, self.merge_button, self.discard_button):
            button.setEnabled(enabled)

    def set_diff(self, diff_text: str, summary: str = "") -> None:
        self.text.set_diff(diff_text)
        self.summary.setText(summary or ("No changes yet." if not diff_text else ""))
        self.set_actions_enabled(bool(diff_text))
