"""A read-only, coloured unified diff (added green, removed red, hunks dim): the Diff tab, and
the change an approval would make."""

from __future__ import annotations

from PySide6.QtGui import QTextCharFormat, QTextCursor
from PySide6.QtWidgets import QPlainTextEdit, QWidget

from workstation.ui import theme
from workstation.ui.panes.line_colours import line_colours
from workstation.ui.panes.transcript_doc import diff_style


class DiffText(QPlainTextEdit):
    def __init__(self, parent: QWidget | None = None, *, point_size: float = 9.5) -> None:
        super().__init__(parent)
        self.setReadOnly(True)
        self.setFont(theme.mono_font(point_size))
        self.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        self._text = ""

    @property
    def diff(self) -> str:
        return self._text

    def set_diff(self, diff_text: str) -> None:
        """Show ``diff_text``; the same text again changes nothing (the scroll position stays,
        so a view that follows the worktree live does not jump)."""
        if diff_text == self._text:
            return
        self._text = diff_text
        bar = self.verticalScrollBar()
        keep = bar.value()
        colours = line_colours(self.palette())
        self.clear()
        cursor = QTextCursor(self.document())
        cursor.beginEditBlock()
        for i, line in enumerate(diff_text.splitlines()):
            if i:
                cursor.insertBlock()
            fmt = QTextCharFormat()
            fmt.setForeground(colours[diff_style(line)])
            cursor.insertText(line, fmt)
        cursor.endEditBlock()
        bar.setValue(min(keep, bar.maximum()))

    def line_count(self) -> int:
        return self.document().blockCount() if self._text else 0
