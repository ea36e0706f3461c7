"""The tile's transcript: paints only the tail of a :class:`TranscriptDoc` that fits.

A ``QPlainTextEdit`` per tile cost ~18 ms to update 32 panes at once (measured,
1920×1080 offscreen); this widget paints the visible lines straight from the
document with cached wraps in ~5 ms, so 32 live panes leave the loop free. The
focus view, where selection and copy matter, uses a real text editor.

Follows the bottom unless the user scrolled up (wheel); a click on a tool line
expands or collapses its details.
"""

from __future__ import annotations

from PySide6.QtCore import QRect, QSize, Qt, Signal
from PySide6.QtGui import QFontMetrics, QMouseEvent, QPainter, QPaintEvent, QPalette, QWheelEvent
from PySide6.QtWidgets import QSizePolicy, QWidget

from workstation.ui import theme
from workstation.ui.panes.transcript_doc import Line, LineStyle, TranscriptDoc, wrap_line

MARGIN_PX = 4
COLLAPSED = "▸"
EXPANDED = "▾"


class TailView(QWidget):
    """Read-only, bottom-anchored view of a transcript document."""

    activated = Signal()
    """Double-click: the pane asks to be zoomed."""

    def __init__(self, doc: TranscriptDoc, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.doc = doc
        self.scroll_rows = 0
        """Visual rows scrolled up from the bottom; 0 follows new text."""
        self.drawn_revision = -1
        self.empty_text = ""
        self._rows: list[tuple[int, Line]] = []  # (top y, line) of rows drawn last paint
        self._colours = theme.line_colours()
        self.setAttribute(Qt.WidgetAttribute.WA_OpaquePaintEvent)
        self.setFocusPolicy(Qt.FocusPolicy.NoFocus)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Expanding)
        self.setFont(theme.mono_font())

    # ----- driven by the flush tick -----
    @property
    def stale(self) -> bool:
        return self.drawn_revision != self.doc.revision

    def refresh(self) -> None:
        """Schedule a repaint if the document changed since the last paint."""
        if self.stale:
            self.update()

    def changeEvent(self, event) -> None:  # noqa: N802 - Qt API
        if event.type() in (event.Type.PaletteChange, event.Type.ApplicationPaletteChange):
            self._colours = theme.line_colours(self.palette())
        super().changeEvent(event)

    def set_point_size(self, point_size: float) -> None:
        font = self.font()
        if font.pointSizeF() != point_size:
            font.setPointSizeF(point_size)
            self.setFont(font)
            self.update()

    def sizeHint(self) -> QSize:  # noqa: N802
        return QSize(240, 160)

    def minimumSizeHint(self) -> QSize:  # noqa: N802
        return QSize(60, 30)

    # ----- painting -----
    def paintEvent(self, event: QPaintEvent) -> None:  # noqa: N802
        self.drawn_revision = self.doc.revision
        painter = QPainter(self)
        pal = self.palette()
        painter.fillRect(self.rect(), pal.color(QPalette.ColorRole.Base))
        fm = QFontMetrics(self.font())
        row_h = fm.lineSpacing()
        ascent = fm.ascent()
        cell_w = max(1, fm.horizontalAdvance("M"))
        cols = max(8, (self.width() - 2 * MARGIN_PX) // cell_w)
        colours = self._colours
        rows: list[tuple[int, Line]] = []
        if not self.doc.lines:
            if self.empty_text:
                painter.setPen(colours[LineStyle.NOTICE])
                painter.drawText(
                    self.rect().adjusted(MARGIN_PX, MARGIN_PX, -MARGIN_PX, -MARGIN_PX),
                    Qt.AlignmentFlag.AlignCenter | Qt.TextFlag.TextWordWrap,
                    self.empty_text,
                )
            self._rows = rows
            return
        # Collect rows bottom-up until the view is full, then draw them top-down: anchored
        # at the top while the text is short, following the bottom once it fills the view.
        capacity = max(1, (self.height() - 2 * MARGIN_PX) // row_h)
        skip = self.scroll_rows
        picked: list[tuple[str, LineStyle, Line]] = []
        lines = self.doc.lines
        index = len(lines) - 1
        while index >= 0 and len(picked) < capacity:
            line = lines[index]
            index -= 1
            rows_of_line: list[tuple[str, LineStyle]] = [(seg, line.style) for seg in self._wrapped(line, cols)]
            if line.expanded and line.detail:
                for part in line.detail.split("\n")[:200]:
                    rows_of_line.extend(("  " + seg, LineStyle.OUTPUT) for seg in wrap_line(part, cols - 2))
            for seg, style in reversed(rows_of_line):
                if skip:
                    skip -= 1
                    continue
                picked.append((seg, style, line))
                if len(picked) >= capacity:
                    break
        if skip and self.scroll_rows:  # scrolled past the top: clamp
            self.scroll_rows = max(0, self.scroll_rows - skip)
        y = MARGIN_PX
        current: LineStyle | None = None
        for seg, style, line in reversed(picked):
            if style is not current:
                painter.setPen(colours[style])
                current = style
            painter.drawText(MARGIN_PX, y + ascent, seg)
            rows.append((y, line))
            y += row_h
        if self.scroll_rows:
            painter.setPen(colours[LineStyle.NOTICE])
            painter.drawText(
                QRect(0, self.height() - row_h - 1, self.width() - MARGIN_PX, row_h),
                Qt.AlignmentFlag.AlignRight, f"↓ {self.scroll_rows}",
            )
        self._rows = rows

    def _wrapped(self, line: Line, cols: int) -> list[str]:
        key = (cols, len(line.text), line.expanded)
        if line.wrap_key != key:
            text = line.text
            if line.style is LineStyle.TOOL and line.detail:
                text = (EXPANDED if line.expanded else COLLAPSED) + " " + text
            line.wrapped = wrap_line(text, cols)
            line.wrap_key = key
        return line.wrapped

    # ----- interaction -----
    def line_at(self, y: int) -> Line | None:
        row_h = QFontMetrics(self.font()).lineSpacing()
        for top, line in self._rows:
            if top <= y < top + row_h:
                return line
        return None

    def mousePressEvent(self, event: QMouseEvent) -> None:  # noqa: N802
        line = self.line_at(int(event.position().y()))
        if line is not None and line.expandable and event.button() == Qt.MouseButton.LeftButton:
            self.doc.toggle(line)
            self.update()
            event.accept()
            return
        super().mousePressEvent(event)

    def mouseDoubleClickEvent(self, event: QMouseEvent) -> None:  # noqa: N802
        line = self.line_at(int(event.position().y()))
        if line is not None and line.expandable:
            return  # the first click already toggled it
        self.activated.emit()

    def wheelEvent(self, event: QWheelEvent) -> None:  # noqa: N802
        steps = event.angleDelta().y() // 40
        if steps:
            self.scroll_rows = max(0, self.scroll_rows + steps)
            self.update()
        event.accept()

    def follow(self) -> None:
        """Back to the bottom (new text scrolls into view again)."""
        if self.scroll_rows:
            self.scroll_rows = 0
            self.update()
