"""Ring-buffer time series for the meters' charts (pure Python, no I/O).

A :class:`TimeSeries` keeps the last ``capacity`` ``(t, value)`` pairs in two
``array('d')`` rings; appending is O(1) and never allocates once full. ``t`` is
whatever clock the caller uses (the meters use ``time.monotonic()`` seconds). A
missing reading is stored as NaN so charts show a gap instead of a made-up value.

:meth:`TimeSeries.times` / :meth:`TimeSeries.values` return ordered copies as
``array('d')``; a chart turns them into NumPy arrays without copying again with
``numpy.frombuffer(series.values())``.

A :class:`SeriesBook` holds one series per name (``"gpu0.power_w"``,
``"engine.local.generation_tokens_per_s"`` …), each with a unit, all sized for
the same horizon (15 minutes by default).
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

DEFAULT_HORIZON_S = 15 * 60.0


def capacity_for(horizon_s: float, interval_s: float) -> int:
    """Points needed to keep ``horizon_s`` of samples taken every ``interval_s``."""
    if horizon_s <= 0 or interval_s <= 0:
        raise ValueError("horizon_s and interval_s must be positive")
    return max(2, math.ceil(horizon_s / interval_s) + 1)


class TimeSeries:
    """The last ``capacity`` ``(t, value)`` pairs, oldest first when read."""

    __slots__ = ("name", "unit", "capacity", "_t", "_v", "_next", "_len")

    def __init__(self, capacity: int, *, name: str = "", unit: str = "") -> None:
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self.name = name
        self.unit = unit
        self.capacity = capacity
        self._t = array("d", bytes(8 * capacity))
        self._v = array("d", bytes(8 * capacity))
        self._next = 0  # slot the next append writes
        self._len = 0

    def __len__(self) -> int:
        return self._len

    def __repr__(self) -> str:
        return f"TimeSeries({self.name!r}, {self._len}/{self.capacity} points, unit={self.unit!r})"

    def append(self, t: float, value: float | None) -> None:
        """Add one point; ``None`` (no reading) is kept as NaN, a gap."""
        i = self._next
        self._t[i] = t
        self._v[i] = math.nan if value is None else float(value)
        self._next = (i + 1) % self.capacity
        if self._len < self.capacity:
            self._len += 1

    def clear(self) -> None:
        self._next = 0
        self._len = 0

    def _ordered(self, ring: array) -> array:
        if self._len < self.capacity:
            return ring[: self._len]
        return ring[self._next :] + ring[: self._next]

    def times(self) -> array:
        """Timestamps, oldest first (a copy)."""
        return self._ordered(self._t)

    def values(self) -> array:
        """Values, oldest first (a copy); NaN where there was no reading."""
        return self._ordered(self._v)

    def points(self) -> Iterator[tuple[float, float | None]]:
        """``(t, value)`` pairs oldest first, with ``None`` for gaps."""
        for t, v in zip(self.times(), self.values()):
            yield t, (None if math.isnan(v) else v)

    def last(self) -> tuple[float, float | None] | None:
        """The newest point, or None when empty."""
        if self._len == 0:
            return None
        i = (self._next - 1) % self.capacity
        v = self._v[i]
        return self._t[i], (None if math.isnan(v) else v)

    def since(self, t0: float) -> tuple[array, array]:
        """Times and values of the points with ``t >= t0``."""
        times = self.times()
        values = self.values()
        # times are appended in order, so find the first index by bisection
        lo, hi = 0, len(times)
        while lo < hi:
            mid = (lo + hi) // 2
            if times[mid] < t0:
                lo = mid + 1
            else:
                hi = mid
        return times[lo:], values[lo:]

    def stats_since(self, t0: float) -> SeriesStats | None:
        """Mean / min / max of the readings with ``t >= t0`` (gaps ignored)."""
        _, values = self.since(t0)
        real = [v for v in values if not math.isnan(v)]
        if not real:
            return None
        return SeriesStats(count=len(real), mean=sum(real) / len(real), min=min(real), max=max(real))


@dataclass(frozen=True, slots=True)
class SeriesStats:
    count: int
    mean: float
    min: float
    max: float


class SeriesBook:
    """Named series sharing one horizon; created on first use.

    ``wall_offset_s`` converts the book's clock to wall time (``t + wall_offset_s``),
    which the CSV export uses.
    """

    def __init__(
        self,
        *,
        horizon_s: float = DEFAULT_HORIZON_S,
        interval_s: float = 1.0,
        wall_offset_s: float = 0.0,
    ) -> None:
        self.horizon_s = horizon_s
        self.interval_s = interval_s
        self.wall_offset_s = wall_offset_s
        self._series: dict[str, TimeSeries] = {}

    def __contains__(self, name: object) -> bool:
        return name in self._series

    def __len__(self) -> int:
        return len(self._series)

    def names(self) -> list[str]:
        return sorted(self._series)

    def get(self, name: str) -> TimeSeries | None:
        return self._series.get(name)

    def series(self, name: str, *, unit: str = "", interval_s: float | None = None) -> TimeSeries:
        """The series called ``name``, created with room for the horizon if new."""
        found = self._series.get(name)
        if found is None:
            cap = capacity_for(self.horizon_s, interval_s or self.interval_s)
            found = TimeSeries(cap, name=name, unit=unit)
            self._series[name] = found
        return found

    def record(
        self,
        t: float,
        values: Mapping[str, float | None],
        *,
        units: Mapping[str, str] | None = None,
        interval_s: float | None = None,
    ) -> None:
        """Append one point at time ``t`` to each named series."""
        for name, value in values.items():
            unit = units.get(name, "") if units else ""
            self.series(name, unit=unit, interval_s=interval_s).append(t, value)

    def clear(self) -> None:
        self._series.clear()
