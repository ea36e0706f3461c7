"""The encoder worker: grabbed pictures in, a playable video file out, on its own thread.

Qt-free on purpose (it sees pixel memory, not QImages), so it can be tested and driven
without a window. Time is counted in *slots*: slot ``k`` is the frame shown from
``k / fps`` seconds after the start, on the monotonic clock. The recorder grabs a picture
for a slot and submits it; when slots were skipped (the GUI thread was late, or a grab was
dropped because this worker was behind) the worker fills them by **repeating** the last
picture, so the video always has one frame per slot and never stretches or shrinks time.
Pictures the worker could not take are **dropped** at submit and counted there.

PyAV releases the GIL inside the pixel conversion (libswscale) and the encoder, so this
thread costs the GUI thread very little; the picture is wrapped, not copied
(``VideoFrame.from_numpy_buffer``).
"""

from __future__ import annotations

import atexit
import logging
import os
import queue
import threading
import time
import weakref
from concurrent.futures import Future
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import av
import numpy as np

from workstation.core.errors import UserError
from workstation.ui.recorder.options import Container, RecordingOptions, VideoCodec

log = logging.getLogger(__name__)

_BYTES_PER_PIXEL = {"bgra": 4, "argb": 4, "rgba": 4, "rgb24": 3}
_FINISH_JOIN_TIMEOUT_S = 30.0


@dataclass(frozen=True, slots=True)
class RawFrame:
    """One grabbed picture for one slot. ``owner`` keeps ``pixels`` valid until encoded."""

    slot: int
    pixels: object
    """Anything with the buffer protocol: ``bytes_per_line × height_px`` bytes."""
    width_px: int
    height_px: int
    bytes_per_line: int
    pix_fmt: str
    """``bgra`` (Qt's RGB32/ARGB32 on little-endian machines; ``argb`` on big-endian),
    ``rgba`` or ``rgb24``."""
    owner: object = None


@dataclass(frozen=True, slots=True)
class EncoderStats:
    frames_written: int
    """Frames in the file so far: one per slot."""
    frames_fresh: int
    """Frames that carry a newly grabbed picture."""
    frames_repeated: int
    """Slots filled with the previous picture because no fresh one came in time."""
    frames_dropped: int
    """Grabbed pictures thrown away because the encoder was behind (counted at submit)."""
    queue_peak: int
    """Most pictures ever waiting for the encoder at once."""
    encoder_cpu_s: float
    """CPU time of the encoder thread (libx264 at encoder_threads=1 runs all on it)."""
    bytes_written: int


@dataclass(frozen=True, slots=True)
class EncoderOutcome:
    path: Path
    width_px: int
    height_px: int
    fps: float
    stats: EncoderStats
    error: str | None = None
    """Why the file is incomplete, or None when it was finalized normally."""

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass(frozen=True, slots=True)
class _Finish:
    total_slots: int | None


class EncoderWorker:
    """Owns the container and the encoder; everything after ``__init__`` runs on its thread.

    ``__init__`` opens the file (so a bad path fails at once, on the caller's thread);
    :meth:`submit` never blocks; :meth:`finish` pads the video to its final slot, flushes
    the encoder and closes the container, and returns a future of the outcome.
    """

    def __init__(self, options: RecordingOptions, width_px: int, height_px: int) -> None:
        if width_px % 2 or height_px % 2:
            raise ValueError(f"yuv420p needs even sizes, got {width_px}×{height_px}")
        self.options = options
        self.width_px = width_px
        self.height_px = height_px
        self._max_pending = max(2, round(options.queue_s * options.fps))
        self._slots = threading.BoundedSemaphore(self._max_pending)
        self._queue: queue.SimpleQueue[RawFrame | _Finish] = queue.SimpleQueue()
        self._future: Future[EncoderOutcome] = Future()
        self._finish_requested = False
        self._failed: str | None = None
        self._lock = threading.Lock()
        self._pending = 0
        # counters: written by one thread each, read anywhere (ints are atomic under the GIL)
        self._written = 0
        self._fresh = 0
        self._repeated = 0
        self._dropped = 0
        self._queue_peak = 0
        self._cpu_s = 0.0
        self._container, self._stream = self._open()
        self._thread = threading.Thread(
            target=self._run, name=f"recorder-encoder:{options.path.name}", daemon=True
        )
        self._thread.start()
        _LIVE_WORKERS.add(self)

    # ----- caller side -----
    @property
    def failed(self) -> str | None:
        return self._failed

    @property
    def finishing(self) -> bool:
        return self._finish_requested

    def submit(self, frame: RawFrame) -> bool:
        """Hand a picture over; False (and counted as dropped) when the encoder is behind."""
        if self._finish_requested or self._failed is not None:
            return False
        if not self._slots.acquire(blocking=False):
            self._dropped += 1
            return False
        with self._lock:
            self._pending += 1
            self._queue_peak = max(self._queue_peak, self._pending)
        self._queue.put(frame)
        return True

    def finish(self, total_slots: int | None = None) -> Future[EncoderOutcome]:
        """Finalize: repeat the last picture up to ``total_slots`` frames (None: no padding),
        flush, close. Safe to call more than once; later calls return the same future."""
        if not self._finish_requested:
            self._finish_requested = True
            self._queue.put(_Finish(total_slots))
        return self._future

    def join(self, timeout_s: float | None = None) -> EncoderOutcome | None:
        self._thread.join(timeout_s)
        return self._future.result() if self._future.done() else None

    def stats(self) -> EncoderStats:
        size = 0
        try:
            size = self.options.path.stat().st_size
        except OSError:
            pass
        return EncoderStats(
            frames_written=self._written, frames_fresh=self._fresh,
            frames_repeated=self._repeated, frames_dropped=self._dropped,
            queue_peak=self._queue_peak, encoder_cpu_s=self._cpu_s, bytes_written=size,
        )

    # ----- worker thread -----
    def _open(self) -> tuple[av.container.OutputContainer, av.video.stream.VideoStream]:
        options = self.options
        if options.codec is VideoCodec.AV1:
            os.environ.setdefault("SVT_LOG", "1")  # SVT-AV1 prints a banner to stderr otherwise
        if options.codec.encoder_name not in av.codecs_available:
            raise UserError(f"this PyAV build has no {options.codec.encoder_name} encoder",
                            hint="pick another codec (h264, vp9, av1)")
        try:
            options.path.parent.mkdir(parents=True, exist_ok=True)
            container = av.open(
                str(options.path), mode="w",
                format="mp4" if options.container is Container.MP4 else options.container.value,
                options=options.container_options(),
            )
        except (OSError, av.FFmpegError) as exc:
            raise UserError(f"cannot write the recording to {options.path}: {exc}") from None
        rate = Fraction(options.fps).limit_denominator(1001)
        try:
            stream = container.add_stream(
                options.codec.encoder_name, rate=rate, options=options.encoder_options()
            )
            stream.width = self.width_px
            stream.height = self.height_px
            stream.pix_fmt = "yuv420p"
            stream.codec_context.thread_count = options.encoder_threads
            stream.codec_context.time_base = 1 / rate
            stream.codec_context.open()
        except (av.FFmpegError, ValueError) as exc:
            container.close()
            raise UserError(f"the {options.codec.value} encoder refused these settings: {exc}") from None
        self._rate = rate
        return container, stream

    def _run(self) -> None:
        last: av.VideoFrame | None = None
        next_slot = 0
        started_cpu_s = time.thread_time()
        error: str | None = None
        total: int | None = None
        while True:
            item = self._queue.get()
            if isinstance(item, _Finish):
                total = item.total_slots
                break
            try:
                if error is None and item.slot >= next_slot:  # slots only ever increase
                    picture = self._convert(item)
                    while next_slot < item.slot:  # missed slots show the previous picture
                        self._encode(last if last is not None else picture, next_slot)
                        self._repeated += 1
                        next_slot += 1
                    self._encode(picture, item.slot)
                    self._fresh += 1
                    last, next_slot = picture, item.slot + 1
            except Exception as exc:  # noqa: BLE001 - any failure ends the file, reported once
                error = f"{type(exc).__name__}: {exc}"
                self._failed = error
                log.exception("recording to %s failed", self.options.path)
            finally:
                with self._lock:
                    self._pending -= 1
                self._slots.release()
                self._cpu_s = time.thread_time() - started_cpu_s
        try:
            if error is None:
                while last is not None and total is not None and next_slot < total:
                    self._encode(last, next_slot)
                    self._repeated += 1
                    next_slot += 1
                for packet in self._stream.encode(None):
                    self._container.mux(packet)
        except Exception as exc:  # noqa: BLE001
            error = error or f"{type(exc).__name__}: {exc}"
            log.exception("finalizing %s failed", self.options.path)
        finally:
            try:
                self._container.close()
            except Exception as exc:  # noqa: BLE001 - the fragments already on disk still play
                error = error or f"closing the file failed: {exc}"
            self._cpu_s = time.thread_time() - started_cpu_s
            _LIVE_WORKERS.discard(self)
            self._future.set_result(EncoderOutcome(
                path=self.options.path, width_px=self.width_px, height_px=self.height_px,
                fps=self.options.fps, stats=self.stats(), error=error,
            ))

    def _encode(self, frame: av.VideoFrame, slot: int) -> None:
        frame.pts = slot
        frame.time_base = 1 / self._rate
        for packet in self._stream.encode(frame):
            self._container.mux(packet)
        self._written += 1

    def _convert(self, raw: RawFrame) -> av.VideoFrame:
        """Pixels → yuv420p at the output size, cropping an odd edge, scaling to fit and
        centring on black where the aspect differs (a window resized mid-recording)."""
        bpp = _BYTES_PER_PIXEL[raw.pix_fmt]
        flat = np.frombuffer(raw.pixels, np.uint8, count=raw.bytes_per_line * raw.height_px)
        array = np.lib.stride_tricks.as_strided(
            flat, shape=(raw.height_px, raw.width_px, bpp), strides=(raw.bytes_per_line, bpp, 1)
        )
        out_w, out_h = self.width_px, self.height_px
        if raw.width_px - raw.width_px % 2 == out_w and raw.height_px - raw.height_px % 2 == out_h:
            source = av.VideoFrame.from_numpy_buffer(array[:out_h, :out_w], format=raw.pix_fmt)
            return source.reformat(format="yuv420p")
        source = av.VideoFrame.from_numpy_buffer(array, format=raw.pix_fmt)
        scale = min(out_w / raw.width_px, out_h / raw.height_px)
        fit_w = min(out_w, max(2, round(raw.width_px * scale) // 2 * 2))
        fit_h = min(out_h, max(2, round(raw.height_px * scale) // 2 * 2))
        scaled = source.reformat(width=fit_w, height=fit_h, format="yuv420p",
                                 interpolation="BILINEAR")
        if (fit_w, fit_h) == (out_w, out_h):
            return scaled
        return _letterbox(scaled, out_w, out_h)


def _letterbox(picture: av.VideoFrame, out_w: int, out_h: int) -> av.VideoFrame:
    canvas = av.VideoFrame(out_w, out_h, "yuv420p")
    left = (out_w - picture.width) // 4 * 2
    top = (out_h - picture.height) // 4 * 2
    for index, black in enumerate((16, 128, 128)):
        shift = 0 if index == 0 else 1
        dst_plane, src_plane = canvas.planes[index], picture.planes[index]
        dst = np.frombuffer(dst_plane, np.uint8).reshape(dst_plane.height, dst_plane.line_size)
        src = np.frombuffer(src_plane, np.uint8).reshape(src_plane.height, src_plane.line_size)
        dst[:] = black
        y0, x0 = top >> shift, left >> shift
        dst[y0:y0 + src_plane.height, x0:x0 + src_plane.width] = src[:, :src_plane.width]
    return canvas


_LIVE_WORKERS: weakref.WeakSet[EncoderWorker] = weakref.WeakSet()


@atexit.register
def _finish_live_workers() -> None:
    """The interpreter is exiting with recordings open: close them as playable files."""
    for worker in list(_LIVE_WORKERS):
        log.warning("finalizing %s at exit", worker.options.path)
        worker.finish(None)
        worker.join(_FINISH_JOIN_TIMEOUT_S)
