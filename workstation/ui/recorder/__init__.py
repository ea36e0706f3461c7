"""Real-time recording of the window, one pane or a region to a video file.

Entry points::

    recorder = Recorder(parent=window)
    recorder.start(window, RecordingOptions(path=Path("demo.mp4"), size_px=(1280, 720),
                   overlay=True, duration_s=20), overlay_source=lambda: OverlayValues(...))
    result = await recorder.wait_async()   # or recorder.wait(); or the ``finished`` signal
    summary = probe_video(result.path)     # decodes it: frames, duration, size

``RecordingIndicator(recorder)`` is the status-bar "● REC 00:01:23" label;
``create_record_action(recorder, window, make_options)`` the toolbar's REC button
(``MainWindow.install_record_action``), which calls ``recorder.toggle``.

Names are imported lazily: the encoder process imports ``recorder.encoder`` through
this package and must not pull in Qt.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS = {
    "FrameGrabber": "capture",
    "GrabMethod": "capture",
    "EncoderWorker": "worker",
    "RecordingIndicator": "indicator",
    "RecordingOptions": "options",
    "VideoCodec": "options",
    "default_recording_path": "options",
    "OverlayPainter": "overlay",
    "OverlaySource": "overlay",
    "OverlayValues": "overlay",
    "create_record_action": "record_action",
    "Recorder": "recorder",
    "RecorderState": "recorder",
    "RecordingResult": "recorder",
    "RecordingStats": "recorder",
    "VideoSummary": "probe",
    "probe_video": "probe",
}

__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:
    from workstation.ui.recorder.capture import FrameGrabber, GrabMethod
    from workstation.ui.recorder.indicator import RecordingIndicator
    from workstation.ui.recorder.options import RecordingOptions, VideoCodec, default_recording_path
    from workstation.ui.recorder.overlay import OverlayPainter, OverlaySource, OverlayValues
    from workstation.ui.recorder.probe import VideoSummary, probe_video
    from workstation.ui.recorder.record_action import create_record_action
    from workstation.ui.recorder.recorder import Recorder, RecorderState, RecordingResult, RecordingStats
    from workstation.ui.recorder.worker import EncoderWorker


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
