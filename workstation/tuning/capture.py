"""Capture the shape of live traffic: a recorder of finished requests.

Two ways in, use one per recorder:

- as an observer of :class:`~workstation.engine.chat_client.ChatClient` (``attach(client)``,
  or pass ``recorder.observe`` in ``observers=``): one
  :class:`~workstation.core.requests.RequestRecord` per finished request;
- from a running fleet (``attach_fleet(fleet)``): its ``agent_event`` stream, where each
  model turn is ``TurnStarted`` → ``UsageReported`` → ``TurnFinished``; the recorder turns
  every turn into the same record (times are when the events arrived).

With an endpoint it also reads the engine's ``/metrics`` (the telemetry parser) at start
and stop, so the shape carries the prefix-cache hit rate the server achieved even when the
requests do not report cached tokens.
"""

from __future__ import annotations

import time
from typing import Any

import httpx

from workstation.core import agent_events as ev
from workstation.core.endpoints import Endpoint
from workstation.core.requests import RequestRecord
from workstation.core.traffic import TrafficShape, shape_from_records
from workstation.telemetry.vllm_metrics import MetricsReading
from workstation.tuning.loadgen import read_metrics

MAX_RECORDS = 50_000


class _Turn:
    __slots__ = ("started_s", "first_s", "usage")

    def __init__(self, started_s: float) -> None:
        self.started_s = started_s
        self.first_s: float | None = None
        self.usage: ev.UsageReported | None = None


class TrafficRecorder:
    """Collects requests while attached; ``shape()`` turns them into a :class:`TrafficShape`."""

    def __init__(self, name: str, *, http: httpx.AsyncClient | None = None, endpoint: Endpoint | None = None,
                 common_prefix_tokens: int = 0, max_records: int = MAX_RECORDS) -> None:
        self.name = name
        self.http = http
        self.endpoint = endpoint
        self.common_prefix_tokens = common_prefix_tokens
        self.max_records = max_records
        self.records: list[RequestRecord] = []
        self.dropped = 0
        self.started_s: float | None = None
        self.stopped_s: float | None = None
        self.source = "chat-client"
        self._turns: dict[str, _Turn] = {}
        self._clients: list[Any] = []
        self._fleet: Any = None
        self._metrics_start: MetricsReading | None = None
        self._metrics_end: MetricsReading | None = None

    # ----- sources -----
    def observe(self, record: RequestRecord) -> None:
        """A ChatClient observer: called once per finished request."""
        if self.stopped_s is not None:
            return
        if self.started_s is None:
            self.started_s = record.started_s
        if len(self.records) >= self.max_records:
            self.dropped += 1
            return
        self.records.append(record)

    def attach(self, client: Any) -> None:
        if self.observe not in client.observers:
            client.observers.append(self.observe)
            self._clients.append(client)

    def detach_all(self) -> None:
        for client in self._clients:
            if self.observe in client.observers:
                client.observers.remove(self.observe)
        self._clients.clear()
        if self._fleet is not None:
            self._fleet.agent_event.disconnect(self.on_agent_event)
            self._fleet = None

    def attach_fleet(self, fleet: Any) -> None:
        """Record every model turn of a :class:`workstation.fleet.service.Fleet`."""
        self.source = "fleet"
        self._fleet = fleet
        fleet.agent_event.connect(self.on_agent_event)

    def on_agent_event(self, item: Any) -> None:
        """Handler for ``Fleet.agent_event`` (a ``SessionAgentEvent``) or a bare agent event."""
        event = getattr(item, "event", item)
        sid = getattr(event, "session_id", None) or getattr(item, "session_id", None)
        if sid is None:
            return
        now = time.monotonic()
        if isinstance(event, ev.TurnStarted):
            self._turns[sid] = _Turn(now)
        elif isinstance(event, (ev.TextStreamed, ev.ReasoningStreamed, ev.ToolCallStreamed)):
            turn = self._turns.get(sid)
            if turn is not None and turn.first_s is None:
                turn.first_s = now
        elif isinstance(event, ev.UsageReported):
            turn = self._turns.get(sid)
            if turn is not None:
                turn.usage = event
        elif isinstance(event, ev.TurnFinished):
            turn = self._turns.pop(sid, None)
            if turn is None:
                return
            usage = turn.usage
            ok = event.finish_reason != "error"
            self.observe(RequestRecord(
                endpoint=self.endpoint.base_url if self.endpoint else "", model=self.endpoint.model if self.endpoint else "",
                session_id=sid, started_s=turn.started_s,
                ttft_s=(turn.first_s - turn.started_s) if turn.first_s is not None else None,
                duration_s=now - turn.started_s,
                prompt_tokens=usage.prompt_tokens if usage else 0,
                completion_tokens=usage.completion_tokens if usage else 0,
                cached_tokens=usage.cached_tokens if usage else 0,
                max_gap_s=0.0, ok=ok and usage is not None, error=None if ok else "turn ended with an error",
            ))

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
        return shape_from_records(self.name, self.records, bin_s=bin_s, span=span,
                                  common_prefix_tokens=self.common_prefix_tokens,
                                  metrics_hit_rate=self.metrics_hit_rate(), source=self.source, notes=notes)
