"""The toolbar's REC button (and Ctrl+R): a checkable action bound to a recorder.

``MainWindow.install_record_action(create_record_action(...))`` puts it in its slot of the
toolbar and gives it Ctrl+R; ``RecordingIndicator`` shows the running time in the status
bar. The action's checked state follows the recorder, not the click, so it stays right
when a recording stops by itself (duration reached, widget closed, disk full).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from PySide6.QtCore import QObject
from PySide6.QtGui import QAction, QIcon, QKeySequence
from PySide6.QtWidgets import QWidget

from workstation.core.errors import UserError
from workstation.ui.recorder.indicator import REC_COLOR
from workstation.ui.recorder.options import RecordingOptions
from workstation.ui.recorder.overlay import OverlaySource
from workstation.ui.recorder.recorder import Recorder, RecorderState, RecordingResult

log = logging.getLogger(__name__)


def _icon(name: str, color: str | None = None) -> QIcon:
    try:
        from workstation.ui.icons import icon
    except ImportError:
        return QIcon()
    try:
        return icon(name, color)
    except (KeyError, ValueError):
        return QIcon()


def create_record_action(
    recorder: Recorder,
    target: QWidget | Callable[[], QWidget],
    make_options: Callable[[], RecordingOptions],
    *,
    overlay_source: OverlaySource | None = None,
    on_error: Callable[[str], None] | None = None,
    on_saved: Callable[[str], None] | None = None,
    parent: QObject | None = None,
) -> QAction:
    """A "Rec" action: starts recording ``target`` (a widget, or a callable giving one, e.g.
    the focused pane) with fresh options from ``make_options``, or stops. Problems go to
    ``on_error`` (e.g. ``window.show_error``) as plain messages; where a finished recording
    was saved goes to ``on_saved`` (:func:`saved_message`)."""
    action = QAction(_icon("record", REC_COLOR), "Rec", parent or recorder)
    action.setCheckable(True)
    action.setShortcut(QKeySequence("Ctrl+R"))

    def refresh(state: RecorderState | None = None) -> None:
        state = recorder.state if state is None else state
        running = state in (RecorderState.STARTING, RecorderState.RECORDING)
        action.setChecked(running)
        action.setEnabled(state is not RecorderState.FINISHING)
        action.setText("Stop" if running else "Rec")
        action.setIcon(_icon("stop" if running else "record", REC_COLOR))
        action.setToolTip("Stop recording (Ctrl+R)" if running
                          else "Record the window to a video file (Ctrl+R)")

    def triggered() -> None:
        try:
            widget = target if isinstance(target, QWidget) else target()
            recorder.toggle(widget, make_options, overlay_source=overlay_source)
        except UserError as exc:
            log.warning("recording: %s", exc)
            if on_error is not None:
                on_error(exc.describe())
        refresh()

    action.triggered.connect(triggered)
    recorder.state_changed.connect(refresh)
    if on_error is not None:
        recorder.failed.connect(on_error)
    if on_saved is not None:
        recorder.finished.connect(lambda result: on_saved(saved_message(result)) if result.ok else None)
    refresh()
    return action


def saved_message(result: RecordingResult) -> str:
    """``Recording saved: /path/demo.mp4 (1:23, 1280×720, 41.2 MB)``."""
    minutes, seconds = divmod(round(result.duration_s), 60)
    size = f", {result.bytes_written / 1e6:.1f} MB" if result.bytes_written else ""
    return (f"Recording saved: {result.path} ({minutes}:{seconds:02d}, "
            f"{result.width_px}×{result.height_px}{size})")
