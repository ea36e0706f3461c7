"""The Tuning dock's jobs row: Capture (record a traffic shape from agent sessions on the live
engine), Bench (load the live engine and store the result) and Tune (trial engines, one change
at a time, within a budget), each with its progress — a bar
over the job's planned time and the job's own last message — and Cancel. One job at a time;
it runs as a task of the window's ``TaskOwner``; what it made lands in the dock's tabs (the
dock reloads the store when ``finished`` fires).

The jobs themselves are Qt-free (:class:`~workstation.tuning.live_jobs.LiveJobs`); the app
hands them over with :meth:`set_jobs` once the engine serves."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Protocol

from PySide6.QtCore import QTimer, Signal
from PySide6.QtWidgets import QHBoxLayout, QLabel, QProgressBar, QPushButton, QWidget

from workstation.core.errors import UserError
from workstation.ui.icons_fallback import safe_icon
from workstation.ui.tasks import TaskOwner

log = logging.getLogger(__name__)

TICK_MS = 250


class Jobs(Protocol):
    capture_s: float
    bench_s: float
    tune_s: float

    async def capture(self, say: Any) -> str: ...
    async def bench(self, say: Any) -> str: ...
    async def tune(self, say: Any) -> str: ...


WORDS = {"capture": "capturing…", "bench": "benchmarking…", "tune": "tuning…"}


class TuningJobs(QWidget):
    finished = Signal(str, bool)
    """(what the job said at its end, whether it made something)."""

    def __init__(self, tasks: TaskOwner, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._tasks = tasks
        self._jobs: Jobs | None = None
        self.task: asyncio.Task[Any] | None = None
        self._started = 0.0
        self._planned_s = 1.0
        self._cancelled = False
        row = QHBoxLayout(self)
        row.setContentsMargins(4, 2, 4, 2)
        self.capture_button = QPushButton(safe_icon("record"), "Capture shape")
        self.bench_button = QPushButton(safe_icon("meters"), "Bench live engine")
        self.tune_button = QPushButton(safe_icon("tuning"), "Tune")
        self.cancel_button = QPushButton(safe_icon("stop"), "Cancel")
        self.progress = QProgressBar()
        self.progress.setRange(0, 1000)
        self.progress.setTextVisible(False)
        self.progress.setMaximumWidth(160)
        self.status = QLabel("")
        self.status.setWordWrap(False)
        for w in (self.capture_button, self.bench_button, self.tune_button, self.progress, self.cancel_button):
            row.addWidget(w)
        row.addWidget(self.status, 1)
        self.capture_button.clicked.connect(lambda: self.start("capture"))
        self.bench_button.clicked.connect(lambda: self.start("bench"))
        self.tune_button.clicked.connect(lambda: self.start("tune"))
        self.cancel_button.clicked.connect(self.cancel)
        self._timer = QTimer(self)
        self._timer.setInterval(TICK_MS)
        self._timer.timeout.connect(self._tick)
        self.set_jobs(None, "the engine is not serving yet")

    def set_jobs(self, jobs: Jobs | None, reason: str = "") -> None:
        self._jobs = jobs
        if jobs is not None:
            self.capture_button.setToolTip(f"Run agent sessions on the live engine for {jobs.capture_s:.0f} s and "
                                           "record their traffic shape (the engine serves them beside yours)")
            self.bench_button.setToolTip(f"Load the live engine for {jobs.bench_s:.0f} s with the newest shape's "
                                         "workload and store the result (your sessions slow down meanwhile)")
            self.tune_button.setToolTip(f"Try one engine change after another on trial engines for up to "
                                        f"{jobs.tune_s / 60:.0f} min (they start beside the live engine: they need "
                                        "free GPU memory) and keep the run")
        else:
            self.status.setText(f"Capture and Bench: {reason}")
        self._sync()

    @property
    def running(self) -> bool:
        return self.task is not None and not self.task.done()

    def start(self, kind: str) -> asyncio.Task[Any] | None:
        jobs = self._jobs
        if jobs is None or self.running:
            return None
        self._cancelled = False
        self._planned_s = max(1.0, {"capture": jobs.capture_s, "bench": jobs.bench_s, "tune": jobs.tune_s}[kind])
        self._started = time.monotonic()
        self.progress.setValue(0)
        self.status.setText(WORDS[kind])
        self.task = self._tasks.spawn(self._run(kind, jobs), f"tuning-{kind}")
        self._timer.start()
        self._sync()
        return self.task

    def cancel(self) -> None:
        if self.running:
            assert self.task is not None
            self._cancelled = True
            self.task.cancel()

    async def _run(self, kind: str, jobs: Jobs) -> None:
        job = {"capture": jobs.capture, "bench": jobs.bench, "tune": jobs.tune}[kind]
        made = False
        try:
            said = await job(self._say)
            made = True
        except UserError as exc:
            said = f"{kind} failed: {exc}"
        except asyncio.CancelledError:
            if not self._cancelled:
                raise  # the window closes
            said = f"{kind} cancelled; nothing was stored"
        except Exception as exc:  # noqa: BLE001 - a job's own failure (the endpoint refused …) is its result
            log.warning("tuning %s failed", kind, exc_info=True)
            said = f"{kind} failed: {exc}"
        finally:
            self._timer.stop()
        self.progress.setValue(1000 if made else 0)
        self.status.setText(said)
        self.task = None
        self._sync()
        self.finished.emit(said, made)

    def _say(self, message: str) -> None:
        self.status.setText(message.strip().splitlines()[0] if message.strip() else self.status.text())

    def _tick(self) -> None:
        done = (time.monotonic() - self._started) / self._planned_s
        self.progress.setValue(min(990, int(done * 1000)))  # the last bit is the job's own wrap-up

    def _sync(self) -> None:
        idle = self._jobs is not None and not self.running
        for button in (self.capture_button, self.bench_button, self.tune_button):
            button.setEnabled(idle)
        self.cancel_button.setEnabled(self.running)
        self.progress.setVisible(self.running or self.progress.value() > 0)
