"""The tile's transcript: paints only the tail of a :class:`TranscriptDoc` that fits.

A ``QPlainTextEdit`` per tile cost ~18 ms to update 32 panes at once (measured,
1920×1080 offscreen); this widget paints the visible lines straight from the
document with cached wraps in ~5 ms, so 32 live panes leave the loop free. The
focus view, where selection and copy matter, uses a real text editor. When new text
only moves the rows up, the view moves its pixels (``QWidget.scroll``, a copy inside the
backing store) and paints just the rows that changed: two or three of a tile's twenty
at a 30 Hz flush, instead of every row every tick.

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
ELLIPSIS = "…"
_NO_ROWS: list[str] = []
HEAD_FIRST = frozenset({LineStyle.TOOL, LineStyle.USER, LineStyle.NOTICE, LineStyle.ERROR, LineStyle.IMAGE})
"""Lines read from their start (icon, tool and target; what the person asked; what
happened): one cut at the top of the view shows its first rows, the last ending in "…",
not its last ones. Prose and code keep their end in view, as they are written: a tool
line's last row alone read "+4 −5" (or just "−5") above each waiting tile's approval bar.
Only while the view follows the bottom: scrolled up, every row shows in turn."""

Row = tuple[str, LineStyle, Line, int]
"""One visual row: its text, style, the line it belongs to and which wrapped row of that
line it is (-1: a row of the line's expanded details)."""


def expanded_text(text: str) -> str:
    """A tool line's text while its details show: its ``▸`` turns into ``▾``."""
    return EXPANDED + text[1:] if text.startswith(COLLAPSED) else f"{EXPANDED} {text}"


def _static_text(text: str) -> QStaticText:
    static = QStaticText(text)
    static.setTextFormat(Qt.TextFormat.PlainText)
    return static


def _text_from_row(text: str, rows: tuple[str, ...], index: int) -> str:
    """``text`` from where its wrapped row ``index`` starts (``wrap_line`` keeps each row's
    characters in order, dropping only the space it breaks at)."""
    at = start = 0
    for row in rows[:index + 1]:
        start = text.find(row, at)
        at = start + len(row)
    return text[start:]


def _cut(text: str, cols: int) -> str:
    """``text`` to at most ``cols`` characters, without a word's first one or two letters
    left dangling at the end ("core.py  +" of "core.py  +4 −5")."""
    head = text[:cols]
    if len(text) > cols and text[cols] != " ":
        space = head.rfind(" ")
        if space >= 0 and len(head) - space <= 3:
            head = head[:space]
    return head.rstrip()


class TailView(QWidget):
    """Read-only, bottom-anchored view of a transcript document."""

    activated = Signal()
    """Double-click: the pane asks to be zoomed."""
    line_toggled = Signal()
    """A click expanded or collapsed a tool line (the click goes no further)."""

    def __init__(self, doc: TranscriptDoc, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.doc = doc
        self.scroll_rows = 0
        """Visual rows scrolled up from the bottom; 0 follows new text."""
        self.drawn_revision = -1
        self.empty_text = ""
        self._rows: list[tuple[int, int, Line]] = []  # (top y, bottom y, line) of the layout
        self._statics: dict[tuple[int, int], tuple[str, QStaticText]] = {}
        """Laid-out text per (line uid, wrapped row), kept for the rows shown."""
        self._layout_key: tuple[int, ...] | None = None
        self._layout_rows: list[Row] = []
        self._layout_shown: list[tuple[str, LineStyle]] = []
        """(text, style) of each of ``_layout_rows``, made with them."""
        self._shown: list[tuple[str, LineStyle]] = []
        """(text, style) of each row on screen, top to bottom, as the last paint left it."""
        self._planned = False
        """A partial repaint is scheduled (rows moved and some invalidated); not painted yet."""
        self.rows_painted = 0
        """Rows drawn so far (what a partial repaint saves shows here)."""
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
        """Schedule a repaint of what changed if the document changed since the last paint."""
        if self.stale and not self._plan():
            self.update()

    def changeEvent(self, event) -> None:  # noqa: N802 - Qt API
        if event.type() in (event.Type.PaletteChange, event.Type.ApplicationPaletteChange):
            self._colours = line_colours(self.palette())
        elif event.type() is event.Type.FontChange:
            self._metrics_key = ""  # measured again at the next paint
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
        """(row height, cell width) of the current font, cached per font (a font change
        clears the cache; asking the font for its key at every paint cost more than the
        rest of an unchanged tile's refresh)."""
        if self._metrics_key:
            return self._metrics_cache
        fm = QFontMetrics(self.font())
        self._metrics_cache = (fm.lineSpacing(), max(1, fm.horizontalAdvance("M")))
        self._metrics_key = self.font().key()
        self._statics = {}
        return self._metrics_cache

    def _layout(self) -> list[Row]:
        """The rows the view shows now, top to bottom (cached until the document, the size,
        the scroll position or the font change)."""
        row_h, cell_w = self._metrics()
        key = (self.doc.revision, self.width(), self.height(), self.scroll_rows, row_h, cell_w)
        if key == self._layout_key:
            return self._layout_rows
        cols = max(8, (self.width() - 2 * MARGIN_PX) // cell_w)
        lines = self.doc.lines
        # Take whole lines bottom-up until they fill the view (plus what is scrolled away),
        # then lay them out top-down: anchored at the top while the text is short, following
        # the bottom once it fills the view.
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
        rows: list[Row] = []
        placed: list[tuple[int, int, Line]] = []
        for line, segs, detail in reversed(picked):
            top = len(rows)
            size = len(segs) + len(detail)
            if drop_top and line.style in HEAD_FIRST and drop_top < size and not self.scroll_rows:
                rows.extend(self._head_rows(line, segs, detail, min(size - drop_top, capacity - top), cols))
                drop_top = 0
            else:
                for i in range(len(segs)):
                    if drop_top:
                        drop_top -= 1
                    elif len(rows) < capacity:
                        rows.append((segs[i], line.style, line, i))
                for seg in detail:
                    if drop_top:
                        drop_top -= 1
                    elif len(rows) < capacity:
                        rows.append((seg, LineStyle.OUTPUT, line, -1))
            if len(rows) > top:
                placed.append((MARGIN_PX + top * row_h, MARGIN_PX + len(rows) * row_h, line))
            if len(rows) >= capacity:
                break
        self._rows = placed
        self._layout_key, self._layout_rows = key, rows
        self._layout_shown = [(r[0], r[1]) for r in rows]
        return rows

    def _head_rows(self, line: Line, segs: tuple[str, ...], detail: list[str], keep: int, cols: int) -> list[Row]:
        """The first ``keep`` rows of a ``HEAD_FIRST`` line cut at the top, the last of them
        filled with what follows and ending in "…"."""
        own: list[Row] = [(seg, line.style, line, i) for i, seg in enumerate(segs)]
        own.extend((seg, LineStyle.OUTPUT, line, -1) for seg in detail)
        own = own[:keep]
        text, style, _line, seg = own[-1]
        rest = _text_from_row(self._wrap_source(line), segs, seg) if seg >= 0 else text
        own[-1] = (_cut(rest, cols - 1) + ELLIPSIS, style, line, seg)
        return own

    def _plan(self) -> bool:
        """Repaint only what changed: when the new rows are the shown ones moved up (new text
        at the bottom), move the pixels (``QWidget.scroll``, a copy in the backing store) and
        repaint the rows that differ. False where it cannot (nothing shown yet, scrolled up,
        a paint still pending): then the whole view repaints."""
        shown = self._shown
        if not shown or self.scroll_rows or self._planned or not self.doc.lines:
            return False
        self._layout()
        row_h = self._metrics()[0]
        new = self._layout_shown
        best_k, best_m = 0, -1
        for k in range(len(shown)):
            m = 0
            limit = min(len(new), len(shown) - k)
            while m < limit and new[m] == shown[k + m]:
                m += 1
            if m > best_m:
                best_k, best_m = k, m
            if m >= limit - 1:
                break
        if best_m <= 0:
            return False
        self._planned = True
        width = self.width()
        if best_k:
            self.scroll(0, -best_k * row_h, QRect(0, MARGIN_PX, width, len(shown) * row_h))
        end = max(len(new), len(shown))
        if best_m < end:
            self.update(QRect(0, MARGIN_PX + best_m * row_h, width, (end - best_m) * row_h))
        return True

    def paintEvent(self, event: QPaintEvent) -> None:  # noqa: N802
        self.drawn_revision = self.doc.revision
        planned, self._planned = self._planned, False
        painter = QPainter(self)
        area = event.rect()
        painter.fillRect(area, self.palette().color(QPalette.ColorRole.Base))
        row_h, _cell_w = self._metrics()
        colours = self._colours
        rows = self._layout()
        whole = area.contains(self.rect())
        if not whole and not planned and self._layout_shown != self._shown:
            self.update()  # a part exposed while the rows changed: the rest must follow
        self._shown = self._layout_shown
        if not rows:
            self._statics = {}
            if self.empty_text:
                painter.setPen(colours[LineStyle.NOTICE])
                painter.drawText(
                    self.rect().adjusted(MARGIN_PX, MARGIN_PX, -MARGIN_PX, -MARGIN_PX),
                    Qt.AlignmentFlag.AlignCenter | Qt.TextFlag.TextWordWrap,
                    self.empty_text,
                )
            return
        first = max(0, (area.top() - MARGIN_PX) // row_h)
        last = min(len(rows), (area.bottom() - MARGIN_PX) // row_h + 1)
        old = self._statics
        statics: dict[tuple[int, int], tuple[str, QStaticText]] = {}
        pen: LineStyle | None = None
        for i, (text, style, line, seg) in enumerate(rows):
            key = (line.uid, seg)
            cached = old.get(key)
            static = None
            if cached is not None and cached[0] == text:
                statics[key] = cached  # kept for the rows still shown
                static = cached[1]
            if i < first or i >= last:
                continue
            if style is not pen:
                painter.setPen(colours[style])
                pen = style
            y = MARGIN_PX + i * row_h
            if seg < 0:
                painter.drawText(MARGIN_PX, y + self._ascent(), text)
            else:
                if static is None:
                    static = _static_text(text)
                    statics[key] = (text, static)
                painter.drawStaticText(MARGIN_PX, y, static)
            self.rows_painted += 1
        self._statics = statics
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

    @staticmethod
    def _wrap_source(line: Line) -> str:
        """The text a line's rows are wrapped from."""
        return expanded_text(line.text) if line.detail and line.expanded else line.text

    def _wrapped(self, line: Line, cols: int) -> tuple[str, ...]:
        key = (cols, len(line.text), line.expanded)
        if line.wrap_key != key:
            line.wrapped = tuple(wrap_line(self._wrap_source(line), cols))
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
            self.line_toggled.emit()
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
