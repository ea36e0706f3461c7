"""The archive: sessions that left the grid (merged, discarded, archived), each with why and
its branch; one comes back to the grid, or is removed for good (after a confirmation).
Opened with ``open()``."""

from __future__ import annotations

from collections.abc import Sequence

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from workstation.ui.backend import ArchivedSession
from workstation.ui.icons_fallback import safe_icon


class ArchiveDialog(QDialog):
    unarchive_requested = Signal(str)
    remove_requested = Signal(str)

    def __init__(self, sessions: Sequence[ArchivedSession], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Archive")
        self.setMinimumSize(620, 360)
        layout = QVBoxLayout(self)
        self.empty = QLabel("No session is archived. Merged and discarded sessions come here, and those "
                            "you archive from a pane's menu.")
        self.empty.setWordWrap(True)
        layout.addWidget(self.empty)
        self.list = QListWidget()
        self.list.setAlternatingRowColors(True)
        for s in sessions:
            repo = s.repo.rstrip("/").rsplit("/", 1)[-1]
            item = QListWidgetItem(f"{s.name}  —  {s.note}   ·  {repo} · {s.branch}")
            item.setData(Qt.ItemDataRole.UserRole, s.session_id)
            item.setToolTip(f"{s.repo}\n{s.branch}")
            self.list.addItem(item)
        layout.addWidget(self.list, 1)
        row = QHBoxLayout()
        self.back_button = QPushButton(safe_icon("back"), "Back to the grid")
        self.remove_button = QPushButton(safe_icon("discard"), "Remove…")
        row.addWidget(self.back_button)
        row.addWidget(self.remove_button)
        row.addStretch(1)
        layout.addLayout(row)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)
        layout.addWidget(buttons)
        self.back_button.clicked.connect(self._back)
        self.remove_button.clicked.connect(self._remove)
        self.list.currentItemChanged.connect(lambda _i, _o: self._sync())
        self._sync()

    def _selected(self) -> str | None:
        item = self.list.currentItem()
        return item.data(Qt.ItemDataRole.UserRole) if item is not None else None

    def _sync(self) -> None:
        has = self._selected() is not None
        self.back_button.setEnabled(has)
        self.remove_button.setEnabled(has)
        self.empty.setVisible(self.list.count() == 0)
        self.list.setVisible(self.list.count() > 0)

    def _back(self) -> None:
        """Ask for the session back; its row leaves when the fleet has brought it back
        (:meth:`forget`), so an unarchive that fails leaves it listed."""
        sid = self._selected()
        if sid is not None:
            self.unarchive_requested.emit(sid)

    def _remove(self) -> None:
        sid = self._selected()
        if sid is not None:
            self.remove_requested.emit(sid)

    def forget(self, session_id: str) -> None:
        """A session was removed or brought back to the grid: it leaves the list."""
        for i in range(self.list.count()):
            if self.list.item(i).data(Qt.ItemDataRole.UserRole) == session_id:
                self.list.takeItem(i)
                break
        self._sync()
