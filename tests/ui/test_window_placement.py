"""Where the main window opens: filling its screen the first time, where the user left it
after that; a size the app imposes (a recording) is not remembered as the user's."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.gui


def open_window(qtbot, settings, size_px=None):  # type: ignore[no-untyped-def]
    from workstation.ui.main_window import MainWindow

    window = MainWindow(settings)
    qtbot.addWidget(window)
    window.show_first(size_px)
    qtbot.waitExposed(window)
    return window


def close(window) -> None:  # type: ignore[no-untyped-def]
    window.allow_close()
    window.close()


def test_the_first_open_fills_the_screen(qtbot, settings) -> None:  # type: ignore[no-untyped-def]
    assert not (settings.data_dir / "window.ini").exists()
    window = open_window(qtbot, settings)
    available = window.screen().availableGeometry()
    assert window.isMaximized()
    assert window.normalGeometry() == available  # un-maximized (or no window manager): still the screen
    assert window.frameGeometry().width() >= available.width() - 8  # not 1600 px on a wider screen
    close(window)


def test_later_opens_keep_the_users_geometry(qtbot, settings) -> None:  # type: ignore[no-untyped-def]
    window = open_window(qtbot, settings)
    window.showNormal()
    window.setGeometry(40, 60, 620, 430)
    qtbot.waitUntil(lambda: window.size().width() == 620)
    window.save_layout()  # what closing the window (or the app's shutdown) does
    close(window)

    again = open_window(qtbot, settings)
    assert not again.isMaximized()
    assert (again.width(), again.height()) == (620, 430)
    close(again)


def test_a_recordings_size_is_not_taken_for_the_users(qtbot, settings) -> None:  # type: ignore[no-untyped-def]
    window = open_window(qtbot, settings, (640, 360))
    assert (window.width(), window.height()) == (640, 360) and not window.isMaximized()
    window.save_layout()  # the docks' layout is kept, the imposed geometry is not
    close(window)

    again = open_window(qtbot, settings)
    assert again.isMaximized()  # a first open still: it fills the screen
    close(again)


def test_a_geometry_saved_before_the_fill_is_not_the_users(qtbot, settings) -> None:  # type: ignore[no-untyped-def]
    """Earlier versions resized the window to 1600×960 at every open and saved that: it opens
    filling the screen once, and remembers from then on."""
    from PySide6.QtCore import QSettings

    from workstation.ui.main_window import MainWindow

    old = MainWindow(settings)
    qtbot.addWidget(old)
    old.resize(1600, 960)
    store = QSettings(str(settings.data_dir / "window.ini"), QSettings.Format.IniFormat)
    store.setValue("window/geometry", old.saveGeometry())  # what they wrote: no placement version
    store.sync()
    close(old)
    window = open_window(qtbot, settings)
    assert window.isMaximized()
    close(window)


def test_a_window_left_filling_the_screen_fills_it_again(qtbot, settings) -> None:  # type: ignore[no-untyped-def]
    """Left maximized over the fill: the next open fills the screen again, rather than what
    restoring the geometry makes of it without a window manager (Qt moves a window at the
    screen's top down by a guessed title bar: 1918×1054 at +1+25 on a bare X server)."""
    window = open_window(qtbot, settings)
    window.save_layout()
    close(window)
    again = open_window(qtbot, settings)
    assert again.isMaximized() and again.normalGeometry() == again.screen().availableGeometry()
    close(again)
