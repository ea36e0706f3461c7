"""Tile-grid geometry: how N panes fit a window of a given size (pure math, no Qt).

The grid picks the columns × rows whose tiles hold the largest rectangle of a target
aspect, penalised by empty cells, so 32 panes on a 16:9 screen come out 8 × 4, 9 come
out 3 × 3 and 2 sit side by side. Tiles never shrink below a minimum size: beyond what
fits, panes go on further pages.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

DEFAULT_MAX_PER_PAGE = 32
DEFAULT_MIN_TILE_W_PX = 180
DEFAULT_MIN_TILE_H_PX = 120
DEFAULT_TILE_ASPECT = 1.2
"""Preferred tile width / height: a little wider than square reads best for transcripts."""


@dataclass(frozen=True, slots=True)
class GridShape:
    """Columns and rows of one page, and how many pages the panes need."""

    cols: int
    rows: int
    count: int
    pages: int

    @property
    def per_page(self) -> int:
        return self.cols * self.rows

    def page_of(self, index: int) -> int:
        return index // self.per_page

    def cell_of(self, index: int) -> tuple[int, int]:
        """(row, col) of pane ``index`` on its own page."""
        slot = index % self.per_page
        return divmod(slot, self.cols)

    def index_at(self, page: int, row: int, col: int) -> int | None:
        """Pane index at a cell of a page, or None where the cell is empty or outside."""
        if not (0 <= row < self.rows and 0 <= col < self.cols):
            return None
        index = page * self.per_page + row * self.cols + col
        return index if 0 <= index < self.count else None

    def page_range(self, page: int) -> range:
        start = page * self.per_page
        return range(start, min(self.count, start + self.per_page))


@dataclass(frozen=True, slots=True)
class TileRect:
    x: int
    y: int
    width: int
    height: int


def _score(count: int, cols: int, rows: int, width: float, height: float, aspect: float) -> float:
    tile_w = width / cols
    tile_h = height / rows
    fitted_h = min(tile_w / aspect, tile_h)  # largest target-aspect rectangle in the tile
    fill = count / (cols * rows)
    return fitted_h * fill


def best_shape(
    count: int, width_px: float, height_px: float, *, tile_aspect: float = DEFAULT_TILE_ASPECT
) -> tuple[int, int]:
    """Columns × rows that show ``count`` tiles best in ``width_px`` × ``height_px``."""
    if count <= 1:
        return 1, 1
    width = max(1.0, float(width_px))
    height = max(1.0, float(height_px))
    best: tuple[float, int, int] | None = None
    for cols in range(1, count + 1):
        rows = math.ceil(count / cols)
        if cols * (rows - 1) >= count:  # a whole empty row: never better
            continue
        score = _score(count, cols, rows, width, height, tile_aspect)
        # Ties go to the wider grid (landscape screens) then to fewer cells.
        key = (score, cols)
        if best is None or key > (best[0], best[1]):
            best = (score, cols, rows)
    assert best is not None
    return best[1], best[2]


def grid_shape(
    count: int,
    width_px: float,
    height_px: float,
    *,
    max_per_page: int = DEFAULT_MAX_PER_PAGE,
    min_tile_w_px: int = DEFAULT_MIN_TILE_W_PX,
    min_tile_h_px: int = DEFAULT_MIN_TILE_H_PX,
    tile_aspect: float = DEFAULT_TILE_ASPECT,
) -> GridShape:
    """The grid for ``count`` panes: at most ``max_per_page`` on a page and tiles no
    smaller than the minimum (fewer per page when the window is small); extra panes
    go on further pages. ``count == 0`` gives an empty 1 × 1 page."""
    if count <= 0:
        return GridShape(cols=1, rows=1, count=0, pages=1)
    fit_cols = max(1, int(width_px // max(1, min_tile_w_px)))
    fit_rows = max(1, int(height_px // max(1, min_tile_h_px)))
    per_page = max(1, min(count, max_per_page, fit_cols * fit_rows))
    cols, rows = best_shape(per_page, width_px, height_px, tile_aspect=tile_aspect)
    while cols > fit_cols or rows > fit_rows:  # the best shape is too fine: fewer per page
        per_page -= 1
        cols, rows = best_shape(per_page, width_px, height_px, tile_aspect=tile_aspect)
        if per_page == 1:
            break
    per_page = cols * rows if count > per_page else per_page
    pages = max(1, math.ceil(count / (cols * rows)))
    return GridShape(cols=cols, rows=rows, count=count, pages=pages)


def tile_rects(
    shape: GridShape, width_px: int, height_px: int, *, spacing_px: int = 4
) -> list[TileRect]:
    """Pixel rectangles of one page's cells, row by row, spacing between them;
    the remainder pixels go to the first columns / rows so tiles fill the area."""
    usable_w = max(0, width_px - spacing_px * (shape.cols - 1))
    usable_h = max(0, height_px - spacing_px * (shape.rows - 1))
    base_w, extra_w = divmod(usable_w, shape.cols)
    base_h, extra_h = divmod(usable_h, shape.rows)
    widths = [base_w + (1 if c < extra_w else 0) for c in range(shape.cols)]
    heights = [base_h + (1 if r < extra_h else 0) for r in range(shape.rows)]
    rects: list[TileRect] = []
    y = 0
    for r in range(shape.rows):
        x = 0
        for c in range(shape.cols):
            rects.append(TileRect(x, y, widths[c], heights[r]))
            x += widths[c] + spacing_px
        y += heights[r] + spacing_px
    return rects
