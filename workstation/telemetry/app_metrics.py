"""Optional: the app's own meters as a Prometheus endpoint on loopback.

A collector reads the meters' latest snapshot at scrape time (nothing is copied
on every sample). The server binds 127.0.0.1 only, runs on prometheus_client's
own daemon thread, and :meth:`AppMetricsServer.aclose` stops it.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from typing import Any
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from workstation.telemetry.snapshot import MetersSnapshot

PREFIX = "workstation_"


class _MetersCollector(Collector):
    def __init__(self, snapshot: Callable[[], MetersSnapshot]) -> None:
        self._snapshot = snapshot

    def collect(self) -> Iterator[GaugeMetricFamily]:
        snap = self._snapshot()
        gauges: dict[str, GaugeMetricFamily] = {}

        def gauge(name: str, doc: str, labels: tuple[str, ...] = ()) -> GaugeMetricFamily:
            if name not in gauges:
                gauges[name] = GaugeMetricFamily(PREFIX + name, doc, labels=list(labels))
            return gauges[name]

        def put(name: str, doc: str, value: Any, labels: dict[str, str] | None = None) -> None:
            if value is None:
                return
            g = gauge(name, doc, tuple(labels or ()))
            g.add_metric(list((labels or {}).values()), float(value))

        gpu = snap.gpu
        put("gpus", "GPUs NVML sees (0: no GPU or no NVML)", len(gpu.devices) if gpu else 0)
        for d in gpu.devices if gpu else ():
            lab = {"gpu": str(d.index), "name": d.name}
            put("gpu_utilization_percent", "GPU busy time", d.gpu_util_pct, lab)
            put("gpu_memory_used_bytes", "GPU memory in use", d.memory_used_bytes, lab)
            put("gpu_power_watts", "GPU power draw", d.power_w, lab)
            put("gpu_temperature_celsius", "GPU temperature", d.temperature_c, lab)
            put("gpu_energy_joules", "GPU energy counter", d.energy_j, lab)
        host = snap.host
        if host is not None:
            put("host_cpu_percent", "Machine CPU use (all cores)", host.cpu_pct)
            put("host_memory_used_bytes", "Machine memory in use", host.memory_used_bytes)
        for e in snap.engines:
            lab = {"endpoint": e.endpoint}
            put("engine_up", "Endpoint answered its last scrape", 1.0 if e.up else 0.0, lab)
            put("engine_generation_tokens_per_second", "Generated tok/s", e.generation_tokens_per_s, lab)
            put("engine_prompt_tokens_per_second", "Prompt tok/s", e.prompt_tokens_per_s, lab)
            put("engine_requests_running", "Requests running", e.running, lab)
            put("engine_requests_waiting", "Requests waiting", e.waiting, lab)
            put("engine_kv_cache_usage_percent", "KV-cache use", e.kv_cache_usage_pct, lab)
        cost = snap.cost
        if cost is not None:
            put("cost_savings_percent", "Savings versus the chosen paid API", cost.savings_pct)
            put("cost_saved_usd", "Dollars saved since the meter started", cost.saved_usd)
        put("sessions_tokens_per_second", "Streamed tok/s, all sessions", snap.stream_tokens_per_s)
        yield from gauges.values()


class AppMetricsServer:
    """``/metrics`` of the app itself on ``127.0.0.1:port`` (port 0 picks a free one)."""

    def __init__(self, snapshot: Callable[[], MetersSnapshot], *, port: int = 0) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_MetersCollector(snapshot))
        self._port = port
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int | None:
        return None if self._server is None else int(self._server.server_address[1])

    @property
    def url(self) -> str | None:
        return None if self.port is None else f"http://127.0.0.1:{self.port}/metrics"

    async def start(self) -> None:
        if self._server is None:
            self._server, self._thread = start_http_server(self._port, addr="127.0.0.1", registry=self.registry)

    async def aclose(self) -> None:
        server, self._server = self._server, None
        thread, self._thread = self._thread, None
        if server is None:
            return
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, server.shutdown)  # waits out serve_forever's poll
        server.server_close()
        if thread is not None:
            await loop.run_in_executor(None, thread.join, 5.0)
