"""Scrape one endpoint's ``/metrics`` at an interval over the shared HTTP client.

Each scrape is stamped with the midpoint of its request on ``time.monotonic()``
(the counters were read somewhere in between), parsed, and handed to a
:class:`MetricsDeriver`. An endpoint that does not answer yields a sample with
``up=False`` and the reason, and the scraper keeps trying; it never raises.
"""

from __future__ import annotations

import asyncio
import logging
import time

import httpx
from psygnal import Signal

from workstation.core.endpoints import Endpoint
from workstation.telemetry.cadence import Cadence, cancel_and_wait
from workstation.telemetry.streams import TOKEN_RATE_WINDOW_S
from workstation.telemetry.vllm_metrics import (
    EngineMetricsSample,
    MetricsDeriver,
    down_sample,
    no_metrics_sample,
    parse_metrics,
)

NO_METRICS_STATUS = frozenset({404, 405, 501})
"""What an OpenAI-compatible server that is not vLLM answers for ``/metrics``."""

log = logging.getLogger(__name__)


class MetricsScraper:
    """The engine meters of one endpoint. Emits ``sampled(EngineMetricsSample)``."""

    sampled = Signal(object)

    def __init__(
        self,
        http: httpx.AsyncClient,
        endpoint: Endpoint,
        *,
        interval_s: float = 1.0,
        window_s: float = 60.0,
        rate_window_s: float = TOKEN_RATE_WINDOW_S,
    ) -> None:
        """``window_s``, ``rate_window_s``: the deriver's (:class:`MetricsDeriver`)."""
        self._http = http
        self.endpoint = endpoint
        self._interval_s = max(0.05, interval_s)
        self.deriver = MetricsDeriver(endpoint.name, window_s=window_s, rate_window_s=rate_window_s)
        self._task: asyncio.Task[None] | None = None
        self._was_up: bool | None = None
        self.latest: EngineMetricsSample | None = None

    @property
    def url(self) -> str:
        return self.endpoint.base_url.rstrip("/") + "/metrics"

    @property
    def interval_s(self) -> float:
        return self._interval_s

    @interval_s.setter
    def interval_s(self, value: float) -> None:
        self._interval_s = max(0.05, float(value))

    async def scrape_once(self) -> EngineMetricsSample:
        """Scrape, derive and emit one sample (never raises for network trouble)."""
        headers = self.endpoint.auth_headers()
        timeout = max(2.0, 2 * self._interval_s)
        t_send = time.monotonic()
        try:
            response = await self._http.get(self.url, headers=headers, timeout=timeout)
            t_recv = time.monotonic()
            if response.status_code in NO_METRICS_STATUS or (
                    response.status_code == 200 and "html" in response.headers.get("content-type", "")):
                sample = no_metrics_sample(self.endpoint.name, f"{self.url} has no engine metrics "
                                                               f"(HTTP {response.status_code})")
            elif response.status_code != 200:
                sample = down_sample(self.endpoint.name, f"/metrics answered HTTP {response.status_code}")
            else:
                reading = parse_metrics(response.text, (t_send + t_recv) / 2)
                sample = self.deriver.update(reading)
        except httpx.HTTPError as exc:
            sample = down_sample(self.endpoint.name, f"cannot reach {self.url}: {type(exc).__name__}")
        except ValueError as exc:  # the text parser refuses malformed exposition
            sample = down_sample(self.endpoint.name, f"malformed /metrics from {self.url}: {exc}")
        if sample.up != self._was_up:
            if sample.up and not sample.has_metrics:
                log.info("engine metrics: %s", sample.error)
            elif sample.up:
                log.info("engine metrics: %s is up", self.url)
            else:
                log.warning("engine metrics: %s", sample.error)
                self.deriver.reset()
            self._was_up = sample.up
        self.latest = sample
        self.sampled.emit(sample)
        return sample

    def retarget(self, endpoint: Endpoint) -> None:
        """Scrape ``endpoint`` from the next scrape on (the engine restarted on a new port and
        key, or a switch left another engine serving): its counters start afresh."""
        self.endpoint = endpoint
        old = self.deriver
        self.deriver = MetricsDeriver(endpoint.name, window_s=old.window_s, recent_window_s=old.recent_window_s,
                                      rate_window_s=old.rate_window_s)
        self._was_up = None
        self.latest = None

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    async def start(self) -> None:
        self.start_soon()

    def start_soon(self) -> None:
        """Start the periodic scrape (a named task the scraper owns; :meth:`aclose` ends it)."""
        if not self.running:
            self._task = asyncio.create_task(self._run(), name=f"telemetry.metrics.{self.endpoint.name}")

    async def _run(self) -> None:
        cadence = Cadence(self._interval_s)
        while True:
            await self.scrape_once()
            await cadence.wait()

    async def aclose(self) -> None:
        task, self._task = self._task, None
        await cancel_and_wait(task)
