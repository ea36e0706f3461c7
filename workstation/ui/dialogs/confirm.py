"""A confirmation before anything destructive, naming exactly what it affects (the branch,
its commits, the n commands, the sessions): opened with ``open()``, never ``exec()``; Cancel
is the default button, so Enter or Esc never destroys anything by accident."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QDialog, QDialogButtonBox, QLabel, QPlainTextEdit, QVBoxLayout, QWidget

from workstation.ui import theme

ITEMS_SHOWN = 12


class ConfirmDialog(QDialog):
    confirmed = Signal()

    def __init__(self, parent: QWidget | None, *, title: str, headline: str, items: Sequence[str] = (),
                 note: str = "", confirm: str = "Continue", destructive: bool = True) -> None:
        super().__init__(parent)
        self.setWindowTitle(title)
        self.setModal(True)
        self.setMinimumWidth(480)
        layout = QVBoxLayout(self)
        self.headline = QLabel(headline)
        self.headline.setWordWrap(True)
        self.headline.setTextFormat(Qt.TextFormat.PlainText)
        font = self.headline.font()
        font.setBold(True)
        self.headline.setFont(font)
        layout.addWidget(self.headline)
        self.items = list(items)
        self.list = QPlainTextEdit()
        self.list.setReadOnly(True)
        self.list.setFont(theme.mono_font(9.0))
        shown = self.items[:ITEMS_SHOWN]
        more = len(self.items) - len(shown)
        self.list.setPlainText("\n".join(shown) + (f"\n… and {more} more" if more > 0 else ""))
        lines = min(len(shown) + (1 if more > 0 else 0), ITEMS_SHOWN + 1)
        self.list.setFixedHeight(self.list.fontMetrics().lineSpacing() * max(1, lines) + 14)
        self.list.setVisible(bool(self.items))
        layout.addWidget(self.list)
        self.note = QLabel(note)
        self.note.setWordWrap(True)
        self.note.setTextFormat(Qt.TextFormat.PlainText)
        self.note.setVisible(bool(note))
        layout.addWidget(self.note)
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Cancel)
        self.confirm_button = self.buttons.addButton(confirm, QDialogButtonBox.ButtonRole.AcceptRole)
        if destructive:
            self.confirm_button.setStyleSheet(f"color: {theme.RED.name()}; font-weight: bold;")
        cancel = self.buttons.button(QDialogButtonBox.StandardButton.Cancel)
        cancel.setDefault(True)
        cancel.setAutoDefault(True)
        self.confirm_button.setAutoDefault(False)
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)
        layout.addWidget(self.buttons)
        self.accepted.connect(self.confirmed)
        self.finished.connect(self.deleteLater)


class Confirmations:
    """The window's confirmations: one open at a time (``dialog``, for tests and the close
    guard), each naming what it affects."""

    def __init__(self, parent: QWidget) -> None:
        self.parent = parent
        self.dialog: ConfirmDialog | None = None

    def ask(self, on_yes: Callable[[], None], *, title: str, headline: str, items: Sequence[str] = (),
            note: str = "", confirm: str = "Continue", destructive: bool = True) -> ConfirmDialog:
        """Open the confirmation; ``on_yes()`` runs when the user confirms."""
        if self.dialog is not None:
            self.dialog.reject()
        dialog = ConfirmDialog(self.parent, title=title, headline=headline, items=items, note=note,
                               confirm=confirm, destructive=destructive)
        dialog.confirmed.connect(on_yes)
        dialog.finished.connect(lambda _code, d=dialog: self._closed(d))
        self.dialog = dialog
        dialog.open()
        return dialog

    def _closed(self, dialog: ConfirmDialog) -> None:
        if self.dialog is dialog:
            self.dialog = None
