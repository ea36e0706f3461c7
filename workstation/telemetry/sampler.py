"""Samplers: a blocking reader run at an interval on a thread of its own.

NVML and psutil block (one NVML snapshot of an H200 took ~25 ms), so each sampler
owns a one-thread executor; the event loop only awaits the result and emits it.
Ticks are scheduled on a fixed grid of ``time.monotonic()`` (no drift; a slow read
skips ticks rather than bunching them).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from psygnal import Signal

from workstation.telemetry.cadence import Cadence, cancel_and_wait
from workstation.telemetry.host import HostReader, HostSample
from workstation.telemetry.nvml import GpuSnapshot, GpuState, NvmlReader

log = logging.getLogger(__name__)

MIN_INTERVAL_S = 0.05


class ThreadedSampler:
    """Calls ``read()`` every ``interval_s`` on its own thread and emits ``sampled(result)``."""

    sampled = Signal(object)

    def __init__(self, name: str, *, interval_s: float = 1.0) -> None:
        self.name = name
        self._interval_s = max(MIN_INTERVAL_S, interval_s)
        self._executor: ThreadPoolExecutor | None = None
        self._task: asyncio.Task[None] | None = None
        self.latest: Any = None
        self.ticks = 0

    # subclasses supply these (they run on the sampler's thread)
    def _open(self) -> None:
        """Prepare the reader (blocking)."""

    def _read(self) -> Any:
        raise RuntimeError(f"{type(self).__name__} must define _read")

    def _close(self) -> None:
        """Release the reader (blocking)."""

    def _keep_going(self, result: Any) -> bool:
        """False ends the loop after emitting ``result`` (e.g. no GPU: nothing will change)."""
        return True

    @property
    def interval_s(self) -> float:
        return self._interval_s

    @interval_s.setter
    def interval_s(self, value: float) -> None:
        self._interval_s = max(MIN_INTERVAL_S, float(value))

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def _ensure_executor(self) -> ThreadPoolExecutor:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"ws-{self.name}")
        return self._executor

    async def _call(self, fn: Callable[[], Any]) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._ensure_executor(), fn)

    async def open(self) -> None:
        await self._call(self._open)

    async def read_once(self) -> Any:
        """One reading now (opens the reader first if needed); also emitted."""
        result = await self._call(self._read)
        self._publish(result)
        return result

    def _publish(self, result: Any) -> None:
        self.latest = result
        self.ticks += 1
        self.sampled.emit(result)

    async def start(self) -> None:
        if self.running:
            return
        await self.open()
        self._task = asyncio.create_task(self._run(), name=f"telemetry.{self.name}")

    async def _run(self) -> None:
        cadence = Cadence(self._interval_s)
        while True:
            try:
                result = await self._call(self._read)
            except Exception:  # a reader bug must not kill the meters; it is logged once per tick
                log.exception("%s sampler: read failed", self.name)
                result = None
            if result is not None:
                self._publish(result)
                if not self._keep_going(result):
                    return
            await cadence.wait()

    async def aclose(self) -> None:
        task, self._task = self._task, None
        await cancel_and_wait(task)
        if self._executor is not None:
            await self._call(self._close)
            self._executor.shutdown(wait=False)
            self._executor = None


class GpuSampler(ThreadedSampler):
    """NVML over every GPU. Emits :class:`GpuSnapshot`; with no GPU it emits one snapshot
    saying so and stops."""

    def __init__(
        self,
        *,
        interval_s: float = 1.0,
        engine_pid: Callable[[], int | None] = lambda: None,
        app_pid: int | None = None,
        reader: NvmlReader | None = None,
    ) -> None:
        super().__init__("nvml", interval_s=interval_s)
        self.reader = reader or NvmlReader()
        self._engine_pid = engine_pid
        self._app_pid = app_pid
        self._opened = False

    def _open(self) -> None:
        if not self._opened:
            self.reader.open()
            self._opened = True

    def _read(self) -> GpuSnapshot:
        self._open()
        return self.reader.read(engine_root_pid=self._engine_pid(), app_root_pid=self._app_pid)

    def _close(self) -> None:
        if self._opened:
            self.reader.close()
            self._opened = False

    def _keep_going(self, result: GpuSnapshot) -> bool:
        return result.state is GpuState.OK


class HostSampler(ThreadedSampler):
    """psutil: machine CPU and memory, the app's and the engine's process trees."""

    def __init__(
        self,
        *,
        interval_s: float = 1.0,
        engine_pid: Callable[[], int | None] = lambda: None,
        reader: HostReader | None = None,
    ) -> None:
        super().__init__("host", interval_s=interval_s)
        self._reader = reader
        self._engine_pid = engine_pid

    def _open(self) -> None:
        if self._reader is None:
            self._reader = HostReader()

    def _read(self) -> HostSample:
        self._open()
        assert self._reader is not None
        return self._reader.read(engine_pid=self._engine_pid())
