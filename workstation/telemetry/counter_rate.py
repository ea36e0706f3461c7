"""A counter's rate over a trailing window of its readings, per key (an endpoint's
``vllm:generation_tokens_total``, read at each scrape).

The scrape's own rate covers one interval (1 s): on a CPU engine tokens come in bursts
between prefills of several seconds, so one interval often reads 0 while the panes, whose
streamed rate covers the stream counters' window (5 s), still show tokens. Reading the
engine's counter over that same window makes the two agree.
"""

from __future__ import annotations

from collections import deque


class CounterRate:
    def __init__(self, window_s: float) -> None:
        self.window_s = window_s
        self._readings: dict[str, deque[tuple[float, float]]] = {}

    def add(self, key: str, t_mono: float, total: float) -> float | None:
        """A reading of ``key``'s counter; returns its rate per second over the window (less
        while fewer seconds of readings exist; None with one reading). A counter that went
        down (the engine restarted) starts the window again."""
        readings = self._readings.setdefault(key, deque())
        if readings and t_mono <= readings[-1][0]:  # the same reading again
            return self.rate(key)
        if readings and total < readings[-1][1]:
            readings.clear()
        readings.append((t_mono, total))
        while len(readings) > 2 and readings[1][0] <= t_mono - self.window_s:
            readings.popleft()  # the oldest kept is the newest at least a window old
        return self.rate(key)

    def rate(self, key: str) -> float | None:
        readings = self._readings.get(key)
        if not readings or len(readings) < 2:
            return None
        (t0, v0), (t1, v1) = readings[0], readings[-1]
        return (v1 - v0) / (t1 - t0)

    def drop(self, key: str) -> None:
        self._readings.pop(key, None)
