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


def test_without_the_meters_the_window_says_so(qtbot, settings, caplog, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import asyncio

    from workstation.app import Application
    from workstation.services import Services
    from workstation.ui.main_window import MainWindow

    monkeypatch.setitem(sys.modules, "workstation.ui.meters.install", None)  # its import fails
    app = Application(settings)
    app.window = MainWindow(settings)
    qtbot.addWidget(app.window)
    app.services = Services(settings)
    app.fleet = object()  # type: ignore[assignment] - never reached: the import fails first
    with caplog.at_level("WARNING", logger="workstation.app"):
        asyncio.run(app._build_meters())
    assert app.meters is None and app.window.meters_dock is None
    assert "meters are not available" in caplog.text
    assert "Meters are not available here" in app.window.notice_label.text()
    app.window.allow_close()


def test_a_failing_shutdown_stage_of_the_window_is_logged_and_the_engine_still_stops(qtbot, settings, caplog) -> None:  # type: ignore[no-untyped-def]
    import asyncio

    from workstation.app import Application
    from workstation.services import Services
    from workstation.ui.main_window import MainWindow

    class BrokenBridge:
        def close(self) -> None:
            raise RuntimeError("the bridge is gone")

    closed: list[str] = []

    async def aclose() -> None:  # the factory's stages: meters → engine → HTTP client
        closed.append("services")

    app = Application(settings)
    app.services = Services(settings)
    app.services.aclose = aclose  # type: ignore[method-assign]
    app.bridge = BrokenBridge()  # type: ignore[assignment]
    app.window = MainWindow(settings)
    qtbot.addWidget(app.window)
    with caplog.at_level("ERROR", logger="workstation.services"):
        asyncio.run(app.shutdown())
    assert "shutdown: closing the fleet's bridge failed" in caplog.text and "the bridge is gone" in caplog.text
    assert closed == ["services"]
    assert not app.window.new_action.isEnabled() and app.window.commands is None  # no new work
