"""The visible REC indicator: "● REC 00:01:23" in red while recording, hidden otherwise.

Made for the status bar (UI.md: ``● REC 00:01:23``); its tooltip carries the file and the
honest counters (repeated / dropped frames). It listens to the recorder's signals and a
one-second tick of its own only while a recording runs.
"""

from __future__ import annotations

import time

from PySide6.QtCore import QTimer, Slot
from PySide6.QtWidgets import QLabel, QWidget

from workstation.ui.recorder.recorder import Recorder, RecorderState, RecordingResult, RecordingStats

REC_COLOR = "#dc2626"


def format_elapsed(seconds: float) -> str:
    whole = max(0, int(seconds))
    return f"{whole // 3600:02d}:{whole // 60 % 60:02d}:{whole % 60:02d}"


class RecordingIndicator(QLabel):
    def __init__(self, recorder: Recorder, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._recorder = recorder
        self.setObjectName("recordingIndicator")
        self.setStyleSheet(f"QLabel#recordingIndicator {{ color: {REC_COLOR}; font-weight: bold; }}")
        self._tick = QTimer(self)
        self._tick.setInterval(1000)
        self._tick.timeout.connect(self._on_tick_timeout)
        recorder.state_changed.connect(self._on_recorder_state_changed)
        recorder.stats_changed.connect(self._on_recorder_stats_changed)
        recorder.finished.connect(self._on_recorder_finished)
        self._on_recorder_state_changed(recorder.state)

    @Slot(object)
    def _on_recorder_state_changed(self, state: RecorderState) -> None:
        if state is RecorderState.STARTING:
            self.setText("● REC starting…")
            self.show()
        elif state is RecorderState.RECORDING:
            self._tick.start()
            self._on_tick_timeout()
            self.show()
        elif state is RecorderState.FINISHING:
            self._tick.stop()
            self.setText("● REC finishing…")
        else:
            self._tick.stop()
            self.hide()

    @Slot()
    def _on_tick_timeout(self) -> None:
        elapsed = time.monotonic() - self._recorder.started_monotonic_s
        self.setText(f"● REC {format_elapsed(elapsed)}")

    @Slot(object)
    def _on_recorder_stats_changed(self, stats: RecordingStats) -> None:
        self.setToolTip(
            f"Recording to {stats.path}\n{stats.frames_written} frames, "
            f"{stats.frames_repeated} repeated, {stats.frames_dropped} dropped, "
            f"{stats.bytes_written / 1e6:.1f} MB"
        )

    @Slot(object)
    def _on_recorder_finished(self, result: RecordingResult) -> None:
        self.setToolTip(f"Last recording: {result.path} ({format_elapsed(result.duration_s)})")
