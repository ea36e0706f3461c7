"""How late the event loop runs, for the benchmarks that say how long the app's loop was held
(``ui_ingest.py``, ``record_bench.py``, ``guided_draft_checks.py``). Not a benchmark itself.

A task on the loop sleeps ``period_s`` at a time and records, per tick, how late it woke
(``late_s``) and the CPU time the loop's thread spent over the tick (``cpu_s``): on a shared
machine the system's load makes the loop late too, and the thread's CPU time is the part of
a late tick that was the loop's own work.

    lag = LoopLag(0.02)
    lag.start()
    ...                       # what is measured
    await lag.stop()          # the tick under way is recorded too
    percentile(lag.late_s, 99)
"""

from __future__ import annotations

import asyncio
import time


class LoopLag:
    def __init__(self, period_s: float) -> None:
        self.period_s = period_s
        self.late_s: list[float] = []
        """Per tick: how much later than ``period_s`` the sleep woke (never below 0)."""
        self.cpu_s: list[float] = []
        """Per tick: the loop thread's CPU time over it."""
        self._running = False
        self._task: asyncio.Task[None] | None = None

    def own_late_s(self) -> list[float]:
        """Per tick: the part of its lateness the loop's thread itself was busy (at most its
        CPU time over the tick); the rest is the system giving the CPU to other processes."""
        return [min(late, cpu) for late, cpu in zip(self.late_s, self.cpu_s, strict=True)]

    def clear(self) -> None:
        self.late_s.clear()
        self.cpu_s.clear()

    def start(self) -> None:
        self._running = True
        self._task = asyncio.get_running_loop().create_task(self._run(), name="bench:loop-lag")

    async def stop(self) -> None:
        """Ends the ticks once the one under way is done (and recorded)."""
        self._running = False
        if self._task is not None:
            await self._task
            self._task = None

    async def _run(self) -> None:
        while self._running:
            start, cpu = time.perf_counter(), time.thread_time()
            await asyncio.sleep(self.period_s)
            self.late_s.append(max(0.0, time.perf_counter() - start - self.period_s))
            self.cpu_s.append(time.thread_time() - cpu)


def percentile(values: list[float], q: float) -> float:
    """The value at rank ``q`` percent of ``values`` (the nearest one; 0.0 for none)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))]
