"""The focus view's Checkpoints tab: every checkpoint of the session, restorable — its files,
its conversation or both go back to that point (after a confirmation)."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from workstation.ui.icons_fallback import safe_icon


class CheckpointList(QWidget):
    restore_requested = Signal(str, str)
    """(commit, label) of the checkpoint to go back to."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 4, 0, 0)
        self.list = QListWidget()
        self.list.setAlternatingRowColors(True)
        layout.addWidget(self.list, 1)
        row = QHBoxLayout()
        self.hint = QLabel("A checkpoint is taken after every change the agent makes; double-click "
                           "one (or select it and Restore…) to go back to it.")
        self.hint.setWordWrap(True)
        row.addWidget(self.hint, 1)
        self.restore_button = QPushButton(safe_icon("restart"), "Restore…")
        self.restore_button.setEnabled(False)
        row.addWidget(self.restore_button)
        layout.addLayout(row)
        self.list.currentItemChanged.connect(lambda item, _old: self.restore_button.setEnabled(item is not None))
        self.list.itemDoubleClicked.connect(self._restore)
        self.restore_button.clicked.connect(lambda: self._restore(self.list.currentItem()))

    def set_items(self, items: list[tuple[str, str]]) -> None:
        """(label, commit) of each checkpoint, oldest first."""
        self.list.clear()
        for label, commit in items:
            item = QListWidgetItem(f"{label}  ·  {commit[:8]}")
            item.setData(Qt.ItemDataRole.UserRole, (commit, label))
            item.setToolTip(commit)
            self.list.addItem(item)
        self.restore_button.setEnabled(False)

    def count(self) -> int:
        return self.list.count()

    def _restore(self, item: QListWidgetItem | None) -> None:
        if item is None:
            return
        commit, label = item.data(Qt.ItemDataRole.UserRole)
        self.restore_requested.emit(commit, label)
