"""The window's composition root: what it says when a part cannot load, instead of hiding it."""

from __future__ import annotations

import sys

import pytest

pytestmark = pytest.mark.gui


def test_without_the_recorder_the_window_says_so(qtbot, settings, caplog, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from workstation.app import Application
    from workstation.ui.main_window import MainWindow

    monkeypatch.setitem(sys.modules, "workstation.ui.recorder", None)  # its import fails (no PyAV)
    app = Application(settings)
    app.window = MainWindow(settings)
    qtbot.addWidget(app.window)
    with caplog.at_level("WARNING", logger="workstation.app"):
        app._install_recorder()
    assert app.recorder is None and app.window.record_action is None
    assert "recording is not available" in caplog.text
    assert "Recording is not available here" in app.window.notice_label.text()
    app.window.allow_close()
