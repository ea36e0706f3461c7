"""One ``/metrics`` scrape at a chosen instant, through a scraper's own deriver.

``MetricsScraper.scrape_once`` stamps a scrape with ``time.monotonic()``; tests of what the
meters make of a sequence of scrapes (a CPU engine's bursts over seconds) need their own
clock, so they hand the scraper's deriver a reading and emit the sample it derives, as
``scrape_once`` does after the HTTP request.
"""

from __future__ import annotations

from workstation.telemetry.scraper import MetricsScraper
from workstation.telemetry.vllm_metrics import EngineMetricsSample, MetricsReading


def scrape_at(scraper: MetricsScraper, t_mono: float, *, generated: float, prompt: float = 0.0) -> EngineMetricsSample:
    """The engine's counters read ``generated`` and ``prompt`` tokens at ``t_mono``."""
    reading = MetricsReading(t_mono, counters={"generation_tokens": generated, "prompt_tokens": prompt})
    sample = scraper.deriver.update(reading, t_wall=t_mono)
    scraper.latest = sample
    scraper.sampled.emit(sample)
    return sample
