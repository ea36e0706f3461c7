"""Where the main window opens, and what of it is remembered (``<data_dir>/window.ini``).

The first open fills the screen the window is on: maximized, over a normal geometry that is
the screen's available area, so a window manager that maximizes and one that does not (a
bare X server, a kiosk session) both show the whole grid — it is made for 32 panes on one
1920×1080 screen (a fixed 1600×960 had left a fifth of such a screen empty). After that it
opens where the user left it: size, place, maximized or full screen, and the docks. A size
the app imposes (a recording's 1920×1080) is not taken for the user's.
"""

from __future__ import annotations

from PySide6.QtCore import QSettings
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QMainWindow

GEOMETRY_KEY = "window/geometry"
STATE_KEY = "window/state"
PLACEMENT_KEY = "window/placement"
"""2: the geometry was the user's. Files without it were written by versions that resized the
window to 1600×960 at every open, so what they saved was mostly that, not a choice."""
PLACEMENT = 2


class WindowPlacement:
    def __init__(self, window: QMainWindow, store: QSettings) -> None:
        self._window = window
        self._store = store
        self.remembered = False
        """A geometry the user left was found and applied."""
        self.imposed = False
        """The app set the size (a recording): it is not saved as the user's."""

    def restore(self) -> None:
        """Apply the remembered geometry (kept for :meth:`show`) and dock layout."""
        geometry = self._store.value(GEOMETRY_KEY)
        if geometry is not None and str(self._store.value(PLACEMENT_KEY, "")) == str(PLACEMENT):
            self.remembered = bool(self._window.restoreGeometry(geometry))
        self.restore_state()

    def restore_state(self) -> None:
        """The docks and toolbars as they were (again once a dock is added later)."""
        state = self._store.value(STATE_KEY)
        if state is not None:
            self._window.restoreState(state)

    def show(self, size_px: tuple[int, int] | None = None) -> None:
        """Show the window: at ``size_px`` where the app needs a size (not remembered), else
        where the user left it, else filling its screen."""
        window = self._window
        if size_px is not None:
            self.imposed = True
            window.resize(*size_px)
            window.show()
            return
        if self.remembered:
            window.show()  # restoreGeometry brought back the maximized / full-screen state too
            return
        screen = window.screen() or QGuiApplication.primaryScreen()
        if screen is not None:
            window.setGeometry(screen.availableGeometry())
        window.showMaximized()

    def save(self) -> None:
        if not self.imposed:
            if self._fills_screen():  # the next open fills it again (restoring it would not)
                self._store.remove(GEOMETRY_KEY)
            else:
                self._store.setValue(GEOMETRY_KEY, self._window.saveGeometry())
            self._store.setValue(PLACEMENT_KEY, PLACEMENT)
        self._store.setValue(STATE_KEY, self._window.saveState())
        self._store.sync()

    def _fills_screen(self) -> bool:
        """Maximized over the first open's fill: Qt's restoreGeometry would move a window at the
        top of the screen down by a guessed title bar (1918×1054 at +1+25 on a bare X server)."""
        window = self._window
        screen = window.screen()
        return (window.isMaximized() and screen is not None
                and window.normalGeometry() == screen.availableGeometry())
