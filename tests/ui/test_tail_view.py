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
