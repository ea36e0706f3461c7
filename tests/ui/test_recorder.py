"""The recorder, offscreen, end to end: a real window, a real file, decoded with PyAV.

The window carries a *clock strip*: the monotonic time at its last repaint, written as
black and white cells. Decoding that strip from each frame shows what moment of the
window the frame holds, so the tests can check that frame ``k`` (pts ``k / fps``) shows
the window as of ``t0 + k / fps`` — i.e. presentation times follow the monotonic clock
— without trusting the recorder's own bookkeeping.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import av
import numpy as np
import pytest
from PySide6.QtCore import QRect, QTimer
from PySide6.QtGui import QColor, QImage, QPainter
from PySide6.QtWidgets import QPlainTextEdit, QVBoxLayout, QWidget

from workstation.core.errors import UserError
from workstation.ui.recorder import (
    FrameGrabber,
    GrabMethod,
    OverlayValues,
    Recorder,
    RecorderState,
    RecordingIndicator,
    RecordingOptions,
    VideoCodec,
    create_record_action,
)

pytestmark = pytest.mark.gui

BITS = 24
CELL_PX = 18
STRIP_H_PX = 28
REPO_ROOT = Path(__file__).resolve().parents[2]


class ClockStrip(QWidget):
    """Paints ``ms = (monotonic() - base) × 1000`` as BITS cells, most significant first."""

    def __init__(self, base_s: float) -> None:
        super().__init__()
        self.base_s = base_s
        self.frozen_ms: int | None = None
        self.setFixedHeight(STRIP_H_PX)
        self._timer = QTimer(self)
        self._timer.timeout.connect(self.update)
        self._timer.start(4)

    def paintEvent(self, event) -> None:  # noqa: N802 - Qt override
        value = self.frozen_ms
        if value is None:
            value = int((time.monotonic() - self.base_s) * 1000)
        painter = QPainter(self)
        painter.fillRect(self.rect(), QColor(128, 128, 128))
        for bit in range(BITS):
            on = (value >> (BITS - 1 - bit)) & 1
            painter.fillRect(4 + bit * CELL_PX, 2, CELL_PX - 2, STRIP_H_PX - 4,
                             QColor(255, 255, 255) if on else QColor(0, 0, 0))
        painter.end()


class StreamingWindow(QWidget):
    """A clock strip over two panes that stream text (their content changes every tick)."""

    def __init__(self) -> None:
        super().__init__()
        self.base_s = time.monotonic()
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(0)
        self.clock = ClockStrip(self.base_s)
        layout.addWidget(self.clock)
        self.panes = [QPlainTextEdit() for _ in range(2)]
        for pane in self.panes:
            pane.setMaximumBlockCount(300)
            layout.addWidget(pane)
        self._count = 0
        self._feed = QTimer(self)
        self._feed.timeout.connect(self._on_feed_timeout)
        self._feed.start(15)
        self.resize(480, 360)

    def _on_feed_timeout(self) -> None:
        self._count += 1
        for index, pane in enumerate(self.panes):
            pane.appendPlainText(f"session {index} token {self._count} " + "lorem ipsum " * 3)


def read_clock_s(gray: np.ndarray, base_s: float) -> float | None:
    """The monotonic time the strip in this frame shows, or None if it cannot be read."""
    y = STRIP_H_PX // 2
    samples = [int(gray[y, 4 + bit * CELL_PX + CELL_PX // 2 - 1]) for bit in range(BITS)]
    if any(60 < s < 196 for s in samples):
        return None
    value = 0
    for s in samples:
        value = (value << 1) | (1 if s >= 128 else 0)
    return base_s + value / 1000.0


def decode(path: Path) -> tuple[list[float], list[np.ndarray]]:
    times, frames = [], []
    with av.open(str(path)) as container:
        for frame in container.decode(video=0):
            times.append(float(frame.pts * frame.time_base))
            frames.append(frame.to_ndarray(format="gray"))
    return times, frames


@pytest.fixture
def window(qtbot) -> StreamingWindow:
    win = StreamingWindow()
    qtbot.addWidget(win)
    win.show()
    qtbot.waitExposed(win)
    qtbot.wait(50)
    return win


def record(qtbot, recorder: Recorder, target: QWidget, options: RecordingOptions, **kwargs):
    recorder.start(target, options, **kwargs)
    future = recorder.stop() if options.duration_s is None else None
    timeout_ms = int(((options.duration_s or 0) + 20) * 1000)
    if future is None:
        qtbot.waitUntil(lambda: recorder.state is RecorderState.IDLE, timeout=timeout_ms)
        future = recorder.stop()
    return future.result(timeout=20)


def test_backing_store_grab_gives_the_same_pixels_as_rendering(window, qtbot) -> None:
    window.clock.frozen_ms = 0b1011_0011_1000_1111_0000_1010
    window._feed.stop()
    qtbot.wait(50)
    images = {}
    for method in (GrabMethod.BACKING_STORE, GrabMethod.SCREEN, GrabMethod.RENDER):
        grabber = FrameGrabber(window, method=method)
        image = grabber.grab()
        assert image is not None and not image.isNull(), method
        assert grabber.last_method is method
        images[method] = image.convertToFormat(QImage.Format.Format_RGB32)
    reference = images[GrabMethod.RENDER]
    for method, image in images.items():
        assert image.size() == reference.size(), method
        assert image == reference, f"{method.value} differs from QWidget.grab"
    pane = window.panes[1]
    pane_image = FrameGrabber(pane).grab()
    origin = pane.mapTo(window, pane.rect().topLeft())
    assert pane_image == reference.copy(QRect(origin, pane.size()))
    assert len(set(np.frombuffer(pane_image.constBits(), np.uint32).tolist())) > 2  # real text
    # grab_into copies the same pixels straight into a caller's buffer, tightly packed
    buffer = bytearray(1 << 20)
    picture = FrameGrabber(pane).grab_into(lambda n: memoryview(buffer)[:n], len(buffer))
    assert (picture.width_px, picture.height_px) == (pane.width(), pane.height())
    packed = QImage(bytes(buffer[:picture.bytes_per_line * picture.height_px]), picture.width_px,
                    picture.height_px, picture.bytes_per_line, picture.qimage_format)
    assert packed.convertToFormat(QImage.Format.Format_RGB32) == pane_image.convertToFormat(
        QImage.Format.Format_RGB32)
    # a picture larger than the buffer allows is scaled down to fit
    small = FrameGrabber(window).grab_into(lambda n: memoryview(buffer)[:n], 100 * 80 * 4)
    assert small.width_px * small.height_px * 4 <= 100 * 80 * 4 and small.width_px > 50


def test_recording_is_real_time_and_follows_the_monotonic_clock(window, qtbot, tmp_path) -> None:
    recorder = Recorder()
    changes: list[bool] = []
    recorder.recording_changed.connect(changes.append)
    fps, duration_s = 30.0, 3.0
    before = time.monotonic()
    result = record(qtbot, recorder, window,
                    RecordingOptions(path=tmp_path / "clock.mp4", fps=fps, duration_s=duration_s))
    elapsed_s = time.monotonic() - before
    assert result.ok, result.error
    assert changes == [True, False]
    assert result.capture_method == "backing-store"
    assert (result.width_px, result.height_px) == (480, 360)

    times, frames = decode(result.path)
    # one frame per slot: round(duration × fps), presentation times exactly k / fps
    assert abs(len(frames) - round(duration_s * fps)) <= 1
    assert abs(len(frames) - round(result.wall_duration_s * fps)) <= 1
    assert len(frames) == result.frames_written
    assert result.frames_fresh + result.frames_repeated == result.frames_written
    # a grab the encoder had no room for is counted as dropped, and its slot repeats the last picture
    assert result.frames_dropped <= result.frames_repeated
    assert times == pytest.approx([k / fps for k in range(len(frames))], abs=1e-3)
    assert result.wall_duration_s <= elapsed_s

    # what each frame shows is the window as of t0 + k / fps: never from the future,
    # and (typically) less than a few frames old
    t0 = result.started_monotonic_s
    lags_s = []
    for k, gray in enumerate(frames):
        shown = read_clock_s(gray, window.base_s)
        if shown is None:
            continue
        slot_end = t0 + (k + 1) / fps
        assert shown <= slot_end + 0.002, f"frame {k} shows {shown - slot_end:+.3f} s ahead"
        lags_s.append(t0 + k / fps - shown)
    assert len(lags_s) >= 0.9 * len(frames)
    assert float(np.median(lags_s)) < 3 / fps
    # the picture is not blank and changes as text streams in
    assert all(gray.std() > 10 for gray in frames)
    distinct = {hash(gray[STRIP_H_PX + 4:, :].tobytes()) for gray in frames}
    assert len(distinct) > len(frames) // 2


def test_a_busy_gui_thread_repeats_frames_and_keeps_time(window, qtbot, tmp_path) -> None:
    recorder = Recorder()
    stall_s = 0.4
    recorder.start(window, RecordingOptions(path=tmp_path / "stall.mp4", fps=30, duration_s=2.0))
    qtbot.waitUntil(lambda: recorder.is_recording, timeout=20_000)
    QTimer.singleShot(500, lambda: time.sleep(stall_s))  # the GUI thread freezes
    qtbot.waitUntil(lambda: recorder.state is RecorderState.IDLE, timeout=30_000)
    result = recorder.stop().result()
    assert result.ok
    times, frames = decode(result.path)
    assert abs(len(frames) - 60) <= 1
    assert result.frames_repeated >= int(stall_s * 30) - 2
    assert result.frames_fresh + result.frames_repeated == len(frames)
    # the repeated frames are copies: the clock strip does not move during the stall
    shown = [read_clock_s(gray, window.base_s) for gray in frames]
    frozen = sum(1 for a, b in zip(shown, shown[1:]) if a is not None and a == b)
    assert frozen >= int(stall_s * 30) - 2


def test_a_stalled_encoder_drops_frames_counts_them_and_keeps_time(window, qtbot, tmp_path) -> None:
    """The encoder gets no CPU for half a second (SIGSTOP, as under heavy load): pictures
    that find the ring full are dropped and counted, the slots they missed repeat the last
    picture, and the file still has exactly one frame per slot."""
    recorder = Recorder()
    recorder.start(window, RecordingOptions(path=tmp_path / "stalled.mp4", fps=30,
                                            duration_s=2.0, queue_s=0.1))
    qtbot.waitUntil(lambda: recorder.is_recording, timeout=20_000)
    qtbot.wait(300)
    os.kill(recorder.encoder_pid, signal.SIGSTOP)
    try:
        qtbot.wait(500)
    finally:
        os.kill(recorder.encoder_pid, signal.SIGCONT)
    qtbot.waitUntil(lambda: recorder.state is RecorderState.IDLE, timeout=30_000)
    result = recorder.stop().result()
    assert result.ok
    assert result.frames_dropped >= 8
    assert result.frames_repeated >= 8
    assert result.queue_peak <= 3
    times, frames = decode(result.path)
    assert len(frames) == result.frames_written and abs(len(frames) - 60) <= 1
    assert times[-1] == pytest.approx((len(frames) - 1) / 30, abs=1e-3)


def test_pane_scaled_into_a_box_of_another_aspect(window, qtbot, tmp_path) -> None:
    pane = window.panes[0]
    recorder = Recorder()
    result = record(qtbot, recorder, pane, RecordingOptions(
        path=tmp_path / "pane.mp4", size_px=(321, 320), fps=15, duration_s=1.0))
    assert result.ok
    assert (result.width_px, result.height_px) == (320, 320)
    _, frames = decode(result.path)
    assert abs(len(frames) - 15) <= 1
    gray = frames[-1]
    assert gray.shape == (320, 320)
    assert gray[:8].max() < 40 and gray[-8:].max() < 40  # letterboxed: black bands
    assert gray[150:170].std() > 10  # the pane's text in the middle


def test_region_with_overlay(window, qtbot, tmp_path) -> None:
    recorder = Recorder()
    calls = []

    def values() -> OverlayValues:
        calls.append(1)
        return OverlayValues(sessions=32, sessions_running=28, tokens_per_s=11840, savings_pct=66)

    result = record(qtbot, recorder, window, RecordingOptions(
        path=tmp_path / "region.mp4", fps=10, duration_s=1.0, overlay=True),
        region=QRect(0, 0, 401, 301), overlay_source=values)
    assert result.ok and (result.width_px, result.height_px) == (400, 300)
    assert 1 <= len(calls) <= 5  # asked at most twice a second
    _, frames = decode(result.path)
    corner = frames[-1][-40:, -200:]
    assert corner.min() < 30 and corner.max() > 200  # white caption on its dark box


@pytest.mark.parametrize("codec,suffix", [(VideoCodec.VP9, ".webm"), (VideoCodec.AV1, ".mp4"),
                                          (VideoCodec.H264, ".mkv")])
def test_other_codecs_and_containers(window, qtbot, tmp_path, codec, suffix) -> None:
    recorder = Recorder()
    result = record(qtbot, recorder, window, RecordingOptions(
        path=tmp_path / f"out{suffix}", codec=codec, fps=15, duration_s=1.0))
    assert result.ok
    with av.open(str(result.path)) as container:
        stream = container.streams.video[0]
        assert stream.codec_context.name in {"h264", "vp9", "av1", "libdav1d", "libvpx-vp9"}
        count = sum(1 for _ in container.decode(video=0))
    assert abs(count - 15) <= 1


def test_indicator_and_manual_stop(window, qtbot, tmp_path) -> None:
    recorder = Recorder()
    indicator = RecordingIndicator(recorder)
    qtbot.addWidget(indicator)
    assert indicator.isHidden()
    recorder.toggle(window, lambda: RecordingOptions(path=tmp_path / "manual.mp4"))
    assert recorder.state is RecorderState.STARTING and not indicator.isHidden()
    qtbot.waitUntil(lambda: recorder.is_recording, timeout=20_000)
    assert indicator.text().startswith("● REC 00:00:0")
    qtbot.wait(500)
    with pytest.raises(UserError):
        recorder.start(window, RecordingOptions(path=tmp_path / "again.mp4"))
    recorder.toggle(window, lambda: RecordingOptions(path=tmp_path / "unused.mp4"))
    result = recorder.wait(20)
    assert result is not None and result.ok
    assert indicator.isHidden()
    assert abs(result.frames_written - round(result.wall_duration_s * 30)) <= 1
    assert not (tmp_path / "unused.mp4").exists()


def test_record_action_follows_the_recorder(window, qtbot, tmp_path) -> None:
    recorder = Recorder()
    errors: list[str] = []
    saved: list[str] = []
    paths = iter([tmp_path / "a.mp4", tmp_path / "b.mp4"])
    action = create_record_action(recorder, lambda: window,
                                  lambda: RecordingOptions(path=next(paths), duration_s=0.5),
                                  on_error=errors.append, on_saved=saved.append)
    assert action.isCheckable() and action.shortcut().toString() == "Ctrl+R"
    action.trigger()
    assert action.isChecked() and action.text() == "Stop"
    qtbot.waitUntil(lambda: recorder.is_recording, timeout=20_000)
    assert action.isChecked()
    qtbot.waitUntil(lambda: recorder.state is RecorderState.IDLE, timeout=20_000)
    assert not action.isChecked() and action.isEnabled()  # stopped by itself: action follows
    assert (tmp_path / "a.mp4").stat().st_size > 0
    qtbot.waitUntil(lambda: bool(saved), timeout=5_000)  # it says where the file is
    assert saved == [f"Recording saved: {tmp_path / 'a.mp4'} (0:00, {window.width() - window.width() % 2}×"
                     f"{window.height() - window.height() % 2}, {(tmp_path / 'a.mp4').stat().st_size / 1e6:.1f} MB)"]
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where a folder should be")
    bad = create_record_action(recorder, window,
                               lambda: RecordingOptions(path=blocked / "x.mp4"),
                               on_error=errors.append)
    bad.trigger()
    assert not recorder.is_recording and not bad.isChecked()
    assert len(errors) == 1 and "cannot write the recording" in errors[0]


def test_options_from_the_demo_manifest(tmp_path) -> None:
    from workstation.fleet.demo_manifest import load_manifest

    recording = load_manifest().recording
    options = RecordingOptions.from_demo(recording, tmp_path / "demo.mp4", duration_s=20)
    assert options.size_px == (1280, 720) and options.fps == 30 and options.overlay
    assert options.codec is VideoCodec.H264 and options.duration_s == 20


def test_headless_demo_recording_of_the_main_window(qtbot, tmp_path, monkeypatch) -> None:
    """What ``workstation demo --headless --sessions 8 --record OUT.mp4 --duration N`` does
    with these pieces: plan 8 sessions from the default manifest, show them in the real
    window, record for a fixed duration on the asyncio loop, then check the file."""
    import asyncio

    from workstation.config import load_settings
    from workstation.core.session_state import SessionState
    from workstation.fleet.demo_manifest import load_manifest, plan_sessions
    from workstation.ui.main_window import MainWindow
    from workstation.ui.panes.session_pane import PaneInfo
    from workstation.ui.recorder import probe_video

    monkeypatch.setenv("WORKSTATION_DATA_DIR", str(tmp_path / "data"))
    manifest = load_manifest()
    window = MainWindow(load_settings())
    qtbot.addWidget(window)
    plan = plan_sessions(manifest, 8)
    for session in plan:
        window.add_session(PaneInfo(session_id=session.name, name=session.name,
                                    repo=session.repository.name, mode=session.task.mode.value,
                                    state=SessionState.RUNNING))
        window.doc(session.name).stream(session.task.prompt + "\n")
    recorder = Recorder(window)
    window.install_record_action(create_record_action(recorder, window, lambda: None))
    window.statusBar().addPermanentWidget(RecordingIndicator(recorder))
    window.resize(1280, 720)
    window.show()
    qtbot.waitExposed(window)
    feed = QTimer(window)
    words = iter(range(10**9))
    feed.timeout.connect(lambda: [window.doc(s.name).stream(f" token{next(words)}") for s in plan])
    feed.start(20)
    options = RecordingOptions.from_demo(manifest.recording, tmp_path / "demo.mp4", duration_s=2.0)
    recorder.start(window, options, overlay_source=lambda: OverlayValues(
        sessions=len(plan), sessions_running=len(plan), tokens_per_s=400.0))
    loop = asyncio.new_event_loop()
    try:
        async def until_done():
            while True:  # the GUI keeps running: this test drives Qt's events by hand
                qtbot.wait(10)
                if recorder.state is RecorderState.IDLE and recorder._result is not None:
                    return await recorder.wait_async()

        result = loop.run_until_complete(asyncio.wait_for(until_done(), 30))
    finally:
        loop.close()
    feed.stop()
    assert result.ok and (result.width_px, result.height_px) == (1280, 720)
    assert window.record_action.text() == "Rec" and not window.record_action.isChecked()
    summary = probe_video(result.path)
    assert abs(summary.frames - 60) <= 1 and summary.duration_s == pytest.approx(2.0, abs=0.05)
    assert (summary.width_px, summary.height_px, summary.codec) == (1280, 720, "h264")


def test_bad_options_are_plain_errors(tmp_path) -> None:
    with pytest.raises(UserError, match="unknown video file type"):
        RecordingOptions(path=tmp_path / "x.gif")
    with pytest.raises(UserError, match="webm"):
        RecordingOptions(path=tmp_path / "x.webm", codec=VideoCodec.H264)
    with pytest.raises(UserError, match="frame rate"):
        RecordingOptions(path=tmp_path / "x.mp4", fps=0)
    with pytest.raises(UserError, match="codec"):
        VideoCodec.parse("gif")
    assert RecordingOptions(path=tmp_path / "x.mp4", size_px=(1281, 721)).size_px == (1280, 720)
    assert VideoCodec.parse("libx264") is VideoCodec.H264 and VideoCodec.H264.is_gpl


def test_hidden_window_cannot_start(qtbot, tmp_path) -> None:
    widget = QWidget()
    qtbot.addWidget(widget)
    with pytest.raises(UserError, match="not shown"):
        Recorder().start(widget, RecordingOptions(path=tmp_path / "x.mp4"))
    assert not (tmp_path / "x.mp4").exists()


_CHILD = textwrap.dedent("""
    import os, sys, time
    os.environ["QT_QPA_PLATFORM"] = "offscreen"
    from pathlib import Path
    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QApplication, QPlainTextEdit
    from workstation.ui.recorder import Recorder, RecordingOptions
    app = QApplication([])
    pane = QPlainTextEdit(); pane.resize(320, 240); pane.show()
    feed = QTimer(); feed.timeout.connect(lambda: pane.appendPlainText("token " * 8)); feed.start(10)
    recorder = Recorder()
    recorder.start(pane, RecordingOptions(path=Path(sys.argv[1]), fps=30))
    mode = sys.argv[2]
    while not recorder.is_recording:
        app.processEvents()
        time.sleep(0.002)
    if mode == "exit":
        # no event loop of Qt's own and no stop(): the interpreter simply ends
        end = time.monotonic() + 2.5
        while time.monotonic() < end:
            app.processEvents()
            time.sleep(0.002)
        print("recording", recorder._worker.pid, flush=True)
        sys.exit(0)
    def announce():
        print("recording", recorder._worker.pid, flush=True)
        if mode == "quit":
            app.quit()  # the app closes mid-recording; nobody calls stop()
    QTimer.singleShot(2500, announce)
    app.exec()
""")


def _run_child(tmp_path: Path, mode: str) -> Path:
    out = tmp_path / f"{mode}.mp4"
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    proc = subprocess.Popen([sys.executable, "-c", _CHILD, str(out), mode], env=env,
                            stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        word, encoder_pid = proc.stdout.readline().split()
        assert word == "recording"
        if mode == "kill-app":
            os.kill(proc.pid, signal.SIGKILL)  # the app dies; its encoder process lives on
        elif mode == "kill-all":
            os.killpg(proc.pid, signal.SIGKILL)  # the app and its encoder die together
        elif mode == "term-all":
            os.killpg(proc.pid, signal.SIGTERM)  # e.g. a session manager stopping the group
        proc.wait(timeout=60)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # the encoder finishes the file by itself
            try:
                os.kill(int(encoder_pid), 0)
            except ProcessLookupError:
                break
            time.sleep(0.05)
        else:
            raise AssertionError("the encoder process did not exit after its app")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return out


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["kill-app", "kill-all", "term-all", "quit", "exit"])
def test_recording_cut_off_still_plays(tmp_path, mode) -> None:
    """The app SIGKILLed (alone, or with its encoder), the whole group SIGTERMed, the app
    quitting, or Python exiting mid-recording, with nobody calling stop(): the file still
    decodes."""
    path = _run_child(tmp_path, mode)
    times, frames = decode(path)
    seconds = len(frames) / 30
    # all killed: the last (at most one-second) fragment may be lost; else all of it is there
    assert seconds >= (1.4 if mode == "kill-all" else 2.4), f"{len(frames)} frames"
    assert times == pytest.approx([k / 30 for k in range(len(frames))], abs=1e-3)
    assert all(gray.std() > 5 for gray in frames)
    if mode != "kill-all":
        with av.open(str(path)) as container:  # closed properly: the muxer wrote its index
            assert container.duration is not None and container.duration > 2_000_000


def test_recording_falls_back_to_vp9_where_h264_is_missing(tmp_path, monkeypatch):
    """A bundle without GPL code has no working x264: the recording is VP9 instead."""
    import av

    from workstation.ui.recorder.encoder import EncoderCore
    from workstation.ui.recorder.options import RecordingOptions, VideoCodec

    monkeypatch.setattr(av, "codecs_available", set(av.codecs_available) - {"libx264"})
    core = EncoderCore(RecordingOptions(path=tmp_path / "out.mp4", size_px=(320, 240)), 320, 240)
    assert core.options.codec is VideoCodec.VP9
    core.close(None)
