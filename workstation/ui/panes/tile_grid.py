"""The tile grid: lays N panes out by :func:`workstation.core.tiling.grid_shape`,
pages beyond what fits, arrow-key focus, and the empty state."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QDragEnterEvent, QDropEvent, QResizeEvent
from PySide6.QtWidgets import QLabel, QWidget

from workstation.core.tiling import GridShape, grid_shape, tile_rects
from workstation.ui.panes.session_pane import SessionPane

SPACING_PX = 4
EMPTY_TEXT = (
    "No sessions yet — Ctrl+N to start one,\nor drop a repository folder here."
)


def transcript_point_size(per_page: int) -> float:
    """Smaller text as tiles get smaller: legible at 32 panes, comfortable at 4."""
    if per_page >= 17:
        return 7.5
    if per_page >= 7:
        return 8.5
    return 9.5


class TileGrid(QWidget):
    """Owns the placement of panes; the window owns the panes' content."""

    focus_changed = Signal(int)
    """Index of the newly focused pane (-1 when none)."""
    page_changed = Signal(int, int)
    """(page, pages)."""
    repository_dropped = Signal(str)

    def __init__(self, parent: QWidget | None = None, *, max_per_page: int = 32) -> None:
        super().__init__(parent)
        self.panes: list[SessionPane] = []
        self.max_per_page = max_per_page
        self.page = 0
        self.focused = -1
        self.shape = grid_shape(0, 1, 1)
        self.setAcceptDrops(True)
        self.setFocusPolicy(Qt.FocusPolicy.StrongFocus)
        self.empty = QLabel(EMPTY_TEXT, self)
        self.empty.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.empty.setWordWrap(True)
        font = self.empty.font()
        font.setPointSizeF(font.pointSizeF() * 1.15)
        self.empty.setFont(font)
        self.empty.setForegroundRole(self.empty.foregroundRole().PlaceholderText)

    # ----- panes -----
    def add_pane(self, pane: SessionPane) -> int:
        pane.setParent(self)
        self.panes.append(pane)
        pane.focus_requested.connect(lambda p=pane: self.set_focus(self.panes.index(p)))
        if self.focused < 0:
            self.set_focus(0)
        self.relayout()
        return len(self.panes) - 1

    def remove_pane(self, pane: SessionPane) -> None:
        if pane not in self.panes:
            return
        index = self.panes.index(pane)
        self.panes.pop(index)
        pane.hide()
        pane.setParent(None)
        if self.focused >= len(self.panes):
            self.focused = len(self.panes) - 1
        elif self.focused > index:
            self.focused -= 1
        for i, p in enumerate(self.panes):
            p.set_focused(i == self.focused)
        self.relayout()
        self.focus_changed.emit(self.focused)

    def bring_into_view(self, session_id: str) -> None:
        """Focus a session's pane, turning to its page (a new session is seen at once)."""
        for index, pane in enumerate(self.panes):
            if pane.info.session_id == session_id:
                self.set_focus(index)
                return

    def visible_panes(self) -> list[SessionPane]:
        return [self.panes[i] for i in self.shape.page_range(self.page)] if self.panes else []

    def focused_pane(self) -> SessionPane | None:
        return self.panes[self.focused] if 0 <= self.focused < len(self.panes) else None

    # ----- layout -----
    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802
        super().resizeEvent(event)
        self.relayout()

    def relayout(self) -> None:
        width, height = self.width(), self.height()
        self.empty.setGeometry(0, 0, width, height)
        self.empty.setVisible(not self.panes)
        shape: GridShape = grid_shape(len(self.panes), width, height, max_per_page=self.max_per_page)
        pages_before = self.shape.pages
        self.shape = shape
        self.page = min(self.page, shape.pages - 1)
        if 0 <= self.focused < len(self.panes):
            self.page = shape.page_of(self.focused)
        rects = tile_rects(shape, width, height, spacing_px=SPACING_PX)
        point_size = transcript_point_size(shape.per_page)
        visible = set(shape.page_range(self.page))
        for index, pane in enumerate(self.panes):
            if index in visible:
                r = rects[index % shape.per_page]
                pane.view.set_point_size(point_size)
                pane.setGeometry(r.x, r.y, r.width, r.height)
                pane.show()
            else:
                pane.hide()
        if shape.pages != pages_before:
            self.page_changed.emit(self.page, shape.pages)

    def set_page(self, page: int) -> None:
        page = max(0, min(page, self.shape.pages - 1))
        if page != self.page:
            self.page = page
            first = page * self.shape.per_page
            if not (first <= self.focused < first + self.shape.per_page):
                self.set_focus(first, relayout=False)
            self.relayout()
            self.page_changed.emit(self.page, self.shape.pages)

    # ----- focus and keys -----
    def set_focus(self, index: int, *, relayout: bool = True) -> None:
        if not self.panes:
            self.focused = -1
            return
        index = max(0, min(index, len(self.panes) - 1))
        if index == self.focused:
            return
        old = self.focused_pane()
        if old is not None:
            old.set_focused(False)
        self.focused = index
        self.panes[index].set_focused(True)
        if relayout and self.shape.page_of(index) != self.page:
            self.page = self.shape.page_of(index)
            self.relayout()
            self.page_changed.emit(self.page, self.shape.pages)
        self.focus_changed.emit(index)

    def move_focus(self, d_row: int, d_col: int) -> None:
        """Arrows: left/right walk the panes in reading order, up/down move by rows
        (across pages at the edges)."""
        if not self.panes:
            return
        if self.focused < 0:
            self.set_focus(0)
            return
        if d_col:
            self.set_focus(max(0, min(len(self.panes) - 1, self.focused + d_col)))
            return
        shape = self.shape
        page = shape.page_of(self.focused)
        row, col = shape.cell_of(self.focused)
        row += d_row
        if row < 0:
            if page == 0:
                return
            page, row = page - 1, shape.rows - 1
        elif row >= shape.rows:
            if page >= shape.pages - 1:
                return
            page, row = page + 1, 0
        index = shape.index_at(page, row, col)
        if index is None:  # an empty cell of the last page
            if page * shape.per_page + row * shape.cols >= len(self.panes):
                return
            index = len(self.panes) - 1
        self.set_focus(index)

    def keyPressEvent(self, event) -> None:  # noqa: N802
        key = event.key()
        moves = {
            Qt.Key.Key_Left: (0, -1), Qt.Key.Key_Right: (0, 1),
            Qt.Key.Key_Up: (-1, 0), Qt.Key.Key_Down: (1, 0),
        }
        if key in moves and not event.modifiers() & ~Qt.KeyboardModifier.KeypadModifier:
            self.move_focus(*moves[key])
            event.accept()
            return
        if key == Qt.Key.Key_PageDown:
            self.set_page(self.page + 1)
            return
        if key == Qt.Key.Key_PageUp:
            self.set_page(self.page - 1)
            return
        if key in (Qt.Key.Key_Return, Qt.Key.Key_Enter) and not event.modifiers():
            pane = self.focused_pane()
            if pane is not None:
                pane.activated.emit()
                return
        super().keyPressEvent(event)

    # ----- drop a repository folder -----
    def dragEnterEvent(self, event: QDragEnterEvent) -> None:  # noqa: N802
        if event.mimeData().hasUrls() and any(
            u.isLocalFile() and Path(u.toLocalFile()).is_dir() for u in event.mimeData().urls()
        ):
            event.acceptProposedAction()

    def dropEvent(self, event: QDropEvent) -> None:  # noqa: N802
        for url in event.mimeData().urls():
            if url.isLocalFile() and Path(url.toLocalFile()).is_dir():
                self.repository_dropped.emit(url.toLocalFile())
                event.acceptProposedAction()
                return
