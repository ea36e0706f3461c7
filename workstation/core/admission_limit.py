"""Adaptive admission: how many sessions may generate at once on one engine, from what the
engine reports about itself. Pure rules; the fleet feeds it the engine's ``/metrics`` as the
meters' scraper reads them (``fleet/admission.py``).

What the engine says decides one of four verdicts (the reason shown is the first found):

- **over** — the limit comes down: its recent time to first token is over the user's target
  (p95 over the last seconds, with a few observations behind it: "slow first token: p95
  2.4 s > 2 s"), or it preempted requests since the last reading (KV cache exhausted:
  work is thrown away and recomputed, "engine full: KV 99 %, 3 preempted"), or requests
  queue inside it (``waiting`` at least a quarter of those running, and at least 4: "engine
  queue: 9 waiting", "engine full: KV 97 %, 9 waiting");
- **full** — its KV cache is nearly used up (``kv_full_pct``, 95 %: "engine full: KV
  97 %"). Its batch is as full as it gets; more sessions would only wait inside it, where
  the fleet can no longer put the watched session first. The limit grows by one only while
  nothing waits inside the engine (so one request is always ready when another ends), and
  otherwise holds;
- **room** — the limit may grow: the KV cache is below ``kv_room_pct``, at most one request
  waits inside it (one that arrived between two scheduler steps), and the recent TTFT p95
  is under ¾ of the target, measured on at least ``min_ttft_observations`` first tokens —
  while sessions generate on it, no measured first token means a slow engine, not an idle
  one ("first tokens pending"), and the limit holds;
- **steady** — in between: the limit holds.

The limit grows additively and shrinks by how bad it is, as TCP's congestion window and
Netflix's concurrency limits do: starting at ``start``, it doubles on each reading with
room while the limit is what holds sessions back (slow start), until the engine is first
full or over; from then on it grows by an eighth (at least one) per reading with room. It
grows at most once per ``hold_s / 2``: the recent TTFT must have had time to show what the
last growth did (slow start doubles per round trip, not per reading — on the CPU engine,
doubling per reading had admitted all 64 sessions before the first token came back). A
queue or preemptions step it down by an eighth of what was in flight (at most once per
``hold_s / 2``); a first token slower than the target is a broken promise, so it is cut to
¾ of what was in flight (at most once per ``hold_s``: the TTFT window lags, a cut shows in
it only later). Being a little over costs only waiting; being under costs throughput — so
a full KV cache alone holds the limit rather than cutting it. It stays between
``min_limit`` and the fleet's cap (the ceiling). Without readings (an endpoint with no
``/metrics``, or one that does not answer) the ceiling applies, and the window says so.

Hand-written: the Python packages for adaptive concurrency found are 0.1 releases for
rate-limited web APIs and know nothing of KV caches or TTFT; the rule itself is a few lines.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum


@dataclass(frozen=True, slots=True)
class EngineLoad:
    """What one engine says about how full it is; None where it does not say."""

    t_s: float
    """When it was read (monotonic seconds)."""
    up: bool = True
    waiting: int | None = None
    """Requests queued inside the engine (``vllm:num_requests_waiting``)."""
    running: int | None = None
    kv_usage_pct: float | None = None
    ttft_p95_s: float | None = None
    """Time to first token, p95 over the recent window."""
    ttft_count: int = 0
    """Observations behind ``ttft_p95_s``."""
    preemptions_total: float | None = None
    """Requests the engine preempted since it started (a counter)."""
    has_metrics: bool = True
    """False: the endpoint answers but has no ``/metrics`` (an outside API): nothing to steer by."""


@dataclass(frozen=True, slots=True)
class AdmissionTarget:
    """What the user asks of the engine, and the controller's constants."""

    ttft_p95_s: float = 2.0
    kv_full_pct: float = 95.0
    kv_room_pct: float = 85.0
    start: int = 4
    min_limit: int = 1
    hold_s: float = 5.0
    stale_s: float = 5.0
    """A reading older than this is no reading."""
    min_ttft_observations: int = 3

    def __post_init__(self) -> None:
        if not self.ttft_p95_s > 0:
            raise ValueError("the TTFT target must be a positive number of seconds")
        if not 0 < self.kv_room_pct <= self.kv_full_pct <= 100:
            raise ValueError("KV thresholds must satisfy 0 < room ≤ full ≤ 100")
        if self.start < 1 or self.min_limit < 1:
            raise ValueError("limits are at least 1")


class Verdict(str, Enum):
    ROOM = "room"
    OVER = "over"
    FULL = "full"
    STEADY = "steady"
    BLIND = "blind"
    """No (recent) reading: the ceiling applies."""


class OverCause(Enum):
    """Why an engine is over what it can take; it picks the cut."""

    SLOW_FIRST_TOKEN = "slow first token"
    """A broken promise: cut to ¾ of what was in flight, at most once per ``hold_s``."""
    PREEMPTING = "preempting"
    """KV cache exhausted: step down by an eighth, at most once per ``hold_s / 2``."""
    QUEUE = "queue"
    """Requests queue inside the engine: as for preempting."""


@dataclass(frozen=True, slots=True)
class Overload:
    cause: OverCause
    reason: str
    """Plain words for the window ("engine full: KV 99 %, 3 preempted")."""


@dataclass(frozen=True, slots=True)
class LimitDecision:
    limit: int
    verdict: Verdict
    reason: str
    """Plain words for the window ("engine full: KV 97 %"); empty when there is nothing to say."""


def _pct(value: float) -> str:
    return f"{value:.0f} %"


def _seconds(value: float) -> str:
    return f"{value:.1f} s" if value < 10 else f"{value:.0f} s"


def overload(load: EngineLoad, target: AdmissionTarget, preempted: float = 0) -> Overload | None:
    """Why the engine is over what it can take (the limit comes down), or None."""
    if (load.ttft_p95_s is not None and load.ttft_count >= target.min_ttft_observations
            and load.ttft_p95_s > target.ttft_p95_s):
        return Overload(OverCause.SLOW_FIRST_TOKEN,
                        f"slow first token: p95 {_seconds(load.ttft_p95_s)} > {_seconds(target.ttft_p95_s)}")
    full = full_reason(load, target)
    if preempted > 0:
        return Overload(OverCause.PREEMPTING, f"{full}, {preempted:.0f} preempted" if full else
                        f"engine preempting: {preempted:.0f} request{'s' if preempted != 1 else ''}")
    if load.waiting is not None and load.waiting >= max(4, math.ceil((load.running or 0) / 4)):
        return Overload(OverCause.QUEUE, f"{full}, {load.waiting} waiting" if full else
                        f"engine queue: {load.waiting} waiting")
    return None


def full_reason(load: EngineLoad, target: AdmissionTarget) -> str | None:
    """Why the engine is full (the limit holds), or None."""
    if load.kv_usage_pct is not None and load.kv_usage_pct >= target.kv_full_pct:
        return f"engine full: KV {_pct(load.kv_usage_pct)}"
    return None


def has_room(load: EngineLoad, target: AdmissionTarget) -> bool:
    if load.kv_usage_pct is not None and load.kv_usage_pct >= target.kv_room_pct:
        return False
    if load.waiting is not None and load.waiting > 1:
        return False
    if (load.ttft_p95_s is not None and load.ttft_count >= target.min_ttft_observations
            and load.ttft_p95_s > 0.75 * target.ttft_p95_s):
        return False
    return True


class AdaptiveLimit:
    """The limit of one engine; :meth:`observe` each reading."""

    def __init__(self, target: AdmissionTarget, ceiling: int) -> None:
        self.target = target
        self._ceiling = max(1, ceiling)
        self.limit = self._clamp(target.start)
        self.slow_start = True
        self._last_cut_s: float | None = None
        self._last_growth_s: float | None = None
        self._preemptions: float | None = None
        self.last = LimitDecision(self.limit, Verdict.BLIND, "")

    def set_ceiling(self, ceiling: int) -> int:
        self._ceiling = max(1, ceiling)
        self.limit = self._clamp(self.limit)
        return self.limit

    def _clamp(self, value: int) -> int:
        return max(min(self.target.min_limit, self._ceiling), min(self._ceiling, value))

    def observe(self, load: EngineLoad | None, *, now_s: float, in_flight: int, queued: int) -> LimitDecision:
        """Decide the limit from ``load``; ``in_flight``: sessions generating on this engine
        now, ``queued``: sessions waiting for a slot on it."""
        t = self.target
        if load is None or not load.up or not load.has_metrics or now_s - load.t_s > t.stale_s:
            why = ("no /metrics at this endpoint: the fleet cap applies" if load is not None and load.up
                   and not load.has_metrics else "no engine readings: the fleet cap applies")
            self.last = LimitDecision(self._ceiling, Verdict.BLIND, why)
            return self.last
        preempted = 0.0
        if load.preemptions_total is not None:
            if self._preemptions is not None and load.preemptions_total >= self._preemptions:
                preempted = load.preemptions_total - self._preemptions
            self._preemptions = load.preemptions_total
        over = overload(load, t, preempted)
        if over is not None:
            slow = over.cause is OverCause.SLOW_FIRST_TOKEN
            hold = t.hold_s if slow else t.hold_s / 2
            if self._last_cut_s is None or now_s - self._last_cut_s >= hold:
                base = min(self.limit, max(1, in_flight))
                self.limit = self._clamp(int(base * 0.75) if slow else base - max(1, base // 8))
                self._last_cut_s = now_s
            self.slow_start = False
            self.last = LimitDecision(self.limit, Verdict.OVER, over.reason)
            return self.last
        reason = full_reason(load, t)
        if reason is not None:
            self.slow_start = False
            if not load.waiting and queued > 0 and in_flight >= self.limit:
                self.limit = self._clamp(self.limit + 1)  # keep one ready inside: its batch stays full
            self.last = LimitDecision(self.limit, Verdict.FULL, reason)
            return self.last
        if has_room(load, t):
            if in_flight > 0 and load.ttft_count < t.min_ttft_observations:
                self.last = LimitDecision(self.limit, Verdict.STEADY,
                                          f"first tokens pending: holding at {self.limit} generating")
                return self.last
            binding = queued > 0 and in_flight >= self.limit
            spaced = self._last_growth_s is None or now_s - self._last_growth_s >= t.hold_s / 2
            if binding and spaced and self.limit < self._ceiling:
                step = self.limit if self.slow_start else max(1, self.limit // 8)
                self.limit = self._clamp(self.limit + step)
                self._last_growth_s = now_s
            self.last = LimitDecision(self.limit, Verdict.ROOM, "")
            return self.last
        self.last = LimitDecision(self.limit, Verdict.STEADY, "engine near full: holding at "
                                  f"{self.limit} generating")
        return self.last
