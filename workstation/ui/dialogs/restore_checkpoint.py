"""Go back to a checkpoint: its files, its conversation, or both (what it affects is named;
a working session is paused first). Opened with ``open()``."""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QDialog, QDialogButtonBox, QLabel, QRadioButton, QVBoxLayout, QWidget

from workstation.ui import theme


class RestoreDialog(QDialog):
    restore_requested = Signal(bool, bool)
    """(files, conversation)."""

    def __init__(self, name: str, label: str, commit: str, parent: QWidget | None = None, *,
                 working: bool = False) -> None:
        super().__init__(parent)
        self.setWindowTitle(f"Restore {name}")
        layout = QVBoxLayout(self)
        head = QLabel(f"Go back to “{label}” ({commit[:10]})?")
        font = head.font()
        font.setBold(True)
        head.setFont(font)
        layout.addWidget(head)
        self.both = QRadioButton("Files and conversation")
        self.files = QRadioButton("Files only (the agent remembers what it did since)")
        self.conversation = QRadioButton("Conversation only (the files stay as they are)")
        self.both.setChecked(True)
        for option in (self.both, self.files, self.conversation):
            layout.addWidget(option)
        note = QLabel("Changes made after that checkpoint in the worktree are lost (they stay in the "
                      "later checkpoints' history until the session is removed)."
                      + (" It is working: it is paused first." if working else ""))
        note.setWordWrap(True)
        layout.addWidget(note)
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Cancel)
        self.restore_button = self.buttons.addButton("Restore", QDialogButtonBox.ButtonRole.AcceptRole)
        self.restore_button.setStyleSheet(f"color: {theme.RED.name()}; font-weight: bold;")
        self.buttons.button(QDialogButtonBox.StandardButton.Cancel).setDefault(True)
        self.buttons.accepted.connect(self._restore)
        self.buttons.rejected.connect(self.reject)
        layout.addWidget(self.buttons)
        self.finished.connect(self.deleteLater)

    def _restore(self) -> None:
        files = not self.conversation.isChecked()
        conversation = not self.files.isChecked()
        self.restore_requested.emit(files, conversation)
        self.accept()
