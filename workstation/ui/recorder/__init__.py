"""Real-time recording of the window, one pane or a region to a video file.

Entry points::

    recorder = Recorder(parent=window)
    recorder.start(window, RecordingOptions(path=Path("demo.mp4"), size_px=(1280, 720),
                   overlay=True, duration_s=20), overlay_source=lambda: OverlayValues(...))
    result = recorder.stop().result()      # or recorder.wait(); or the ``finished`` signal

``RecordingIndicator(recorder)`` is the status-bar "● REC 00:01:23" label;
``create_record_action(recorder, window, make_options)`` the toolbar's REC button
(``MainWindow.install_record_action``), which calls ``recorder.toggle``.
"""

from workstation.ui.recorder.capture import FrameGrabber, GrabMethod
from workstation.ui.recorder.encoder import EncoderWorker, RawFrame
from workstation.ui.recorder.indicator import RecordingIndicator
from workstation.ui.recorder.options import RecordingOptions, VideoCodec, default_recording_path
from workstation.ui.recorder.overlay import OverlayPainter, OverlaySource, OverlayValues
from workstation.ui.recorder.record_action import create_record_action
from workstation.ui.recorder.recorder import (
    Recorder,
    RecorderState,
    RecordingResult,
    RecordingStats,
)

__all__ = [
    "EncoderWorker",
    "FrameGrabber",
    "GrabMethod",
    "OverlayPainter",
    "OverlaySource",
    "OverlayValues",
    "RawFrame",
    "Recorder",
    "RecorderState",
    "RecordingIndicator",
    "RecordingOptions",
    "RecordingResult",
    "RecordingStats",
    "VideoCodec",
    "create_record_action",
    "default_recording_path",
]
