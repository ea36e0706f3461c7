"""The tile's transcript view: partial repaints leave on screen what a whole repaint draws."""

from __future__ import annotations

import pytest
from PySide6.QtGui import QImage
from PySide6.QtWidgets import QApplication, QWidget

from workstation.ui.panes.tail_view import TailView
from workstation.ui.panes.transcript_doc import LineStyle, TranscriptDoc

pytestmark = pytest.mark.gui

WORDS = ("Reading the failing test first .", "\n```python\n", "def make_tmp ( factory ) :", "\n    return base",
         "\n```\n", "With a per - test directory the race is gone .", "\n```diff\n- path = 1\n+ path = 2\n```\n")


def _on_screen(window: QWidget, view: TailView) -> QImage:
    """The view's pixels in the window's backing store: what the screen (and the recorder) get."""
    QApplication.processEvents()
    QApplication.processEvents()
    device = window.backingStore().paintDevice()
    assert isinstance(device, QImage)
    return device.copy(view.geometry()).convertToFormat(QImage.Format.Format_RGB32)


def _drawn_whole(doc: TranscriptDoc, view: TailView) -> QImage:
    fresh = TailView(doc)
    fresh.resize(view.size())
    fresh.scroll_rows = view.scroll_rows
    return fresh.grab().toImage().convertToFormat(QImage.Format.Format_RGB32)


def test_streamed_text_moves_the_rows_up_and_repaints_only_what_changed(qtbot):
    window = QWidget()
    window.resize(360, 260)
    doc = TranscriptDoc()
    doc.add_block("Fix the flaky test", LineStyle.USER)
    view = TailView(doc, window)
    view.setGeometry(10, 20, 300, 200)
    qtbot.addWidget(window)
    window.show()
    qtbot.waitExposed(window)
    capacity = (view.height() - 8) // view._metrics()[0]
    painted0 = view.rows_painted
    steps = 0
    for round_ in range(6):
        for word in WORDS:
            doc.stream(word + " ")
            doc.flush()
            view.refresh()
            steps += 1
            assert _on_screen(window, view) == _drawn_whole(doc, view), (round_, word)
    # most flushes moved the pixels and painted a row or three, not the whole view
    assert view.rows_painted - painted0 < 0.5 * steps * capacity
    doc.add_line("▸ read_file a.py", LineStyle.TOOL, detail="1 line\nmore")
    view.refresh()
    assert _on_screen(window, view) == _drawn_whole(doc, view)
    # scrolled up: new text does not move what is shown; the view repaints whole
    view.scroll_rows = 3
    view.update()
    for word in WORDS:
        doc.stream(word)
        doc.flush()
        view.refresh()
        assert _on_screen(window, view) == _drawn_whole(doc, view)
    view.follow()
    assert _on_screen(window, view) == _drawn_whole(doc, view)


def test_a_new_font_size_is_measured_again(qtbot):
    view = TailView(TranscriptDoc())
    qtbot.addWidget(view)
    row_h, cell_w = view._metrics()
    view.set_point_size(view.font().pointSizeF() * 2)
    assert view._metrics()[0] > row_h and view._metrics()[1] > cell_w


def test_a_line_cut_at_the_top_shows_its_start_unless_it_is_prose(qtbot):
    """A waiting tile's approval bar leaves its transcript a row or two: the tool line above
    it showed its last row alone ("+4 −5", "−5"); now its start, ending in "…". The task
    (and any line read from its start) cut at the top of a full tile likewise; streamed prose
    keeps its newest words in view."""
    doc = TranscriptDoc()
    view = TailView(doc)
    qtbot.addWidget(view)
    row_h, cell_w = view._metrics()
    cols = 30
    view.resize(2 * 4 + cols * cell_w, 2 * 4 + row_h)  # one row of 30 columns
    tool = "✎ replace_in_file textkit/core.py  +4 −5"
    doc.add_line(tool, LineStyle.TOOL, detail="--- a/textkit/core.py")
    rows = [r[0] for r in view._layout()]
    assert rows == [tool[:cols - 1] + "…"] == ["✎ replace_in_file textkit/cor…"]  # it read "textkit/core.py  +4 −5"
    view.resize(view.width(), 2 * 4 + 2 * row_h)
    assert [r[0] for r in view._layout()] == ["✎ replace_in_file", "textkit/core.py  +4 −5"]  # whole: as before
    view.resize(2 * 4 + 37 * cell_w, 2 * 4 + row_h)
    assert [r[0] for r in view._layout()] == ["✎ replace_in_file textkit/core.py…"]  # not "core.py  +…"
    view.resize(2 * 4 + cols * cell_w, 2 * 4 + 2 * row_h)
    # a task cut at the top of a full view: its first rows, then what followed it whole
    doc.add_block("slugify in textkit/core.py makes one dash per separator. Use the pattern "
                  "[^a-z0-9]+ so that a run of separators becomes one dash.", LineStyle.USER)
    doc.add_line("▸ read_file textkit/core.py", LineStyle.TOOL)
    view.resize(view.width(), 2 * 4 + 3 * row_h)
    rows = [r[0] for r in view._layout()]
    assert rows[0].startswith("slugify in") and rows[-2].endswith("…")
    assert rows[-1] == "▸ read_file textkit/core.py"
    # prose follows its end
    doc.stream("The race is on the temp dir; a per-test directory ends it for good, and the test passes.")
    doc.flush()
    rows = [r[0] for r in view._layout()]
    assert rows[-1].endswith("passes.") and not any(r.endswith("…") for r in rows)


def test_scrolled_up_a_cut_line_read_from_its_start_shows_every_row_in_turn(qtbot):
    doc = TranscriptDoc()
    doc.add_block(" ".join(f"word{i}" for i in range(120)), LineStyle.USER)
    doc.add_line("▸ read_file a.py", LineStyle.TOOL)
    view = TailView(doc)
    qtbot.addWidget(view)
    row_h, cell_w = view._metrics()
    view.resize(2 * 4 + 30 * cell_w, 2 * 4 + 3 * row_h)
    assert [r[0] for r in view._layout()][0].startswith("word0 ")  # following the bottom: its start
    seen = []
    for scrolled in (1, 2, 3):
        view.scroll_rows = scrolled
        rows = [r[0] for r in view._layout()]
        assert len(rows) == 3 and not any(r.endswith("…") for r in rows)
        seen.append(rows[0])
    assert len(set(seen)) == 3  # the wheel moves through the line's rows
