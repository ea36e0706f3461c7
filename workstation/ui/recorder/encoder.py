"""The encoder: pictures in, a playable video file out. Runs in its own process.

Qt-free. Time is counted in *slots*: slot ``k`` is the frame shown from ``k / fps`` seconds
after the start, on the monotonic clock. The recorder grabs a picture for a slot and sends
it; slots that got no picture (the GUI thread was late, or a grab was dropped because the
encoder was behind) are filled by **repeating** the previous picture, so the video always
holds one frame per slot and never stretches or shrinks time.

Why a process and not a thread: PyAV releases the GIL inside libswscale and the encoder,
but every frame still crosses into Python a dozen times, and a busy GUI thread holds the
GIL for up to the 5 ms switch interval each time — measured, an encoder thread that
managed 186 frames/s beside an idle main thread managed 34 beside a busy one. In its own
process it competes for CPU only, and when the app dies (even by SIGKILL) it reads EOF on
its control pipe and still closes the file properly.

The pictures arrive through :class:`~workstation.ui.recorder.ring.FrameRing` (no copy
beyond the grab itself) and are wrapped with ``VideoFrame.from_numpy_buffer``.
"""

from __future__ import annotations

import logging
import os
import signal
import struct
import time
from dataclasses import dataclass, replace
from fractions import Fraction
from pathlib import Path

import av
import numpy as np

from workstation.core.errors import UserError
from workstation.ui.recorder.options import Container, RecordingOptions, VideoCodec
from workstation.ui.recorder.ring import (
    COUNTER_BYTES,
    COUNTER_CONSUMED,
    COUNTER_CPU_NS,
    COUNTER_FRESH,
    COUNTER_REPEATED,
    COUNTER_WRITTEN,
    FrameRing,
)

log = logging.getLogger(__name__)

PIX_FMTS = ("bgra", "argb", "rgba", "rgb24")
_BYTES_PER_PIXEL = {"bgra": 4, "argb": 4, "rgba": 4, "rgb24": 3}
FRAME_MESSAGE = struct.Struct("<cqqiiiB")
"""b"F", ring index, slot, width, height, bytes per line, pixel format index."""
END_MESSAGE = struct.Struct("<cq")
"""b"E", total slots (-1: no padding)."""


@dataclass(frozen=True, slots=True)
class EncoderStats:
    frames_written: int
    """Frames in the file: one per slot."""
    frames_fresh: int
    """Frames that carry a newly grabbed picture."""
    frames_repeated: int
    """Slots filled with the previous picture because no fresh one came in time."""
    frames_dropped: int
    """Grabs skipped because the encoder was behind (counted by the GUI side)."""
    queue_peak: int
    """Most pictures ever waiting for the encoder at once."""
    encoder_cpu_s: float
    """CPU time of the encoder process (all its threads)."""
    bytes_written: int


@dataclass(frozen=True, slots=True)
class EncoderOutcome:
    path: Path
    width_px: int
    height_px: int
    fps: float
    stats: EncoderStats
    error: str | None = None
    """Why the file may be incomplete, or None when it was finalized normally."""

    @property
    def ok(self) -> bool:
        return self.error is None


class EncoderCore:
    """Container + stream + conversion. ``__init__`` opens the file; :meth:`add` takes a
    picture for a slot; :meth:`close` pads to the final slot, flushes and closes."""

    def __init__(self, options: RecordingOptions, width_px: int, height_px: int) -> None:
        if width_px % 2 or height_px % 2:
            raise ValueError(f"yuv420p needs even sizes, got {width_px}×{height_px}")
        self.options, self.width_px, self.height_px = options, width_px, height_px
        self.written = self.fresh = self.repeated = 0
        self._last: av.VideoFrame | None = None
        self._next_slot = 0
        self._rate = Fraction(options.fps).limit_denominator(1001)
        try:
            self._container, self._stream = self._open()
        except UserError:
            if options.codec is not VideoCodec.H264 or options.container is Container.WEBM:
                raise
            # A bundle without GPL code carries no working x264: record VP9 instead.
            logging.getLogger(__name__).warning("H.264 encoder unavailable; recording VP9 instead")
            self.options = replace(options, codec=VideoCodec.VP9)
            self._container, self._stream = self._open()

    def _open(self):
        options = self.options
        if options.codec.encoder_name not in av.codecs_available:
            raise UserError(f"this PyAV build has no {options.codec.encoder_name} encoder",
                            hint="pick another codec (h264, vp9, av1)")
        try:
            container = av.open(
                str(options.path), mode="w",
                format="mp4" if options.container is Container.MP4 else options.container.value,
                options=options.container_options(),
            )
        except (OSError, av.FFmpegError) as exc:
            raise UserError(f"cannot write the recording to {options.path}: {exc}") from None
        try:
            stream = container.add_stream(options.codec.encoder_name, rate=self._rate,
                                          options=options.encoder_options())
            stream.width, stream.height, stream.pix_fmt = self.width_px, self.height_px, "yuv420p"
            stream.codec_context.thread_count = options.encoder_threads
            stream.codec_context.time_base = 1 / self._rate
            stream.codec_context.open()
        except (av.FFmpegError, ValueError) as exc:
            container.close()
            raise UserError(f"the {options.codec.value} encoder refused these settings: {exc}") from None
        return container, stream

    def add(self, slot: int, picture: av.VideoFrame) -> None:
        """Encode ``picture`` (already yuv420p at the output size) for ``slot``; earlier
        slots that got nothing show the previous picture. Slots must increase."""
        if slot < self._next_slot:
            return
        while self._next_slot < slot:
            self._encode(self._last if self._last is not None else picture, self._next_slot)
            self.repeated += 1
        self._encode(picture, slot)
        self.fresh += 1
        self._last = picture

    def close(self, total_slots: int | None) -> None:
        try:
            while self._last is not None and total_slots is not None and self._next_slot < total_slots:
                self._encode(self._last, self._next_slot)
                self.repeated += 1
            for packet in self._stream.encode(None):
                self._container.mux(packet)
        finally:
            self._container.close()

    def _encode(self, frame: av.VideoFrame, slot: int) -> None:
        frame.pts = slot
        frame.time_base = 1 / self._rate
        for packet in self._stream.encode(frame):
            self._container.mux(packet)
        self.written += 1
        self._next_slot = slot + 1

    def convert(self, pixels, width_px: int, height_px: int, bytes_per_line: int,
                pix_fmt: str) -> av.VideoFrame:
        """Pixels → yuv420p at the output size, cropping an odd edge, scaling to fit and
        centring on black where the aspect differs (a window resized mid-recording)."""
        bpp = _BYTES_PER_PIXEL[pix_fmt]
        flat = np.frombuffer(pixels, np.uint8, count=bytes_per_line * height_px)
        array = np.lib.stride_tricks.as_strided(
            flat, shape=(height_px, width_px, bpp), strides=(bytes_per_line, bpp, 1))
        out_w, out_h = self.width_px, self.height_px
        if width_px - width_px % 2 == out_w and height_px - height_px % 2 == out_h:
            return av.VideoFrame.from_numpy_buffer(array[:out_h, :out_w], format=pix_fmt).reformat(
                format="yuv420p")
        source = av.VideoFrame.from_numpy_buffer(array, format=pix_fmt)
        scale = min(out_w / width_px, out_h / height_px)
        fit_w = min(out_w, max(2, round(width_px * scale) // 2 * 2))
        fit_h = min(out_h, max(2, round(height_px * scale) // 2 * 2))
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


class _Terminated(Exception):
    pass


def _on_sigterm(signum, frame) -> None:
    raise _Terminated


def encoder_main(ring: FrameRing, control, events, options: RecordingOptions,
                 width_px: int, height_px: int) -> None:
    """Entry point of the encoder process. Reads frame messages until the end message or
    EOF (the app is gone), then closes the file and reports the outcome."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the app's to handle
    signal.signal(signal.SIGTERM, _on_sigterm)    # a stop of the whole group: close the file
    if options.codec is VideoCodec.AV1:
        os.environ.setdefault("SVT_LOG", "1")  # SVT-AV1 prints a banner to stderr otherwise
    if options.encoder_nice and hasattr(os, "nice"):
        os.nice(options.encoder_nice)
    counters = ring.counters
    try:
        core = EncoderCore(options, width_px, height_px)
    except Exception as exc:  # noqa: BLE001 - reported to the app as a plain message
        events.send(("failed", exc.describe() if isinstance(exc, UserError) else f"{type(exc).__name__}: {exc}"))
        return
    events.send(("ready",))
    total: int | None = None
    error: str | None = None
    started_cpu = time.process_time()

    def take(message: bytes) -> None:
        _, index, slot, width, height, stride, fmt = FRAME_MESSAGE.unpack(message)
        pixels = ring.slot(index, stride * height)
        try:
            picture = core.convert(pixels, width, height, stride, PIX_FMTS[fmt])
        finally:
            del pixels
            counters[COUNTER_CONSUMED] += 1  # the slot is free again
        core.add(slot, picture)
        counters[COUNTER_WRITTEN] = core.written
        counters[COUNTER_FRESH] = core.fresh
        counters[COUNTER_REPEATED] = core.repeated
        counters[COUNTER_CPU_NS] = int((time.process_time() - started_cpu) * 1e9)

    try:
        while True:
            try:
                message = control.recv_bytes()
            except EOFError:
                break  # the app went away without saying: close the file as it is
            if message[:1] == b"E":
                _, requested = END_MESSAGE.unpack(message)
                total = requested if requested >= 0 else None
                break
            take(message)
    except _Terminated:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        log.warning("encoder stopped by SIGTERM: closing %s", options.path)
        try:  # pictures already handed over are in the ring: keep them
            for _ in range(ring.slots):
                if not control.poll(0):
                    break
                message = control.recv_bytes()
                if message[:1] != b"F":
                    break
                take(message)
        except (EOFError, OSError, ValueError):
            pass
    except Exception as exc:  # noqa: BLE001 - any failure ends the file, reported once
        error = f"{type(exc).__name__}: {exc}"
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # closing must not be interrupted
    try:
        core.close(total if error is None else None)
    except Exception as exc:  # noqa: BLE001 - the fragments already written still play
        error = error or f"closing the file failed: {exc}"
    size = options.path.stat().st_size if options.path.exists() else 0
    counters[COUNTER_WRITTEN], counters[COUNTER_FRESH] = core.written, core.fresh
    counters[COUNTER_REPEATED], counters[COUNTER_BYTES] = core.repeated, size
    counters[COUNTER_CPU_NS] = int((time.process_time() - started_cpu) * 1e9)
    try:
        events.send(("done", error))
    except (BrokenPipeError, OSError):
        pass  # nobody is listening any more; the file is closed all the same
