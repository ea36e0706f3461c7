"""The recorder: real-time video of the window, a pane or a region, honest about time.

On the GUI thread a precise single-shot timer wakes at each frame boundary of the
monotonic clock (``t0 + k / fps``), copies the picture from the window's backing store
straight into a shared-memory slot (see ``capture`` and ``ring``), draws the optional
caption there and hands the slot to the encoder process (see ``encoder`` and ``worker``),
which fills any frame slot that got no picture with the previous one. So the file always holds ``round(duration × fps)``
frames with presentation times ``k / fps``, whatever the load: a late grab is shown late
(and the slots it missed counted as *repeated*), a grab the encoder cannot take is
*dropped* (and counted), and nothing is ever sped up or slowed down.

Finalizing never depends on the event loop: :meth:`Recorder.stop` returns a
``concurrent.futures.Future``; :meth:`Recorder.wait` blocks for it (shutdown, headless
runs); the recorder also finalizes when the application quits, when the captured widget
is destroyed, and at interpreter exit; and the encoder process closes the file by itself
when the app dies, even by SIGKILL (it reads EOF on its pipe). MP4 files are written in
one-second fragments besides, so even a killed encoder leaves a playable file.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import math
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import QCoreApplication, QObject, QRect, Qt, QTimer, Signal, Slot
from PySide6.QtGui import QImage
from PySide6.QtWidgets import QWidget

from workstation.core.errors import UserError
from workstation.ui.recorder.capture import FrameGrabber, GrabMethod
from workstation.ui.recorder.encoder import EncoderOutcome
from workstation.ui.recorder.options import RecordingOptions
from workstation.ui.recorder.overlay import OverlayPainter, OverlaySource
from workstation.ui.recorder.worker import EncoderWorker

log = logging.getLogger(__name__)

_TIMER_SLACK_S = 0.0005
"""Wake this long after a frame boundary, so a timer that fires a hair early is rare."""
_STATS_INTERVAL_S = 1.0
_GRAB_SAMPLES = 4096
QUIT_FINALIZE_TIMEOUT_S = 30.0


class RecorderState(enum.Enum):
    IDLE = "idle"
    STARTING = "starting"
    """The encoder process is starting (a few hundred ms); frame 0 comes when it is ready."""
    RECORDING = "recording"
    FINISHING = "finishing"
    """Stopped; the encoder is writing out the last frames and closing the file."""


@dataclass(frozen=True, slots=True)
class RecordingStats:
    """A live snapshot, emitted about once a second while recording."""

    path: Path
    elapsed_s: float
    frames_written: int
    frames_fresh: int
    frames_repeated: int
    frames_dropped: int
    queue_peak: int
    encoder_cpu_s: float
    bytes_written: int
    grab_ms_p50: float
    grab_ms_p99: float
    capture_method: str


@dataclass(frozen=True, slots=True)
class RecordingResult:
    """What was written. ``frames_written == round(duration_s × fps)`` (the last slot may
    round either way), ``frames_fresh + frames_repeated == frames_written``."""

    path: Path
    fps: float
    width_px: int
    height_px: int
    codec: str
    duration_s: float
    """Video length: frames_written / fps."""
    wall_duration_s: float
    """Monotonic time from the first frame's boundary to stop."""
    started_monotonic_s: float
    """``time.monotonic()`` at frame 0: frame ``k`` shows the window as of ``t0 + k / fps``."""
    frames_written: int
    frames_fresh: int
    frames_repeated: int
    frames_dropped: int
    queue_peak: int
    encoder_cpu_s: float
    grab_ms_p50: float
    grab_ms_p99: float
    bytes_written: int
    capture_method: str
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def dropped_pct(self) -> float:
        grabbed = self.frames_fresh + self.frames_dropped
        return 100.0 * self.frames_dropped / grabbed if grabbed else 0.0

    @property
    def repeated_pct(self) -> float:
        return 100.0 * self.frames_repeated / self.frames_written if self.frames_written else 0.0


def _percentile(values: deque[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class Recorder(QObject):
    """Start/stop recording of one widget. One recording at a time per recorder.

    :meth:`start` returns at once (state ``STARTING``); recording — and the clock of
    frame 0 — begins when the encoder process is ready.

    Signals (all on the GUI thread): ``state_changed(RecorderState)``,
    ``recording_changed(bool)`` (for a checkable REC action and the indicator),
    ``stats_changed(RecordingStats)`` about once a second, ``finished(RecordingResult)``
    when the file is closed (also after a failure, with ``error`` set) and
    ``failed(str)`` with a plain message when the file could not be completed.
    """

    state_changed = Signal(object)
    recording_changed = Signal(bool)
    stats_changed = Signal(object)
    finished = Signal(object)
    failed = Signal(str)
    _encoder_ready = Signal()
    _encoder_done = Signal(object)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._state = RecorderState.IDLE
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setTimerType(Qt.TimerType.PreciseTimer)
        self._timer.timeout.connect(self._on_timer_timeout)
        self._encoder_ready.connect(self._on_encoder_ready, Qt.ConnectionType.QueuedConnection)
        self._encoder_done.connect(self._on_encoder_done, Qt.ConnectionType.QueuedConnection)
        self._options: RecordingOptions | None = None
        self._grabber: FrameGrabber | None = None
        self._overlay: OverlayPainter | None = None
        self._worker: EncoderWorker | None = None
        self._result: Future[RecordingResult] | None = None
        self._t0_s = 0.0
        self._stop_s = 0.0
        self._next_slot = 0
        self._stats_at_s = 0.0
        self._grab_ms: deque[float] = deque(maxlen=_GRAB_SAMPLES)
        self._target: QWidget | None = None
        app = QCoreApplication.instance()
        if app is not None:
            app.aboutToQuit.connect(self._on_app_about_to_quit)

    # ----- public API -----
    @property
    def state(self) -> RecorderState:
        return self._state

    @property
    def is_recording(self) -> bool:
        return self._state is RecorderState.RECORDING

    @property
    def options(self) -> RecordingOptions | None:
        return self._options

    @property
    def encoder_pid(self) -> int | None:
        """Process id of the encoder of the current (or last) recording."""
        return self._worker.pid if self._worker is not None else None

    @property
    def started_monotonic_s(self) -> float:
        return self._t0_s

    def start(self, target: QWidget, options: RecordingOptions, *, region: QRect | None = None,
              overlay_source: OverlaySource | None = None,
              grab_method: GrabMethod = GrabMethod.AUTO) -> None:
        """Start recording ``target`` (the main window, a pane, or ``region`` of it).
        Raises :class:`UserError` when it cannot (already recording, nothing shown, the
        file cannot be written, the codec is missing); later problems come as ``failed``."""
        if self._state is not RecorderState.IDLE:
            raise UserError("a recording is already running" if self._state is not RecorderState.FINISHING
                            else "the previous recording is still being finalized")
        grabber = FrameGrabber(target, region=region, method=grab_method)
        first = grabber.grab()
        if first is None:
            raise UserError("nothing to record: the window is not shown (or the area is empty)")
        out_w, out_h = options.output_size_for(first.width(), first.height())
        picture_bytes = max(first.width() * first.height(), out_w * out_h) * 4
        worker = EncoderWorker(options, out_w, out_h, max_picture_bytes=picture_bytes,
                               on_ready=self._emit_encoder_ready, on_done=self._emit_encoder_done)
        self._options, self._grabber, self._worker = options, grabber, worker
        self._overlay = OverlayPainter(overlay_source) if options.overlay else None
        self._target = target
        self._t0_s = self._stop_s = 0.0
        self._next_slot = 0
        self._grab_ms.clear()
        self._result = Future()
        target.destroyed.connect(self._on_target_destroyed)
        self._set_state(RecorderState.STARTING)
        log.info("recording %s at %g fps, %d×%d, %s (encoder pid %s)", options.path, options.fps,
                 out_w, out_h, options.codec.value, worker.pid)

    def stop(self) -> Future[RecordingResult]:
        """Stop and finalize in the background. The future (and ``finished``) gives the
        result once the file is closed; stopping twice returns the same future."""
        if self._state is RecorderState.IDLE:
            if self._result is not None:
                return self._result
            raise UserError("no recording is running")
        if self._state in (RecorderState.STARTING, RecorderState.RECORDING):
            self._timer.stop()
            total = 0
            if self._state is RecorderState.RECORDING:
                planned_end = (self._t0_s + self._options.duration_s
                               if self._options.duration_s is not None else math.inf)
                self._stop_s = min(time.monotonic(), planned_end)
                total = max(round((self._stop_s - self._t0_s) * self._options.fps), self._next_slot)
            self._worker.finish(total)
            self._disconnect_target()
            self._set_state(RecorderState.FINISHING)
        return self._result

    def wait(self, timeout_s: float | None = QUIT_FINALIZE_TIMEOUT_S) -> RecordingResult | None:
        """Stop if needed and block until the file is closed (for shutdown and headless
        runs; the GUI is frozen meanwhile). None if it took longer than ``timeout_s``."""
        if self._state is RecorderState.IDLE and self._result is None:
            return None
        if self._state is not RecorderState.IDLE:
            self.stop()
        outcome = self._worker.join(timeout_s) if self._worker is not None else None
        if outcome is not None:
            self._complete(outcome)
        return self._result.result() if self._result is not None and self._result.done() else None

    async def wait_async(self) -> RecordingResult:
        """Await the end of the current recording (it stops by itself after
        ``duration_s``, or when :meth:`stop` is called) without blocking the event loop."""
        if self._result is None:
            raise UserError("no recording was started")
        return await asyncio.wrap_future(self._result)

    def toggle(self, target: QWidget, make_options: Callable[[], RecordingOptions], *,
               overlay_source: OverlaySource | None = None) -> None:
        """For a REC button / Ctrl+R: stop when recording, else start with fresh options."""
        if self.is_recording:
            self.stop()
        elif self._state is RecorderState.STARTING:
            self.stop()
        elif self._state is RecorderState.IDLE:
            self.start(target, make_options(), overlay_source=overlay_source)

    def stats(self) -> RecordingStats | None:
        if self._worker is None or self._options is None:
            return None
        encoder = self._worker.stats()
        end = time.monotonic() if self.is_recording else self._stop_s
        return RecordingStats(
            path=self._options.path, elapsed_s=max(0.0, end - self._t0_s) if self._t0_s else 0.0,
            frames_written=encoder.frames_written, frames_fresh=encoder.frames_fresh,
            frames_repeated=encoder.frames_repeated, frames_dropped=encoder.frames_dropped,
            queue_peak=encoder.queue_peak, encoder_cpu_s=encoder.encoder_cpu_s,
            bytes_written=encoder.bytes_written,
            grab_ms_p50=_percentile(self._grab_ms, 0.5), grab_ms_p99=_percentile(self._grab_ms, 0.99),
            capture_method=self._capture_method(),
        )

    # ----- the frame clock -----
    def _schedule(self) -> None:
        due = self._t0_s + self._next_slot / self._options.fps
        if self._options.duration_s is not None:
            due = min(due, self._t0_s + self._options.duration_s)
        delay_ms = max(0, math.ceil((due + _TIMER_SLACK_S - time.monotonic()) * 1000))
        self._timer.start(delay_ms)

    @Slot()
    def _on_timer_timeout(self) -> None:
        if self._state is not RecorderState.RECORDING:
            return
        now = time.monotonic()
        options = self._options
        if options.duration_s is not None and now >= self._t0_s + options.duration_s:
            self.stop()
            return
        slot = int((now - self._t0_s) * options.fps)
        if slot >= self._next_slot:
            self._capture(slot, now)
            self._next_slot = slot + 1
        if self._worker.failed is not None:
            self.stop()
            return
        if now - self._stats_at_s >= _STATS_INTERVAL_S:
            self._stats_at_s = now
            self.stats_changed.emit(self.stats())
        self._schedule()

    def _capture(self, slot: int, now_s: float) -> None:
        """Grab into a free shared slot and hand it over; when the encoder is behind,
        nothing is grabbed at all (the worker counts the drop)."""
        worker = self._worker
        index = worker.reserve()
        if index is None:
            return
        picture = self._grabber.grab_into(lambda nbytes: worker.slot_buffer(index, nbytes),
                                          worker.ring.slot_bytes)
        if picture is None:  # hidden for a moment: the encoder repeats the last frame
            return
        if self._overlay is not None:
            nbytes = picture.bytes_per_line * picture.height_px
            image = QImage(worker.slot_buffer(index, nbytes), picture.width_px, picture.height_px,
                           picture.bytes_per_line, picture.qimage_format)
            self._overlay.paint(image, elapsed_s=now_s - self._t0_s, now_s=now_s)
            del image
        worker.commit(index, slot, picture.width_px, picture.height_px, picture.bytes_per_line,
                      picture.pix_fmt)
        self._grab_ms.append((time.monotonic() - now_s) * 1000.0)

    # ----- from the encoder's reader thread (queued to the GUI thread) -----
    def _emit_encoder_ready(self) -> None:
        try:
            self._encoder_ready.emit()
        except RuntimeError:  # the recorder was deleted meanwhile
            log.debug("recorder gone before its encoder was ready")

    def _emit_encoder_done(self, outcome: EncoderOutcome) -> None:
        try:
            self._encoder_done.emit(outcome)
        except RuntimeError:  # wait() and the future still work
            log.debug("recorder gone before its encoder finished")

    @Slot()
    def _on_encoder_ready(self) -> None:
        if self._state is not RecorderState.STARTING:
            return
        self._t0_s = self._stats_at_s = time.monotonic()
        self._next_slot = 0
        self._set_state(RecorderState.RECORDING)
        self._on_timer_timeout()  # frame 0, now

    @Slot(object)
    def _on_encoder_done(self, outcome: EncoderOutcome) -> None:
        self._complete(outcome)

    def _complete(self, outcome: EncoderOutcome) -> None:
        if self._result is None or self._result.done():
            return
        if self._state in (RecorderState.STARTING, RecorderState.RECORDING):
            self._timer.stop()  # the encoder ended by itself (failed, or was killed)
            self._stop_s = time.monotonic() if self._t0_s else 0.0
            self._disconnect_target()
        stats = outcome.stats
        error = outcome.error
        if error is None and stats.frames_written == 0:
            error = "stopped before the first frame"
        result = RecordingResult(
            path=outcome.path, fps=outcome.fps, width_px=outcome.width_px,
            height_px=outcome.height_px, codec=self._options.codec.value,
            duration_s=stats.frames_written / outcome.fps,
            wall_duration_s=max(0.0, self._stop_s - self._t0_s), started_monotonic_s=self._t0_s,
            frames_written=stats.frames_written, frames_fresh=stats.frames_fresh,
            frames_repeated=stats.frames_repeated, frames_dropped=stats.frames_dropped,
            queue_peak=stats.queue_peak, encoder_cpu_s=stats.encoder_cpu_s,
            grab_ms_p50=_percentile(self._grab_ms, 0.5), grab_ms_p99=_percentile(self._grab_ms, 0.99),
            bytes_written=stats.bytes_written, capture_method=self._capture_method(),
            error=error,
        )
        self._result.set_result(result)
        self._worker.close()
        self._set_state(RecorderState.IDLE)
        log.info("recording %s closed: %d frames (%d repeated, %d dropped)%s", result.path,
                 result.frames_written, result.frames_repeated, result.frames_dropped,
                 f", error: {result.error}" if result.error else "")
        self.finished.emit(result)
        if result.error:
            self.failed.emit(f"the recording {result.path.name} is incomplete: {result.error}")

    def _capture_method(self) -> str:
        method = self._grabber.last_method if self._grabber is not None else None
        return method.value if method is not None else "none"

    def _set_state(self, state: RecorderState) -> None:
        was_recording = self.is_recording
        self._state = state
        self.state_changed.emit(state)
        if was_recording != self.is_recording:
            self.recording_changed.emit(self.is_recording)

    def _disconnect_target(self) -> None:
        if self._target is not None:
            try:
                self._target.destroyed.disconnect(self._on_target_destroyed)
            except (RuntimeError, TypeError):
                pass
            self._target = None

    @Slot()
    def _on_target_destroyed(self) -> None:
        self._target = None
        if self._state in (RecorderState.STARTING, RecorderState.RECORDING):
            log.warning("the recorded widget was closed: finalizing the recording")
            self.stop()

    @Slot()
    def _on_app_about_to_quit(self) -> None:
        if self._state is not RecorderState.IDLE:
            log.info("application quits while recording: finalizing the file")
            self.wait(QUIT_FINALIZE_TIMEOUT_S)
