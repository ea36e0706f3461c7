"""The focus view's transcript: a real text editor (select, copy, search) that mirrors a
:class:`TranscriptDoc` — loads its lines once, then follows its changes. Tool lines
expand and collapse with a click; code and diffs are coloured by line style."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QFont, QImage, QMouseEvent, QPainter, QPaintEvent, QTextCharFormat, QTextCursor
from PySide6.QtWidgets import QPlainTextEdit, QWidget

from workstation.ui import theme
from workstation.ui.panes.line_colours import line_colours
from workstation.ui.panes.tail_view import expanded_text
from workstation.ui.panes.transcript_doc import Line, LineStyle, TranscriptDoc

MAX_BLOCKS = 5000
THUMB_PX = 64


class TranscriptMirror(QPlainTextEdit):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setReadOnly(True)
        self.setFont(theme.mono_font(9.5))
        self.setLineWrapMode(QPlainTextEdit.LineWrapMode.WidgetWidth)
        self.setMaximumBlockCount(MAX_BLOCKS)
        self.setTextInteractionFlags(
            Qt.TextInteractionFlag.TextSelectableByMouse | Qt.TextInteractionFlag.TextSelectableByKeyboard
        )
        self.doc: TranscriptDoc | None = None
        self._last_uid = 0
        self._last_len = 0
        self._last_style: LineStyle | None = None
        self._tools: dict[int, Line] = {}
        self._formats = self._make_formats()
        self._thumbs: dict[int, list[QImage]] = {}
        """Thumbnails of the image lines, by their block's state."""
        self.thumbnails_drawn = 0
        """Thumbnails painted so far (what a test counts)."""

    def _make_formats(self) -> dict[LineStyle, QTextCharFormat]:
        formats: dict[LineStyle, QTextCharFormat] = {}
        for style, colour in line_colours(self.palette()).items():
            fmt = QTextCharFormat()
            fmt.setForeground(colour)
            if style in (LineStyle.USER, LineStyle.TOOL):
                fmt.setFontWeight(QFont.Weight.DemiBold)
            if style is LineStyle.REASONING:
                fmt.setFontItalic(True)
            formats[style] = fmt
        return formats

    # ----- attach / detach -----
    def attach(self, doc: TranscriptDoc) -> None:
        self.detach()
        self.doc = doc
        doc.flush()
        self.clear()
        self._tools.clear()
        self._thumbs.clear()
        self._last_uid = 0
        cursor = QTextCursor(self.document())
        cursor.beginEditBlock()
        first = True
        for line in doc.tail(MAX_BLOCKS):
            self._append_line(cursor, line, first)
            first = False
        cursor.endEditBlock()
        doc.subscribe(self._on_doc_changed)
        self.scroll_to_end()

    def detach(self) -> None:
        if self.doc is not None:
            self.doc.unsubscribe(self._on_doc_changed)
        self.doc = None

    def scroll_to_end(self) -> None:
        bar = self.verticalScrollBar()
        bar.setValue(bar.maximum())

    # ----- following the document -----
    def _on_doc_changed(self, lines: list[Line]) -> None:
        if not lines:
            if self.doc is not None and not self.doc.lines:
                self.clear()
                self._last_uid = 0
            return
        bar = self.verticalScrollBar()
        at_end = bar.value() >= bar.maximum() - 4
        cursor = QTextCursor(self.document())
        cursor.movePosition(QTextCursor.MoveOperation.End)
        cursor.beginEditBlock()
        for line in lines:
            if line.uid == self._last_uid:
                suffix = line.text[self._last_len:]
                if line.style is not self._last_style:  # a fence or diff sign arrived: restyle
                    cursor.movePosition(QTextCursor.MoveOperation.StartOfBlock, QTextCursor.MoveMode.KeepAnchor)
                    cursor.insertText(line.text, self._formats[line.style])
                elif suffix:
                    cursor.insertText(suffix, self._formats[line.style])
                self._last_len = len(line.text)
                self._last_style = line.style
            else:
                self._append_line(cursor, line, self.document().isEmpty())
        cursor.endEditBlock()
        if at_end:
            self.scroll_to_end()

    def _append_line(self, cursor: QTextCursor, line: Line, first: bool) -> None:
        cursor.movePosition(QTextCursor.MoveOperation.End)
        if not first:
            cursor.insertBlock()
        text = line.text
        if line.detail:
            if line.expanded:
                text = expanded_text(text)
            self._tools[line.uid] = line
            if len(self._tools) > MAX_BLOCKS:
                self._tools.pop(next(iter(self._tools)))
        cursor.insertText(text, self._formats[line.style])
        if line.images:
            self._insert_thumbnails(cursor, line)
        cursor.block().setUserState(line.uid % 2_000_000_000)
        self._last_uid = line.uid
        self._last_len = len(line.text)
        self._last_style = line.style
        if line.expanded and line.detail:
            self._insert_detail(cursor, line)

    # ----- expand / collapse tool lines -----
    def mouseReleaseEvent(self, event: QMouseEvent) -> None:  # noqa: N802
        super().mouseReleaseEvent(event)
        if event.button() != Qt.MouseButton.LeftButton or self.textCursor().hasSelection():
            return
        block = self.cursorForPosition(event.position().toPoint()).block()
        line = self._tools.get(block.userState())
        if line is not None:
            self.toggle(line)

    def toggle(self, line: Line) -> None:
        block = self.document().firstBlock()
        while block.isValid() and block.userState() != line.uid % 2_000_000_000:
            block = block.next()
        if not block.isValid():
            return
        line.expanded = not line.expanded
        cursor = QTextCursor(block)
        cursor.movePosition(QTextCursor.MoveOperation.EndOfBlock, QTextCursor.MoveMode.KeepAnchor)
        text = expanded_text(line.text) if line.expanded else line.text
        cursor.insertText(text, self._formats[line.style])
        if line.expanded:
            self._insert_detail(cursor, line)
        else:
            nxt = block.next()
            while nxt.isValid() and nxt.userState() == -1:
                after = nxt.next()
                c = QTextCursor(nxt)
                c.movePosition(QTextCursor.MoveOperation.EndOfBlock, QTextCursor.MoveMode.KeepAnchor)
                c.movePosition(QTextCursor.MoveOperation.NextCharacter, QTextCursor.MoveMode.KeepAnchor)
                if not after.isValid():  # last block: remove the separator before it
                    c = QTextCursor(nxt)
                    c.movePosition(QTextCursor.MoveOperation.PreviousCharacter)
                    c.movePosition(QTextCursor.MoveOperation.End, QTextCursor.MoveMode.KeepAnchor)
                c.removeSelectedText()
                nxt = after if after.isValid() else block.next()
                if not after.isValid():
                    break
        if self.doc is not None:
            self.doc.revision += 1

    def _insert_thumbnails(self, cursor: QTextCursor, line: Line) -> None:
        """Room under an ``IMAGE`` line for its thumbnails (a plain-text editor draws no
        images: ``paintEvent`` paints them over that room)."""
        thumbs = []
        for path in line.images:
            image = QImage(path)
            if not image.isNull():
                thumbs.append(image.scaled(THUMB_PX, THUMB_PX, Qt.AspectRatioMode.KeepAspectRatio,
                                           Qt.TransformationMode.SmoothTransformation))
        if not thumbs:
            return
        self._thumbs[line.uid % 2_000_000_000] = thumbs
        if len(self._thumbs) > MAX_BLOCKS:
            self._thumbs.pop(next(iter(self._thumbs)))
        rows = -(-THUMB_PX // max(1, self.fontMetrics().lineSpacing())) + 1
        block = cursor.block()
        for _ in range(rows):
            cursor.insertBlock()
            cursor.block().setUserState(-2)
        cursor.setPosition(block.position())
        cursor.movePosition(QTextCursor.MoveOperation.EndOfBlock)

    def paintEvent(self, event: QPaintEvent) -> None:  # noqa: N802 - Qt API
        super().paintEvent(event)
        if not self._thumbs:
            return
        painter = QPainter(self.viewport())
        block = self.firstVisibleBlock()
        offset = self.contentOffset()
        height = self.viewport().height()
        while block.isValid():
            top = self.blockBoundingGeometry(block).translated(offset).top()
            if top > height:
                break
            thumbs = self._thumbs.get(block.userState())
            if thumbs:
                y = int(top + self.blockBoundingRect(block).height()) + 2
                x = 6
                for thumb in thumbs:
                    painter.drawImage(x, y, thumb)
                    x += thumb.width() + 6
                    self.thumbnails_drawn += 1
            block = block.next()
        painter.end()

    def _insert_detail(self, cursor: QTextCursor, line: Line) -> None:
        fmt = self._formats[LineStyle.OUTPUT]
        for part in line.detail.split("\n"):
            cursor.insertBlock()
            cursor.insertText("    " + part, fmt)
            cursor.block().setUserState(-1)
