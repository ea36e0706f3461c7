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
from PySide6.QtGui import (
    QFontMetrics,
    QMouseEvent,
    QPainter,
    QPaintEvent,
    QPalette,
    QStaticText,
    QWheelEvent,
)
from PySide6.QtWidgets import QSizePolicy, QWidget

from workstation.ui import theme
from workstation.ui.panes.line_colours import line_colours
from workstation.ui.panes.transcript_doc import Line, LineStyle, TranscriptDoc, wrap_line

MARGIN_PX = 4
COLLAPSED = "▸"
EXPANDED = "▾"
MAX_DETAIL_LINES = 200
_NO_ROWS: list[str] = []


def expanded_text(text: str) -> str:
    """A tool line's text while its details show: its ``▸`` turns into ``▾``."""
    return EXPANDED + text[1:] if text.startswith(COLLAPSED) else f"{EXPANDED} {text}"


def _static_text(text: str) -> QStaticText:
    static = QStaticText(text)
    static.setTextFormat(Qt.TextFormat.PlainText)
    pass
    return static


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
        self._rows: list[tuple[int, int, Line]] = []  # (top y, bottom y, line) drawn last paint
        self._statics: dict[int, tuple[tuple[str, ...], list[QStaticText | None]]] = {}
        """Laid-out rows per line uid, kept for the lines drawn in the last paint."""
        self._metrics_key = ""
        self._metrics_cache = (12, 7)
        self._colours = line_colours()
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
            self._colours = line_colours(self.palette())
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
    def _metrics(self) -> tuple[int, int]:
        """(row height, cell width) of the current font, cached per font."""
        key = self.font().key()
        if self._metrics_key != key:
            fm = QFontMetrics(self.font())
            self._metrics_cache = (fm.lineSpacing(), max(1, fm.horizontalAdvance("M")))
            self._metrics_key = key
            self._statics = {}
        return self._metrics_cache

    def paintEvent(self, event: QPaintEvent) -> None:  # noqa: N802
        self.drawn_revision = self.doc.revision
        painter = QPainter(self)
        painter.fillRect(self.rect(), self.palette().color(QPalette.ColorRole.Base))
        row_h, cell_w = self._metrics()
        cols = max(8, (self.width() - 2 * MARGIN_PX) // cell_w)
        colours = self._colours
        lines = self.doc.lines
        if not lines:
            self._rows = []
            if self.empty_text:
                painter.setPen(colours[LineStyle.NOTICE])
                painter.drawText(
                    self.rect().adjusted(MARGIN_PX, MARGIN_PX, -MARGIN_PX, -MARGIN_PX),
                    Qt.AlignmentFlag.AlignCenter | Qt.TextFlag.TextWordWrap,
                    self.empty_text,
                )
            return
        # Take whole lines bottom-up until they fill the view (plus what is scrolled away),
        # then draw top-down: anchored at the top while the text is short, following the
        # bottom once it fills the view.
        capacity = max(1, (self.height() - 2 * MARGIN_PX) // row_h)
        want = capacity + self.scroll_rows
        picked: list[tuple[Line, tuple[str, ...], list[str]]] = []
        total = 0
        index = len(lines) - 1
        while index >= 0 and total < want:
            line = lines[index]
            index -= 1
            segs = self._wrapped(line, cols)
            detail = self._detail_rows(line, cols) if line.expanded and line.detail else _NO_ROWS
            picked.append((line, segs, detail))
            total += len(segs) + len(detail)
        if total < want and self.scroll_rows:  # scrolled past the top: clamp
            self.scroll_rows = max(0, total - capacity)
        drop_top = max(0, total - capacity - self.scroll_rows)
        y = MARGIN_PX
        bottom = MARGIN_PX + capacity * row_h
        old = self._statics
        statics: dict[int, tuple[tuple[str, ...], list[QStaticText | None]]] = {}
        placed: list[tuple[int, int, Line]] = []
        for line, segs, detail in reversed(picked):
            n = len(segs)
            first = 0
            if drop_top:
                first = min(n, drop_top)
                drop_top -= first
            if first < n and y < bottom:
                cached = old.get(line.uid)
                if cached is None:
                    texts: list[QStaticText | None] = [None] * n
                else:
                    prev_segs, prev_texts = cached
                    texts = [
                        prev_texts[i] if i < len(prev_segs) and prev_segs[i] == segs[i] else None
                        for i in range(n)
                    ]
                statics[line.uid] = (segs, texts)
                painter.setPen(colours[line.style])
                top = y
                for i in range(first, n):
                    if y >= bottom:
                        break
                    static = texts[i]
                    if static is None:
                        static = texts[i] = _static_text(segs[i])
                    painter.drawStaticText(MARGIN_PX, y, static)
                    y += row_h
                placed.append((top, y, line))
            if detail:
                skip = 0
                if drop_top:
                    skip = min(len(detail), drop_top)
                    drop_top -= skip
                painter.setPen(colours[LineStyle.OUTPUT])
                top = y
                for seg in detail[skip:]:
                    if y >= bottom:
                        break
                    painter.drawText(MARGIN_PX, y + self._ascent(), seg)
                    y += row_h
                placed.append((top, y, line))
            if y >= bottom:
                break
        self._statics = statics
        self._rows = placed
        if self.scroll_rows:
            painter.setPen(colours[LineStyle.NOTICE])
            painter.drawText(
                QRect(0, self.height() - row_h - 1, self.width() - MARGIN_PX, row_h),
                Qt.AlignmentFlag.AlignRight, f"↓ {self.scroll_rows}",
            )

    def _ascent(self) -> int:
        return QFontMetrics(self.font()).ascent()

    def _detail_rows(self, line: Line, cols: int) -> list[str]:
        rows: list[str] = []
        for part in line.detail.split("\n")[:MAX_DETAIL_LINES]:
            rows.extend("  " + seg for seg in wrap_line(part, cols - 2))
        return rows

    def _wrapped(self, line: Line, cols: int) -> tuple[str, ...]:
        key = (cols, len(line.text), line.expanded)
        if line.wrap_key != key:
            text = line.text
            if line.detail and line.expanded:
                text = expanded_text(text)
            line.wrapped = tuple(wrap_line(text, cols))
            line.wrap_key = key
        return line.wrapped

    # ----- interaction -----
    def line_at(self, y: int) -> Line | None:
        for top, end, line in self._rows:
            if top <= y < end:
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
