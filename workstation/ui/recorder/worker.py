"""The app's handle on its encoder process (Qt-free): start it, lend it frame slots,
finish it, and learn how it went.

The GUI thread calls :meth:`EncoderWorker.reserve` (a free ring slot, or None — the
picture is then dropped and counted, and nothing is grabbed), writes the picture into
:meth:`EncoderWorker.slot_buffer`, and :meth:`EncoderWorker.commit`\\ s it with its slot
number: one small message on a pipe. A reader thread (blocked in ``recv``, it costs
nothing) turns the process's "ready" and "done" into callbacks and a future.

The process is started with multiprocessing's *spawn* context (no fork of a Qt process;
works in frozen bundles that call ``multiprocessing.freeze_support()``).
"""

from __future__ import annotations

import atexit
import logging
import multiprocessing
import multiprocessing.process
import sys
import threading
import types
import weakref
from collections.abc import Callable
from concurrent.futures import Future

from workstation.core.errors import UserError
from workstation.ui.recorder.encoder import (
    END_MESSAGE,
    FRAME_MESSAGE,
    PIX_FMTS,
    EncoderOutcome,
    EncoderStats,
    encoder_main,
)
from workstation.ui.recorder.options import RecordingOptions
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

MAX_RING_BYTES = 512 * 1024 * 1024
"""The ring never takes more memory than this, whatever ``queue_s`` asks."""
EXIT_JOIN_TIMEOUT_S = 30.0


def _check_writable(options: RecordingOptions) -> None:
    """Fail at once, on the caller's thread, for the problems the user can see."""
    import av  # the app already depends on PyAV; the check needs its codec list

    if options.codec.encoder_name not in av.codecs_available:
        raise UserError(f"this PyAV build has no {options.codec.encoder_name} encoder",
                        hint="pick another codec (h264, vp9, av1)")
    path = options.path
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        existed = path.exists()
        with open(path, "ab"):
            pass
        if not existed:
            path.unlink()
    except OSError as exc:
        raise UserError(f"cannot write the recording to {path}: {exc.strerror or exc}") from None


class EncoderWorker:
    """One encoder process for one file of ``width_px × height_px``; pictures of up to
    ``max_picture_bytes`` each."""

    def __init__(self, options: RecordingOptions, width_px: int, height_px: int, *,
                 max_picture_bytes: int, on_ready: Callable[[], None] | None = None,
                 on_done: Callable[[EncoderOutcome], None] | None = None) -> None:
        _check_writable(options)
        self.options, self.width_px, self.height_px = options, width_px, height_px
        slots = max(2, round(options.queue_s * options.fps))
        slots = max(2, min(slots, MAX_RING_BYTES // max(1, max_picture_bytes)))
        self.ring = FrameRing(slots, max_picture_bytes)
        self._on_ready, self._on_done = on_ready, on_done
        self._future: Future[EncoderOutcome] = Future()
        self._produced = 0
        self._dropped = 0
        self._queue_peak = 0
        self._ready = False
        self._finish_sent = False
        self._failed: str | None = None
        context = multiprocessing.get_context("spawn")
        control_recv, self._control = context.Pipe(duplex=False)
        self._events, events_send = context.Pipe(duplex=False)
        self._process = context.Process(
            target=encoder_main, name=f"workstation-encoder:{options.path.name}", daemon=True,
            args=(self.ring, control_recv, events_send, options, width_px, height_px),
        )
        try:
            _start_without_main(self._process)
        except OSError as exc:
            self.ring.close()
            raise UserError(f"cannot start the video encoder process: {exc}") from None
        control_recv.close()  # only the child holds these ends now, so EOF reaches it
        events_send.close()
        self._reader = threading.Thread(target=self._read_events, daemon=True,
                                        name=f"recorder-events:{options.path.name}")
        self._reader.start()
        _LIVE_WORKERS.add(self)

    # ----- GUI side -----
    @property
    def ready(self) -> bool:
        return self._ready

    @property
    def failed(self) -> str | None:
        return self._failed

    @property
    def pid(self) -> int | None:
        return self._process.pid

    def reserve(self) -> int | None:
        """A free ring slot for the next picture, or None (counted as dropped)."""
        if self._finish_sent or self._failed is not None:
            return None
        waiting = self._produced - int(self.ring.counters[COUNTER_CONSUMED])
        if waiting >= self.ring.slots:
            self._dropped += 1
            return None
        self._queue_peak = max(self._queue_peak, waiting + 1)
        return self._produced % self.ring.slots

    def slot_buffer(self, index: int, nbytes: int) -> memoryview:
        if nbytes > self.ring.slot_bytes:
            raise ValueError(f"picture of {nbytes} bytes does not fit a {self.ring.slot_bytes}-byte slot")
        return self.ring.slot(index, nbytes)

    def commit(self, index: int, slot: int, width_px: int, height_px: int,
               bytes_per_line: int, pix_fmt: str) -> bool:
        """Hand the picture written into ``index`` over for frame ``slot``."""
        try:
            self._control.send_bytes(FRAME_MESSAGE.pack(
                b"F", index, slot, width_px, height_px, bytes_per_line, PIX_FMTS.index(pix_fmt)))
        except (BrokenPipeError, OSError) as exc:
            self._failed = self._failed or f"the encoder process is gone ({exc})"
            return False
        self._produced += 1
        return True

    def finish(self, total_slots: int | None = None) -> Future[EncoderOutcome]:
        """Pad to ``total_slots`` frames (None: none), flush and close the file. Safe to
        call more than once; the same future every time."""
        if not self._finish_sent:
            self._finish_sent = True
            try:
                self._control.send_bytes(END_MESSAGE.pack(b"E", -1 if total_slots is None else total_slots))
            except (BrokenPipeError, OSError):
                pass
            self._control.close()
        return self._future

    def join(self, timeout_s: float | None = None) -> EncoderOutcome | None:
        self._reader.join(timeout_s)
        return self._future.result() if self._future.done() else None

    def close(self) -> None:
        """Free the shared memory once the encoder is done (the GUI thread calls this
        after its last use of a slot)."""
        if self._future.done():
            self.ring.close()

    def stats(self) -> EncoderStats:
        counters = self.ring.counters
        size = int(counters[COUNTER_BYTES])
        if not size:
            try:
                size = self.options.path.stat().st_size
            except OSError:
                size = 0
        return EncoderStats(
            frames_written=int(counters[COUNTER_WRITTEN]), frames_fresh=int(counters[COUNTER_FRESH]),
            frames_repeated=int(counters[COUNTER_REPEATED]), frames_dropped=self._dropped,
            queue_peak=self._queue_peak, encoder_cpu_s=int(counters[COUNTER_CPU_NS]) / 1e9,
            bytes_written=size,
        )

    # ----- reader thread -----
    def _read_events(self) -> None:
        error: str | None = None
        done = False
        try:
            while not done:
                try:
                    event = self._events.recv()
                except (EOFError, OSError):
                    break
                if event[0] == "ready":
                    self._ready = True
                    if self._on_ready is not None:
                        self._on_ready()
                elif event[0] == "failed":
                    error = event[1]
                    self._failed = error
                elif event[0] == "done":
                    error, done = event[1], True
        finally:
            self._process.join(EXIT_JOIN_TIMEOUT_S)
            if not done and error is None:
                code = self._process.exitcode
                error = f"the encoder process ended unexpectedly (exit code {code})"
            if error is not None:
                self._failed = error
            outcome = EncoderOutcome(path=self.options.path, width_px=self.width_px,
                                     height_px=self.height_px, fps=self.options.fps,
                                     stats=self.stats(), error=error)
            self._events.close()
            _LIVE_WORKERS.discard(self)
            self._future.set_result(outcome)
            if self._on_done is not None:
                self._on_done(outcome)


def _start_without_main(process: multiprocessing.process.BaseProcess) -> None:
    """Start a spawned process without it re-running the app's ``__main__``.

    Spawn normally re-imports the parent's main script in the child (and refuses to start
    from an unguarded one); the encoder needs nothing from it, and a script without an
    ``if __name__ == "__main__"`` guard would run again. So the child is spawned while
    ``sys.modules["__main__"]`` is a bare module for the few milliseconds of ``start()``.
    Frozen bundles are unaffected: their child runs through ``freeze_support()``.
    """
    real_main = sys.modules["__main__"]
    sys.modules["__main__"] = types.ModuleType("__main__")
    try:
        process.start()
    finally:
        sys.modules["__main__"] = real_main


_LIVE_WORKERS: weakref.WeakSet[EncoderWorker] = weakref.WeakSet()


@atexit.register
def _finish_live_workers() -> None:
    """The interpreter is exiting with recordings open: close them as complete files.
    (Registered after multiprocessing's own exit handler, so it runs before it.)"""
    for worker in list(_LIVE_WORKERS):
        log.warning("finalizing %s at exit", worker.options.path)
        worker.finish(None)
        worker.join(EXIT_JOIN_TIMEOUT_S)
