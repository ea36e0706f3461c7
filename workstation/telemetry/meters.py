"""The meters service: every sampler and meter behind one object, with its events.

:class:`Meters` owns the GPU sampler (NVML, own thread), the host sampler (psutil,
own thread), one ``/metrics`` scraper per endpoint, the per-session stream
counters, the cost meter, and a :class:`SeriesBook` of 15 minutes of every chart
value. A 1 Hz tick publishes the session counters and the cost estimate. See the
package docstring for the events and the series names.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
from psygnal import Signal

from workstation.core.cost import (
    ApiPrice,
    PriceTable,
    SelfHostAssumptions,
    SelfHostMode,
)
from workstation.core.endpoints import Endpoint
from workstation.core.gpu_prices import typical_gpu_hourly_usd
from workstation.core.series import DEFAULT_HORIZON_S, SeriesBook
from workstation.telemetry.app_metrics import AppMetricsServer
from workstation.telemetry.cadence import cancel_and_wait
from workstation.telemetry.cost_meter import CostMeter
from workstation.telemetry.csv_export import export_series_csv
from workstation.telemetry.host import HostReader, HostSample
from workstation.telemetry.nvml import GpuSnapshot, NvmlReader
from workstation.telemetry.prices import load_price_table
from workstation.telemetry.sampler import GpuSampler, HostSampler
from workstation.telemetry.scraper import MetricsScraper
from workstation.telemetry.scrapers import ScraperSet
from workstation.telemetry.snapshot import MetersSnapshot
from workstation.telemetry.streams import StreamCounters
from workstation.telemetry.vllm_metrics import EngineMetricsSample

if TYPE_CHECKING:  # the settings stay optional: the GPU checks run where pydantic is absent
    from workstation.config import Settings

log = logging.getLogger(__name__)

_UNIT_SUFFIXES = (
    ("usd_per_m_tokens", "$/M tok"),
    ("joules_per_token", "J/tok"),
    ("tokens_per_s", "tok/s"),
    ("_pct", "%"),
    ("_bytes", "B"),
    ("_w", "W"),
    ("_c", "°C"),
    ("_mhz", "MHz"),
    ("_usd", "$"),
    ("_s", "s"),
    ("running", "requests"),
    ("waiting", "requests"),
)


def unit_of(series_name: str) -> str:
    """The unit of a series, read from its name's suffix."""
    for suffix, unit in _UNIT_SUFFIXES:
        if series_name.endswith(suffix):
            return unit
    return ""


def assumptions_from_settings(settings: Settings, gpu_count: int = 1) -> SelfHostAssumptions:
    t = settings.telemetry
    if t.gpu_hourly_usd is not None:
        return SelfHostAssumptions(
            mode=SelfHostMode.GPU_HOURLY, gpu_hourly_usd=t.gpu_hourly_usd, gpu_count=max(1, gpu_count),
            hardware_usd=t.hardware_usd, hardware_years=t.hardware_years,
            electricity_usd_per_kwh=t.electricity_usd_per_kwh, pue=t.pue,
        )
    return SelfHostAssumptions(
        mode=SelfHostMode.ENERGY, hardware_usd=t.hardware_usd, hardware_years=t.hardware_years,
        electricity_usd_per_kwh=t.electricity_usd_per_kwh, pue=t.pue, gpu_count=max(1, gpu_count),
    )


class Meters:
    """Every meter of the app; ``async start()`` / ``async aclose()``."""

    gpu_sampled = Signal(object)  # GpuSnapshot
    host_sampled = Signal(object)  # HostSample
    engine_sampled = Signal(object)  # EngineMetricsSample
    sessions_sampled = Signal(object)  # tuple[SessionTokens, ...]
    models_sampled = Signal(object)  # tuple[ModelTokens, ...]: tokens per adapter / base model
    cost_updated = Signal(object)  # CostEstimate
    series_updated = Signal(object)  # tuple[str, ...]: names of the series just appended to
    rate_updated = Signal(object)  # float | None: :attr:`tokens_per_s`, at each tick
    api_price_changed = Signal(object)  # ApiPrice | None: the paid API compared against changed

    def __init__(
        self,
        http: httpx.AsyncClient,
        *,
        endpoints: Iterable[Endpoint] = (),
        gpu_interval_s: float = 1.0,
        host_interval_s: float = 1.0,
        metrics_interval_s: float = 1.0,
        latency_window_s: float = 60.0,
        horizon_s: float = DEFAULT_HORIZON_S,
        prices: PriceTable | None = None,
        api_model: str | None = None,
        assumptions: SelfHostAssumptions | None = None,
        gpu_reader: NvmlReader | None = None,
        host_reader: HostReader | None = None,
        app_metrics_port: int | None = None,
        streams: StreamCounters | None = None,
        scrapers: ScraperSet | None = None,
        typical_gpu_price: bool = False,
    ) -> None:
        """``streams``: the token counters the sessions count into (the fleet's
        ``Fleet.streams``: one token rate for the whole app); default: counters of its own.
        ``scrapers``: the ``/metrics`` scrapers to read (the service factory's shared set,
        which it closes); default: a set of its own for ``endpoints``. ``typical_gpu_price``:
        no self-hosting price was set, so the first GPU NVML names prices the GPU-hour at its
        model's typical rental price (``core/gpu_prices.py``), until the user sets one."""
        self._http = http
        self._engine_pid: int | None = None
        self.prices = prices or PriceTable()
        self.series = SeriesBook(
            horizon_s=horizon_s, interval_s=min(gpu_interval_s, metrics_interval_s, 1.0),
            wall_offset_s=time.time() - time.monotonic(),
        )
        self.metrics_interval_s = metrics_interval_s
        self.latency_window_s = latency_window_s
        self.gpu = GpuSampler(interval_s=gpu_interval_s, engine_pid=self.engine_pid, reader=gpu_reader)
        self.host = HostSampler(interval_s=host_interval_s, engine_pid=self.engine_pid, reader=host_reader)
        self.streams = streams if streams is not None else StreamCounters()
        api = self.prices.find(api_model) if api_model else None
        if api_model and api is None:
            log.warning("cost meter: no price for %r in the price table", api_model)
        self.cost = CostMeter(api=api, assumptions=assumptions or SelfHostAssumptions())
        self._auto_gpu_count = True  # GPU rental counts every GPU NVML sees, until the user says otherwise
        self._auto_gpu_price = typical_gpu_price
        self._owns_scrapers = scrapers is None
        self.engines = scrapers if scrapers is not None else ScraperSet(
            http, interval_s=metrics_interval_s, window_s=latency_window_s, rate_window_s=self.streams.window_s)
        """The ``/metrics`` scrapers (shared with the fleet's admission when the service
        factory made them: one scrape, many readers). Their windowed token rates count over
        the streams' window; both default to ``streams.TOKEN_RATE_WINDOW_S``."""
        if self.engines.rate_window_s != self.streams.window_s:
            log.warning("meters: the engines' token rates count over %g s, the streams' over %g s: the strip "
                        "and the panes beside it will disagree", self.engines.rate_window_s, self.streams.window_s)
        for ep in endpoints:
            self.engines.add(ep)
        self.engines.sampled.connect(self._on_engine_sampled)
        self.gpu.sampled.connect(self._on_gpu_sampled)
        self.host.sampled.connect(self._on_host_sampled)
        self._app_metrics = AppMetricsServer(self.snapshot, port=app_metrics_port) if app_metrics_port is not None else None
        self._tick_task: asyncio.Task[None] | None = None
        self._started = False
        self._engine_rates: dict[str, float | None] = {}
        """Each endpoint's generation rate over the streams' window, as its last sample said
        (``windowed_generation_tokens_per_s``; absent: down or no metrics)."""
        self.rate: float | None = None
        """:attr:`tokens_per_s` as the last tick published it: what every view shows until the
        next (reading the property between two ticks could show another number)."""

    @classmethod
    def from_settings(cls, settings: Settings, http: httpx.AsyncClient, **kwargs: Any) -> Meters:
        """Build from the typed settings, prices from the packaged table plus the user's copy."""
        t = settings.telemetry
        kwargs.setdefault("gpu_interval_s", t.gpu_interval_s)
        kwargs.setdefault("metrics_interval_s", t.metrics_interval_s)
        kwargs.setdefault("prices", load_price_table(settings.data_dir))
        kwargs.setdefault("api_model", t.api_price_model)
        kwargs.setdefault("assumptions", assumptions_from_settings(settings))
        kwargs.setdefault("typical_gpu_price", t.gpu_hourly_usd is None and not t.hardware_usd)
        return cls(http, **kwargs)

    # ----------------------------------------------------------------- wiring
    def engine_pid(self) -> int | None:
        return self._engine_pid

    def set_engine_pid(self, pid: int | None) -> None:
        """The managed engine's pid (its process tree is marked on the GPU cards); None when
        there is no local engine process."""
        self._engine_pid = pid

    @property
    def scrapers(self) -> dict[str, MetricsScraper]:
        """The scrapers by endpoint name."""
        return self.engines.scrapers

    def follow(self, endpoint: Endpoint | None) -> None:
        """The live engine moved (a restart on a new port and key, or a switch): its scraper
        reads ``endpoint`` from the next scrape on (``ScraperSet.follow``)."""
        self.engines.follow(endpoint)

    async def add_endpoint(self, endpoint: Endpoint) -> None:
        """Scrape another endpoint (replacing one of the same name)."""
        await self.remove_endpoint(endpoint.name)
        self.engines.add(endpoint)

    async def remove_endpoint(self, name: str) -> None:
        await self.engines.remove(name)
        self._engine_rates.pop(name, None)  # its last rate must not stay in the total

    def set_api_price(self, model: str | None) -> ApiPrice | None:
        """Compare against another paid API (``model`` or ``provider/model``)."""
        api = self.prices.find(model) if model else None
        self.cost.set_api(api)
        self.api_price_changed.emit(api)
        return api

    def set_assumptions(self, assumptions: SelfHostAssumptions) -> None:
        """The user's assumptions (the GPU count is theirs from now on)."""
        self._auto_gpu_count = False
        self._auto_gpu_price = False
        self.cost.set_assumptions(assumptions)

    # ----------------------------------------------------------------- events in
    def _record(self, t: float, values: dict[str, float | None], interval_s: float | None = None) -> None:
        self.series.record(t, values, units={k: unit_of(k) for k in values}, interval_s=interval_s)
        self.series_updated.emit(tuple(values))

    def _on_gpu_sampled(self, snap: GpuSnapshot) -> None:
        if snap.ok and snap.devices and self._auto_gpu_price:
            self._auto_gpu_price = False
            typical = typical_gpu_hourly_usd(snap.devices[0].name)
            if typical is not None:
                log.info("cost meter: %s rents for about $%.2f per GPU-hour (set telemetry.gpu_hourly_usd "
                         "to yours)", snap.devices[0].name, typical)
                self.cost.set_assumptions(replace(self.cost.assumptions, mode=SelfHostMode.GPU_HOURLY,
                                                  gpu_hourly_usd=typical))
        if snap.ok and self._auto_gpu_count and self.cost.assumptions.gpu_count != len(snap.devices):
            self.cost.set_assumptions(replace(self.cost.assumptions, gpu_count=len(snap.devices)))
        self.cost.on_gpu_snapshot(snap)
        if snap.ok:
            values: dict[str, float | None] = {}
            for d in snap.devices:
                p = f"gpu{d.index}."
                values[p + "util_pct"] = d.gpu_util_pct
                values[p + "mem_util_pct"] = d.mem_util_pct
                values[p + "memory_used_bytes"] = d.memory_used_bytes
                values[p + "power_w"] = d.power_w
                values[p + "temperature_c"] = d.temperature_c
                values[p + "sm_clock_mhz"] = d.sm_clock_mhz
                values[p + "engine_memory_bytes"] = d.engine_memory_bytes
            self._record(snap.t_mono, values, self.gpu.interval_s)
        self.gpu_sampled.emit(snap)

    def _on_host_sampled(self, s: HostSample) -> None:
        self._record(s.t_mono, {
            "host.cpu_pct": s.cpu_pct,
            "host.memory_used_bytes": s.memory_used_bytes,
            "host.app_cpu_pct": s.app.cpu_pct if s.app else None,
            "host.app_rss_bytes": s.app.rss_bytes if s.app else None,
            "host.engine_cpu_pct": s.engine.cpu_pct if s.engine else None,
            "host.engine_rss_bytes": s.engine.rss_bytes if s.engine else None,
        }, self.host.interval_s)
        self.host_sampled.emit(s)

    def _on_engine_sampled(self, s: EngineMetricsSample) -> None:
        self.cost.on_engine_sample(s)
        if s.up and s.has_metrics:
            self._engine_rates[s.endpoint] = s.windowed_generation_tokens_per_s
        else:
            self._engine_rates.pop(s.endpoint, None)
        p = f"engine.{s.endpoint}."
        self._record(s.t_mono, {  # the token rates over the streams' window, as the strip's
            p + "generation_tokens_per_s": s.windowed_generation_tokens_per_s,
            p + "prompt_tokens_per_s": s.windowed_prompt_tokens_per_s,
            p + "running": s.running,
            p + "waiting": s.waiting,
            p + "kv_cache_usage_pct": s.kv_cache_usage_pct,
            p + "prefix_cache_hit_rate_pct": s.prefix_cache_hit_rate_pct,
            p + "spec_acceptance_rate_pct": s.spec_acceptance_rate_pct,
            p + "ttft_p50_s": s.ttft_s.p50 if s.ttft_s else None,
            p + "ttft_p99_s": s.ttft_s.p99 if s.ttft_s else None,
            p + "itl_p50_s": s.itl_s.p50 if s.itl_s else None,
            p + "itl_p99_s": s.itl_s.p99 if s.itl_s else None,
        }, self.metrics_interval_s)
        self.engine_sampled.emit(s)

    def tick(self) -> None:
        """Publish the session counters and the cost estimate (the 1 Hz tick calls it)."""
        now = time.monotonic()
        sessions = self.streams.snapshot()
        estimate = self.cost.estimate()
        self._record(now, {
            "sessions.tokens_per_s": self.streams.tokens_per_s(),
            "cost.savings_pct": estimate.savings_pct,
            "cost.saved_usd": estimate.saved_usd,
            "cost.self_host_usd_per_m_tokens": estimate.self_host_usd_per_m_tokens,
            "cost.api_usd_per_m_tokens": estimate.api_usd_per_m_tokens,
            "cost.joules_per_token": estimate.joules_per_token,
        }, 1.0)
        self.sessions_sampled.emit(sessions)
        self.models_sampled.emit(self.streams.by_model())
        self.cost_updated.emit(estimate)
        self.rate = self.tokens_per_s
        self.rate_updated.emit(self.rate)

    @property
    def tokens_per_s(self) -> float | None:
        """The one generated-tokens rate the app shows (the strip, the status bar, the recording's
        caption): the engines' own count from /metrics where they have one — it also counts
        other clients' traffic — else what the sessions' chat clients counted as generated
        (the guided protocol's hidden drafts and choices included, since the clients report
        every delta's tokens). Both over the same trailing window (the stream counters' 5 s), and
        never less than the streams: the strip had read 0 tok/s from a one-second scrape
        between two bursts of a CPU engine while a pane still showed 3 t/s. None while an
        engine with metrics has not reported a rate yet and nothing streams."""
        streamed = self.streams.tokens_per_s()
        if self._engine_rates:
            rates = [r for r in self._engine_rates.values() if r is not None]
            if not rates:
                return streamed or None
            return max(sum(rates), streamed)
        return streamed

    async def _tick_loop(self) -> None:
        while True:
            await asyncio.sleep(1.0)
            self.tick()

    # ----------------------------------------------------------------- life cycle
    async def start(self) -> None:
        if self._started:
            return
        self._started = True
        self.cost.reset()
        await self.gpu.start()
        await self.host.start()
        await self.engines.start()
        if self._app_metrics is not None:
            await self._app_metrics.start()
            log.info("app metrics at %s", self._app_metrics.url)
        self._tick_task = asyncio.create_task(self._tick_loop(), name="telemetry.tick")

    async def aclose(self) -> None:
        self._started = False
        task, self._tick_task = self._tick_task, None
        await cancel_and_wait(task)
        self.engines.sampled.disconnect(self._on_engine_sampled)
        if self._owns_scrapers:
            await self.engines.aclose()
        await self.gpu.aclose()
        await self.host.aclose()
        if self._app_metrics is not None:
            await self._app_metrics.aclose()

    @property
    def app_metrics_url(self) -> str | None:
        return self._app_metrics.url if self._app_metrics else None

    # ----------------------------------------------------------------- reading
    def snapshot(self) -> MetersSnapshot:
        return MetersSnapshot(
            t_wall=time.time(),
            gpu=self.gpu.latest,
            host=self.host.latest,
            engines=tuple(s.latest for s in self.scrapers.values() if s.latest is not None),
            sessions=self.streams.snapshot(),
            stream_tokens_per_s=self.streams.tokens_per_s(),
            cost=self.cost.estimate(),
            models=self.streams.by_model(),
        )

    async def collect_once(self, window_s: float = 1.0) -> MetersSnapshot:
        """Every meter read twice ``window_s`` apart (rates need two readings), without
        starting the periodic loops: what ``workstation meters --once`` prints."""
        self.cost.reset()
        await self.gpu.read_once()
        await self.host.read_once()
        await asyncio.gather(*(s.scrape_once() for s in self.scrapers.values()))
        await asyncio.sleep(window_s)
        await asyncio.gather(*(s.scrape_once() for s in self.scrapers.values()))
        await self.host.read_once()
        await self.gpu.read_once()
        self.tick()
        return self.snapshot()

    def export_csv(self, path: Path, names: Iterable[str] | None = None) -> int:
        """Write the charts' series to a CSV file; returns the rows written."""
        return export_series_csv(self.series, path, names)
