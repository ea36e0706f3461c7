"""The inline bar a pane shows while its agent waits: what the action would change (a file
edit's diff, a command in full), then approve · deny with feedback · edit."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QSizePolicy,
    QVBoxLayout,
    QWidget,
)

from workstation.ui import theme
from workstation.ui.panes.diff_text import DiffText

PREVIEW_LINES_TILE = 8
"""Lines of a proposed edit a tile shows before it scrolls (the focus view shows more)."""


class EditActionDialog(QDialog):
    """Edit the waiting action's arguments before approving it (opened with ``open()``)."""

    def __init__(self, title: str, arguments: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle(title)
        self.setModal(True)
        layout = QVBoxLayout(self)
        layout.addWidget(QLabel("Change the arguments, then approve the edited action."))
        self.editor = QPlainTextEdit(arguments)
        self.editor.setFont(theme.mono_font(9.5))
        self.editor.setMinimumSize(520, 240)
        layout.addWidget(self.editor)
        buttons = QDialogButtonBox(
            QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel
        )
        buttons.button(QDialogButtonBox.StandardButton.Ok).setText("Approve edited")
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        layout.addWidget(buttons)

    @property
    def arguments(self) -> str:
        return self.editor.toPlainText()


class ApprovalBar(QWidget):
    """Shown in place in a pane while an action waits for the user."""

    approved = Signal()
    denied = Signal(str)
    """Feedback text for the agent (may be empty)."""
    edited = Signal(str)
    """The edited arguments (JSON text) to run instead."""

    def __init__(self, parent: QWidget | None = None, *, preview_lines: int = PREVIEW_LINES_TILE) -> None:
        super().__init__(parent)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self._arguments = ""
        self._title = ""
        self._preview_lines = preview_lines
        outer = QVBoxLayout(self)
        outer.setContentsMargins(4, 2, 4, 3)
        outer.setSpacing(2)
        self.summary = QLabel()
        self.summary.setTextFormat(Qt.TextFormat.PlainText)
        self.summary.setFont(theme.mono_font(8.0))
        self.summary.setMinimumWidth(10)
        self.summary.setWordWrap(True)
        outer.addWidget(self.summary)
        self.preview = DiffText(self, point_size=8.0)
        """The change a file edit would make, as a coloured diff (hidden for other actions)."""
        self.preview.hide()
        outer.addWidget(self.preview)
        row = QHBoxLayout()
        row.setSpacing(4)
        row.setContentsMargins(0, 0, 0, 0)
        self.approve_button = QPushButton("Approve")
        self.approve_button.setToolTip("Run the action (Ctrl+Enter)")
        self.deny_button = QPushButton("Deny…")
        self.deny_button.setToolTip("Refuse it and tell the agent why")
        self.edit_button = QPushButton("Edit")
        self.edit_button.setToolTip("Change the arguments, then run")
        for button in (self.approve_button, self.deny_button, self.edit_button):
            button.setFocusPolicy(Qt.FocusPolicy.TabFocus)
            button.setMinimumWidth(10)
            row.addWidget(button)
        row.addStretch(1)
        outer.addLayout(row)
        self.feedback_row = QWidget()
        fb = QHBoxLayout(self.feedback_row)
        fb.setContentsMargins(0, 0, 0, 0)
        fb.setSpacing(4)
        self.feedback = QLineEdit()
        self.feedback.setPlaceholderText("Why not? The agent reads this.")
        self.send_denial = QPushButton("Deny")
        fb.addWidget(self.feedback, 1)
        fb.addWidget(self.send_denial)
        self.feedback_row.hide()
        outer.addWidget(self.feedback_row)
        self.approve_button.clicked.connect(self._approve)
        self.deny_button.clicked.connect(self._show_feedback)
        self.send_denial.clicked.connect(self._deny)
        self.feedback.returnPressed.connect(self._deny)
        self.edit_button.clicked.connect(self._edit)
        self._dialog: EditActionDialog | None = None
        self.setAutoFillBackground(True)

    def show_request(self, title: str, summary: str, arguments: str, preview: str = "") -> None:
        self._title = title
        self._arguments = arguments
        self.summary.setText(summary or title)
        self.summary.setToolTip(arguments)
        self.preview.set_diff(preview)
        if preview:
            rows = min(self.preview.line_count(), self._preview_lines)
            line_h = self.preview.fontMetrics().lineSpacing()
            self.preview.setFixedHeight(rows * line_h + 2 * self.preview.frameWidth() + 6)
        self.preview.setVisible(bool(preview))
        self.feedback.clear()
        self.feedback_row.hide()
        self.show()

    @property
    def preview_text(self) -> str:
        return self.preview.diff

    def _approve(self) -> None:
        self.hide()
        self.approved.emit()

    def _show_feedback(self) -> None:
        self.feedback_row.show()
        self.feedback.setFocus()

    def _deny(self) -> None:
        text = self.feedback.text().strip()
        self.hide()
        self.denied.emit(text)

    def _edit(self) -> None:
        dialog = EditActionDialog(f"Edit {self._title}", self._arguments, self)
        dialog.finished.connect(lambda code: self._edited(dialog, code))
        self._dialog = dialog
        dialog.open()

    def _edited(self, dialog: EditActionDialog, code: int) -> None:
        self._dialog = None
        if code == QDialog.DialogCode.Accepted:
            self.hide()
            self.edited.emit(dialog.arguments)
        dialog.deleteLater()
