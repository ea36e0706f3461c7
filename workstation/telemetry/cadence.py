"""Steady cadence for samplers: ticks on the monotonic clock that skip (never bunch up)
after an overrun, and the one way to end such a loop's task."""

from __future__ import annotations

import asyncio
import contextlib
import time


class Cadence:
    """``await cadence.wait()`` sleeps until the next tick of a fixed interval."""

    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self._next_t = time.monotonic()

    async def wait(self) -> None:
        self._next_t += self.interval_s
        now = time.monotonic()
        if self._next_t < now:  # overran: skip the missed ticks
            self._next_t = now + self.interval_s - ((now - self._next_t) % self.interval_s)
        await asyncio.sleep(self._next_t - now)


async def cancel_and_wait(task: asyncio.Task | None) -> None:
    """Cancel a loop's task and wait until it has ended."""
    if task is None:
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
