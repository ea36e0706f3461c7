"""One ``/metrics`` scraper per endpoint, shared by every reader: one scrape, many readers.

The meters chart what the scrapes say; the fleet's adaptive admission steers by the same
samples; the router places new sessions by their KV use. The service factory makes one
:class:`ScraperSet` and hands it to both, so an engine is scraped once per interval however
many read it. ``sampled(EngineMetricsSample)`` fires for every scrape of every endpoint.
"""

from __future__ import annotations

import logging

import httpx
from psygnal import Signal

from workstation.core.endpoints import Endpoint
from workstation.telemetry.scraper import MetricsScraper
from workstation.telemetry.streams import TOKEN_RATE_WINDOW_S
from workstation.telemetry.vllm_metrics import EngineMetricsSample

log = logging.getLogger(__name__)


class ScraperSet:
    """Scrapers by endpoint name; ``async start()`` / ``async aclose()``."""

    sampled = Signal(object)

    def __init__(self, http: httpx.AsyncClient, *, interval_s: float = 1.0, window_s: float = 60.0,
                 rate_window_s: float = TOKEN_RATE_WINDOW_S) -> None:
        """``window_s``, ``rate_window_s``: every scraper's deriver's (:class:`MetricsDeriver`);
        ``rate_window_s`` is the windowed token rates' (the stream counters' window)."""
        self._http = http
        self.interval_s = interval_s
        self.window_s = window_s
        self.rate_window_s = rate_window_s
        self.scrapers: dict[str, MetricsScraper] = {}
        self._live: str | None = None
        """The scraper that follows the live engine (:meth:`follow`)."""
        self._started = False

    @property
    def started(self) -> bool:
        return self._started

    def add(self, endpoint: Endpoint) -> MetricsScraper:
        """Scrape ``endpoint`` (one of that name already scraped is pointed at it instead)."""
        scraper = self.scrapers.get(endpoint.name)
        if scraper is not None:
            if scraper.endpoint != endpoint:
                scraper.retarget(endpoint)
            return scraper
        scraper = MetricsScraper(self._http, endpoint, interval_s=self.interval_s, window_s=self.window_s,
                                 rate_window_s=self.rate_window_s)
        scraper.sampled.connect(self._forward)
        self.scrapers[endpoint.name] = scraper
        if self._live is None:
            self._live = endpoint.name
        if self._started:
            scraper.start_soon()
        return scraper

    async def remove(self, name: str) -> None:
        scraper = self.scrapers.pop(name, None)
        if scraper is not None:
            scraper.sampled.disconnect(self._forward)
            await scraper.aclose()
        if self._live == name:
            self._live = next(iter(self.scrapers), None)

    def follow(self, endpoint: Endpoint | None) -> None:
        """The live engine moved (a restart on a new port and key, or a switch): its scraper
        reads ``endpoint`` from the next scrape on. None (the engine is not serving) changes
        nothing: the scraper reports it down until it serves again."""
        if endpoint is None:
            return
        name = self._live if self._live in self.scrapers else endpoint.name
        scraper = self.scrapers.pop(name, None) if name is not None else None
        if scraper is None:
            self._live = endpoint.name
            self.add(endpoint)
            return
        scraper.retarget(endpoint)
        self.scrapers[endpoint.name] = scraper
        self._live = endpoint.name

    def _forward(self, sample: EngineMetricsSample) -> None:
        self.sampled.emit(sample)

    async def start(self) -> None:
        self.start_soon()

    def start_soon(self) -> None:
        """Start every scraper (idempotent; scrapers added later start at once)."""
        self._started = True
        for scraper in self.scrapers.values():
            scraper.start_soon()

    async def aclose(self) -> None:
        self._started = False
        for scraper in list(self.scrapers.values()):
            await scraper.aclose()
