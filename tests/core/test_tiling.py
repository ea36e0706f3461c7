"""Tile-grid geometry: N panes fit the window's aspect; pages beyond what fits."""

from __future__ import annotations

import pytest

from workstation.core.tiling import best_shape, grid_shape, tile_rects

GRID_W, GRID_H = 1912, 960  # the grid area of a 1920x1080 window


@pytest.mark.parametrize(
    ("count", "cols", "rows"),
    [(1, 1, 1), (2, 2, 1), (4, 2, 2), (6, 3, 2), (9, 3, 3), (12, 4, 3), (16, 4, 4), (24, 6, 4), (32, 8, 4)],
)
def test_landscape_screen_shapes(count: int, cols: int, rows: int) -> None:
    shape = grid_shape(count, GRID_W, GRID_H)
    assert (shape.cols, shape.rows, shape.pages) == (cols, rows, 1)


def test_portrait_window_stacks_rows() -> None:
    assert best_shape(2, 900, 1600) == (1, 2)
    shape = grid_shape(6, 900, 1600)
    assert (shape.cols, shape.rows) == (2, 3)


def test_never_a_whole_empty_row() -> None:
    for count in range(1, 65):
        shape = grid_shape(count, GRID_W, GRID_H, max_per_page=64)
        assert shape.cols * (shape.rows - 1) < min(count, shape.per_page) or shape.rows == 1


def test_pages_beyond_the_per_page_limit() -> None:
    shape = grid_shape(128, GRID_W, GRID_H)
    assert shape.per_page == 32 and shape.pages == 4
    assert shape.page_of(0) == 0 and shape.page_of(31) == 0 and shape.page_of(32) == 1
    assert list(shape.page_range(3)) == list(range(96, 128))
    assert shape.cell_of(33) == (0, 1)


def test_small_window_keeps_tiles_readable() -> None:
    shape = grid_shape(32, 800, 600, min_tile_w_px=180, min_tile_h_px=120)
    assert shape.per_page < 32 and shape.pages >= 2
    assert 800 / shape.cols >= 180 and 600 / shape.rows >= 120


def test_index_at_empty_cell_and_outside() -> None:
    shape = grid_shape(5, GRID_W, GRID_H)  # 3 x 2, one empty cell
    assert shape.index_at(0, 1, 2) is None
    assert shape.index_at(0, 0, 0) == 0
    assert shape.index_at(0, 5, 0) is None


def test_zero_panes_is_one_empty_page() -> None:
    shape = grid_shape(0, GRID_W, GRID_H)
    assert shape.pages == 1 and list(shape.page_range(0)) == []


def test_rects_fill_the_area_with_spacing() -> None:
    shape = grid_shape(32, GRID_W, GRID_H)
    rects = tile_rects(shape, GRID_W, GRID_H, spacing_px=4)
    assert len(rects) == 32
    last = rects[-1]
    assert last.x + last.width == GRID_W and last.y + last.height == GRID_H
    assert rects[1].x == rects[0].width + 4
    widths = {r.width for r in rects}
    assert max(widths) - min(widths) <= 1
