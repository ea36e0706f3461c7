"""Capture the shape of live traffic: a recorder of finished requests.

One :class:`~workstation.core.requests.RequestRecord` per finished model request, each with
its own usage, timing and ``n`` (``choices``), from either way in:

- as an observer of :class:`~workstation.engine.chat_client.ChatClient` (``attach(client)``,
  or pass ``recorder.observe`` in ``observers=``);
- from a running fleet (``attach_fleet(fleet)``): the fleet's ``request_observers``, the one
  list every chat client of its agent factory reports to (its agents' and the prefix-cache
  priming's, made before or after the recorder attached). A turn of an agent is not a
  request: a guided agent's turn may make none (a forced action), or a choice and then a
  code request, each for ``n`` drafts at once. The fleet's requests without a session are
  its prefix-cache priming (one per engine: the shared system prompt, one token out): it is
  kept apart (``priming``), not a one-request session of the shape, and tells the length
  of the prefix every session shares (a fleet's ``shape()`` estimates it from them,
  :func:`estimate_common_prefix`, for every caller).

With an endpoint it also reads the engine's ``/metrics`` (the telemetry parser) at start
and stop, so the shape carries the prefix-cache hit rate the server achieved even when the
requests do not report cached tokens.
"""

from __future__ import annotations

import time
from typing import Any

import httpx

from workstation.core.endpoints import Endpoint
from workstation.core.requests import RequestRecord
from workstation.core.traffic import TrafficShape, shape_from_records
from workstation.telemetry.vllm_metrics import MetricsReading
from workstation.tuning.loadgen import read_metrics

MAX_RECORDS = 50_000
FIRST_TASK_ALLOWANCE_TOKENS = 96
"""Tokens of a session's first prompt that are its own task, not the shared system prompt."""
PRIMING_OWN_TOKENS = 8
"""Tokens of the priming request's prompt after the shared prefix: its one-character user
turn in the chat template, and the assistant header."""


class TrafficRecorder:
    """Collects requests while attached; ``shape()`` turns them into a :class:`TrafficShape`."""

    def __init__(self, name: str, *, http: httpx.AsyncClient | None = None, endpoint: Endpoint | None = None,
                 common_prefix_tokens: int | None = None, max_records: int = MAX_RECORDS) -> None:
        self.name = name
        self.http = http
        self.endpoint = endpoint
        self.common_prefix_tokens = common_prefix_tokens
        """The prefix every session shares; None: a fleet's is estimated from what was recorded
        (:func:`estimate_common_prefix`), chat clients' is 0."""
        self.max_records = max_records
        self.records: list[RequestRecord] = []
        self.priming: list[RequestRecord] = []
        """A fleet's requests without a session (its prefix-cache priming), not in ``records``."""
        self.dropped = 0
        self.started_s: float | None = None
        self.stopped_s: float | None = None
        self.source = "chat-client"
        self._observed: list[list[Any]] = []
        """The observer lists ``observe`` was added to (clients' and fleets')."""
        self._metrics_start: MetricsReading | None = None
        self._metrics_end: MetricsReading | None = None

    # ----- sources -----
    def observe(self, record: RequestRecord) -> None:
        """A ChatClient observer: called once per finished request."""
        if self.stopped_s is not None:
            return
        if self.started_s is None:
            self.started_s = record.started_s
        if self.source == "fleet" and record.session_id is None:
            self.priming.append(record)
            return
        if len(self.records) >= self.max_records:
            self.dropped += 1
            return
        self.records.append(record)

    def _add_to(self, observers: list[Any]) -> None:
        if self.observe not in observers:
            observers.append(self.observe)
            self._observed.append(observers)

    def attach(self, client: Any) -> None:
        self._add_to(client.observers)

    def attach_fleet(self, fleet: Any) -> None:
        """Record every model request of a :class:`workstation.fleet.service.Fleet`'s agents."""
        observers = getattr(fleet, "request_observers", None)
        if observers is None:
            raise ValueError("this fleet's agents do not report their model requests "
                             "(its agent factory has no request_observers)")
        self.source = "fleet"
        self._add_to(observers)

    def detach_all(self) -> None:
        for observers in self._observed:
            while self.observe in observers:
                observers.remove(self.observe)
        self._observed.clear()

    # ----- window -----
    async def start(self) -> None:
        self.started_s = time.monotonic()
        self.stopped_s = None
        if self.http is not None and self.endpoint is not None:
            self._metrics_start = await read_metrics(self.http, self.endpoint)

    async def stop(self) -> None:
        self.stopped_s = time.monotonic()
        if self.http is not None and self.endpoint is not None:
            self._metrics_end = await read_metrics(self.http, self.endpoint)
        self.detach_all()

    def metrics_hit_rate(self) -> float | None:
        a, b = self._metrics_start, self._metrics_end
        if a is None or b is None:
            return None
        q = (b.counter("prefix_cache_queries") or 0.0) - (a.counter("prefix_cache_queries") or 0.0)
        h = (b.counter("prefix_cache_hits") or 0.0) - (a.counter("prefix_cache_hits") or 0.0)
        return h / q if q > 0 else None

    def shape(self, *, bin_s: float = 1.0) -> TrafficShape:
        """The shape of what was recorded (ValueError when nothing finished)."""
        span = None
        if self.started_s is not None and self.records:
            end = self.stopped_s or max(r.started_s + r.duration_s for r in self.records)
            span = (min(self.started_s, min(r.started_s for r in self.records)), end)
        notes = [f"{self.dropped} requests beyond {self.max_records} not recorded"] if self.dropped else []
        notes.append("metrics are the whole engine's: other clients in the window count too"
                     if self._metrics_start is not None else "no /metrics read")
        prefix = self.common_prefix_tokens
        if prefix is None:
            prefix = estimate_common_prefix(self) if self.source == "fleet" else 0
        return shape_from_records(self.name, self.records, bin_s=bin_s, span=span, common_prefix_tokens=prefix,
                                  metrics_hit_rate=self.metrics_hit_rate(), source=self.source, notes=notes)


def estimate_common_prefix(recorder: TrafficRecorder) -> int:
    """The agents' system prompt and tool specs are the same for every session: their length
    is the fleet's priming request's prompt (that prefix, a stub user turn), where it was
    recorded; else the shortest first prompt minus an allowance for the task text. Never
    more than the shortest first prompt."""
    firsts: dict[str, int] = {}
    for r in recorder.records:
        if r.session_id and r.session_id not in firsts and r.prompt_tokens:
            firsts[r.session_id] = r.prompt_tokens
    primed = [r.prompt_tokens for r in recorder.priming if r.ok and r.prompt_tokens]
    if primed and firsts:
        return max(0, min(max(primed) - PRIMING_OWN_TOKENS, min(firsts.values())))
    if len(firsts) < 2:
        return 0
    return max(0, min(firsts.values()) - FIRST_TASK_ALLOWANCE_TOKENS)
