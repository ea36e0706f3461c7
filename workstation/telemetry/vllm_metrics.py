"""vLLM's Prometheus ``/metrics``: parse a scrape, derive the meters from two or more.

Parsing uses ``prometheus_client``'s text parser on the lines we need (the full
exposition is ~660 lines, most of them ``_created`` gauges and Python process
metrics; dropping those first makes a parse several times cheaper). Values are
summed over label sets (several engines under data parallelism); the KV-cache use
is their mean.

Derivation (:class:`MetricsDeriver`) follows vLLM's own ``stats`` / ``loggers``
split: rates come from counter deltas over ``time.monotonic()`` windows —

* tok/s (generated and prompt) over the last scrape interval: the live 1 Hz reading;
* the same tok/s over a short trailing window (``rate_window_s``, the stream counters'
  5 s): what the meter strip and the meters dock show. A CPU engine generates in bursts
  between prefills of several seconds, so one interval often reads 0 while the panes,
  whose streamed rate covers the same 5 s, still show tokens;
* prefix-cache hit rate, preemptions, speculative-decoding acceptance rate and mean
  acceptance length, and TTFT / inter-token-latency percentiles over a longer window
  (60 s by default), from counter and histogram-bucket deltas, as PromQL's
  ``rate`` and ``histogram_quantile`` would.

Nothing is invented: a quantity whose window saw no events is ``None`` (quiet when
idle). A counter that goes down means the engine restarted; the window restarts.
"""

from __future__ import annotations

import math
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from workstation.telemetry.streams import TOKEN_RATE_WINDOW_S

# sample name → key in MetricsReading.counters
_COUNTERS = {
    "vllm:generation_tokens_total": "generation_tokens",
    "vllm:prompt_tokens_total": "prompt_tokens",
    "vllm:prefix_cache_queries_total": "prefix_cache_queries",
    "vllm:prefix_cache_hits_total": "prefix_cache_hits",
    "vllm:num_preemptions_total": "preemptions",
    "vllm:request_success_total": "requests_finished",
    "vllm:spec_decode_num_drafts_total": "spec_drafts",
    "vllm:spec_decode_num_draft_tokens_total": "spec_draft_tokens",
    "vllm:spec_decode_num_accepted_tokens_total": "spec_accepted_tokens",
}
_CACHED_PROMPT_SOURCE = ("vllm:prompt_tokens_by_source_total", "local_cache_hit")
_SPEC_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
_GAUGES = {
    "vllm:num_requests_running": "running",
    "vllm:num_requests_waiting": "waiting",
    "vllm:kv_cache_usage_perc": "kv_cache_usage",
    "vllm:gpu_cache_usage_perc": "kv_cache_usage",  # vLLM V0 name
}
_MEAN_GAUGES = frozenset({"kv_cache_usage"})
_HISTOGRAMS = {
    "vllm:time_to_first_token_seconds": "ttft",
    "vllm:inter_token_latency_seconds": "itl",
    "vllm:time_per_output_token_seconds": "itl",  # vLLM V0 name
    "vllm:e2e_request_latency_seconds": "e2e",
    "vllm:request_queue_time_seconds": "queue",
}
_WANTED_SAMPLES = frozenset(
    [*_COUNTERS, _CACHED_PROMPT_SOURCE[0], _SPEC_PER_POS, *_GAUGES]
    + [h + suffix for h in _HISTOGRAMS for suffix in ("_bucket", "_count", "_sum")]
)
_WANTED_FAMILIES = frozenset(
    [*(n.removesuffix("_total") for n in _COUNTERS), _CACHED_PROMPT_SOURCE[0].removesuffix("_total"),
     _SPEC_PER_POS.removesuffix("_total"), *_GAUGES, *_HISTOGRAMS]
)

QUANTILES = (0.5, 0.9, 0.95, 0.99)


# --------------------------------------------------------------------------- histograms
@dataclass(frozen=True, slots=True)
class Histogram:
    """Cumulative bucket counts; ``bounds`` ascending, the last one ``inf``."""

    bounds: tuple[float, ...]
    cumulative: tuple[float, ...]
    sum: float = 0.0

    @property
    def count(self) -> float:
        return self.cumulative[-1] if self.cumulative else 0.0

    def minus(self, older: Histogram) -> Histogram:
        """Observations made since ``older`` (self when the buckets differ or went down)."""
        if older.bounds != self.bounds:
            return self
        diff = tuple(a - b for a, b in zip(self.cumulative, older.cumulative))
        if any(d < 0 for d in diff):
            return self
        return Histogram(self.bounds, diff, self.sum - older.sum)

    def quantile(self, q: float) -> float | None:
        """Prometheus ``histogram_quantile``: linear inside the bucket; None when empty."""
        return bucket_quantile(self.bounds, self.cumulative, q)

    @property
    def mean(self) -> float | None:
        return self.sum / self.count if self.count > 0 else None


def bucket_quantile(bounds: tuple[float, ...], cumulative: tuple[float, ...], q: float) -> float | None:
    if not cumulative or cumulative[-1] <= 0 or not 0.0 <= q <= 1.0:
        return None
    rank = q * cumulative[-1]
    prev_count = 0.0
    for i, (upper, count) in enumerate(zip(bounds, cumulative)):
        if count >= rank and count > 0:
            lower = bounds[i - 1] if i > 0 else 0.0
            if math.isinf(upper):
                return lower  # above the highest finite bound: that bound is all we know
            if i == 0 and upper <= 0:
                return upper
            in_bucket = count - prev_count
            if in_bucket <= 0:
                return upper
            return lower + (upper - lower) * (rank - prev_count) / in_bucket
        prev_count = count
    return None


@dataclass(frozen=True, slots=True)
class Percentiles:
    p50: float
    p90: float
    p95: float
    p99: float
    mean: float | None
    count: int
    """Observations in the window."""

    def to_dict(self) -> dict[str, Any]:
        return {"p50": self.p50, "p90": self.p90, "p95": self.p95, "p99": self.p99, "mean": self.mean,
                "count": self.count}


def percentiles(h: Histogram | None) -> Percentiles | None:
    if h is None or h.count <= 0:
        return None
    q = [h.quantile(x) for x in QUANTILES]
    if any(v is None for v in q):
        return None
    return Percentiles(p50=q[0], p90=q[1], p95=q[2], p99=q[3], mean=h.mean, count=int(h.count))  # type: ignore[arg-type]


# --------------------------------------------------------------------------- one scrape
@dataclass(frozen=True, slots=True)
class MetricsReading:
    """Cumulative values of one scrape, summed over engines and label sets."""

    t_mono: float
    counters: dict[str, float] = field(default_factory=dict)
    gauges: dict[str, float] = field(default_factory=dict)
    histograms: dict[str, Histogram] = field(default_factory=dict)
    spec_accepted_per_pos: tuple[float, ...] = ()
    model_names: tuple[str, ...] = ()

    def counter(self, key: str) -> float | None:
        return self.counters.get(key)


def _wanted_lines(text: str) -> str:
    keep: list[str] = []
    for line in text.splitlines():
        if not line:
            continue
        if line[0] == "#":
            parts = line.split(None, 3)
            if len(parts) >= 4 and parts[1] == "TYPE" and parts[2] in _WANTED_FAMILIES:
                keep.append(line)
            continue
        end = len(line)
        for sep in ("{", " "):
            pos = line.find(sep)
            if 0 <= pos < end:
                end = pos
        if line[:end] in _WANTED_SAMPLES:
            keep.append(line)
    keep.append("")
    return "\n".join(keep)


def parse_metrics(text: str, t_mono: float | None = None) -> MetricsReading:
    """Parse vLLM's exposition text into one :class:`MetricsReading`."""
    t = time.monotonic() if t_mono is None else t_mono
    counters: dict[str, float] = {}
    gauges: dict[str, float] = {}
    gauge_n: dict[str, int] = {}
    buckets: dict[str, dict[float, float]] = {}
    sums: dict[str, float] = {}
    per_pos: dict[int, float] = {}
    models: set[str] = set()
    for family in text_string_to_metric_families(_wanted_lines(text)):
        for s in family.samples:
            name, labels, value = s.name, s.labels, s.value
            if "model_name" in labels:
                models.add(labels["model_name"])
            if name in _COUNTERS:
                key = _COUNTERS[name]
                counters[key] = counters.get(key, 0.0) + value
            elif name == _CACHED_PROMPT_SOURCE[0]:
                if labels.get("source") == _CACHED_PROMPT_SOURCE[1]:
                    counters["cached_prompt_tokens"] = counters.get("cached_prompt_tokens", 0.0) + value
            elif name == _SPEC_PER_POS:
                pos = int(labels.get("position", "0"))
                per_pos[pos] = per_pos.get(pos, 0.0) + value
            elif name in _GAUGES:
                key = _GAUGES[name]
                gauges[key] = gauges.get(key, 0.0) + value
                gauge_n[key] = gauge_n.get(key, 0) + 1
            elif name.endswith("_bucket"):
                base = name[: -len("_bucket")]
                key = _HISTOGRAMS[base]
                le = float(labels["le"])
                b = buckets.setdefault(key, {})
                b[le] = b.get(le, 0.0) + value
            elif name.endswith("_sum"):
                key = _HISTOGRAMS[name[: -len("_sum")]]
                sums[key] = sums.get(key, 0.0) + value
    for key in _MEAN_GAUGES:
        if gauge_n.get(key, 0) > 1:
            gauges[key] /= gauge_n[key]
    histograms = {}
    for key, b in buckets.items():
        bounds = tuple(sorted(b))
        histograms[key] = Histogram(bounds, tuple(b[x] for x in bounds), sums.get(key, 0.0))
    spec = tuple(per_pos[i] for i in sorted(per_pos))
    return MetricsReading(t, counters, gauges, histograms, spec, tuple(sorted(models)))


# --------------------------------------------------------------------------- derived sample
@dataclass(frozen=True, slots=True)
class EngineMetricsSample:
    """The engine meters of one endpoint at one instant. ``None``: nothing to say (idle,
    not exposed by this engine, or first scrape)."""

    endpoint: str
    t_mono: float
    t_wall: float
    up: bool
    error: str | None = None
    has_metrics: bool = True
    """False: the endpoint answers but exposes no Prometheus ``/metrics`` (an outside API):
    "no metrics", not down; every meter field is then None."""
    model: str | None = None
    interval_s: float | None = None
    """Seconds between this scrape and the previous one (the window of
    ``generation_tokens_per_s`` and ``prompt_tokens_per_s``)."""
    generation_tokens_per_s: float | None = None
    prompt_tokens_per_s: float | None = None
    rate_window_s: float | None = None
    """Seconds behind the windowed token rates: the deriver's ``rate_window_s`` (5 s) or up
    to one scrape interval more (the base is the newest reading at least that old; scrapes
    stamped a few ms off the 1-s beat give 5 or 6 s on the CPU engine), less while fewer
    seconds of readings exist."""
    windowed_generation_tokens_per_s: float | None = None
    """Generated tokens per second over ``rate_window_s``: steady between a CPU engine's
    bursts, where the one-interval rate reads 0; the rate the meter strip and the meters
    dock show, over the same window as the panes' streamed rates."""
    windowed_prompt_tokens_per_s: float | None = None
    running: int | None = None
    waiting: int | None = None
    kv_cache_usage_pct: float | None = None
    window_s: float | None = None
    """Length of the window behind the hit rate, preemptions, spec-decode and latencies."""
    prefix_cache_hit_rate_pct: float | None = None
    prefix_cache_hit_rate_lifetime_pct: float | None = None
    preemptions_total: float | None = None
    preemptions_in_window: float | None = None
    spec_acceptance_rate_pct: float | None = None
    spec_mean_acceptance_length: float | None = None
    """Tokens per verification step, the bonus token included (vLLM's convention)."""
    spec_acceptance_per_position: tuple[float, ...] | None = None
    ttft_s: Percentiles | None = None
    ttft_recent_s: Percentiles | None = None
    """Time to first token over the short recent window (``recent_window_s``, 10 s by
    default): what adaptive admission steers by."""
    itl_s: Percentiles | None = None
    e2e_s: Percentiles | None = None
    queue_s: Percentiles | None = None
    generation_tokens_total: float | None = None
    prompt_tokens_total: float | None = None
    cached_prompt_tokens_total: float | None = None
    requests_finished_total: float | None = None
    restarted: bool = False
    """Counters went down since the last scrape: the engine restarted."""

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name in self.__slots__:  # type: ignore[attr-defined]
            value = getattr(self, name)
            if isinstance(value, Percentiles):
                value = value.to_dict()
            elif isinstance(value, tuple):
                value = list(value)
            out[name] = "n/a" if value is None and name not in ("error",) else value
        return out


def _delta(new: float | None, old: float | None) -> float | None:
    if new is None or old is None:
        return None
    return new - old


def _ratio_pct(num: float | None, den: float | None) -> float | None:
    if num is None or den is None or den <= 0:
        return None
    return 100.0 * num / den


class MetricsDeriver:
    """Turns successive readings of one endpoint into :class:`EngineMetricsSample`.

    One history of readings serves every window: ``window_s`` (hit rate, preemptions,
    spec decode, latencies), ``recent_window_s`` (the TTFT admission steers by) and
    ``rate_window_s`` (the windowed token rates); the shorter two are capped at
    ``window_s``, the history's length."""

    def __init__(self, endpoint: str, *, window_s: float = 60.0, recent_window_s: float = 10.0,
                 rate_window_s: float = TOKEN_RATE_WINDOW_S) -> None:
        self.endpoint = endpoint
        self.window_s = window_s
        self.recent_window_s = min(recent_window_s, window_s)
        self.rate_window_s = min(rate_window_s, window_s)
        self._history: deque[MetricsReading] = deque()

    def reset(self) -> None:
        self._history.clear()

    def update(self, reading: MetricsReading, t_wall: float | None = None) -> EngineMetricsSample:
        prev = self._history[-1] if self._history else None
        restarted = False
        if prev is not None and _went_down(prev, reading):
            self._history.clear()
            prev = None
            restarted = True
        base = self._base(reading.t_mono, self.window_s)
        recent = self._base(reading.t_mono, self.recent_window_s)
        rated = self._base(reading.t_mono, self.rate_window_s)
        self._history.append(reading)
        while len(self._history) > 1 and self._history[1].t_mono <= reading.t_mono - self.window_s:
            self._history.popleft()
        c, g = reading.counters, reading.gauges
        sample: dict[str, Any] = {
            "endpoint": self.endpoint,
            "t_mono": reading.t_mono,
            "t_wall": time.time() if t_wall is None else t_wall,
            "up": True,
            "model": reading.model_names[0] if reading.model_names else None,
            "running": None if "running" not in g else int(round(g["running"])),
            "waiting": None if "waiting" not in g else int(round(g["waiting"])),
            "kv_cache_usage_pct": None if "kv_cache_usage" not in g else 100.0 * g["kv_cache_usage"],
            "prefix_cache_hit_rate_lifetime_pct": _ratio_pct(c.get("prefix_cache_hits"), c.get("prefix_cache_queries")),
            "preemptions_total": c.get("preemptions"),
            "generation_tokens_total": c.get("generation_tokens"),
            "prompt_tokens_total": c.get("prompt_tokens"),
            "cached_prompt_tokens_total": c.get("cached_prompt_tokens"),
            "requests_finished_total": c.get("requests_finished"),
            "restarted": restarted,
        }
        if prev is not None:
            dt = reading.t_mono - prev.t_mono
            if dt > 0:
                sample["interval_s"] = dt
                gen = _delta(c.get("generation_tokens"), prev.counters.get("generation_tokens"))
                prompt = _delta(c.get("prompt_tokens"), prev.counters.get("prompt_tokens"))
                sample["generation_tokens_per_s"] = None if gen is None else gen / dt
                sample["prompt_tokens_per_s"] = None if prompt is None else prompt / dt
        if rated is not None and reading.t_mono > rated.t_mono:
            span = reading.t_mono - rated.t_mono
            gen = _delta(c.get("generation_tokens"), rated.counters.get("generation_tokens"))
            prompt = _delta(c.get("prompt_tokens"), rated.counters.get("prompt_tokens"))
            sample["rate_window_s"] = span
            sample["windowed_generation_tokens_per_s"] = None if gen is None else gen / span
            sample["windowed_prompt_tokens_per_s"] = None if prompt is None else prompt / span
        if base is not None and reading.t_mono > base.t_mono:
            bc = base.counters
            sample["window_s"] = reading.t_mono - base.t_mono
            sample["prefix_cache_hit_rate_pct"] = _ratio_pct(
                _delta(c.get("prefix_cache_hits"), bc.get("prefix_cache_hits")),
                _delta(c.get("prefix_cache_queries"), bc.get("prefix_cache_queries")),
            )
            sample["preemptions_in_window"] = _delta(c.get("preemptions"), bc.get("preemptions"))
            drafts = _delta(c.get("spec_drafts"), bc.get("spec_drafts"))
            accepted = _delta(c.get("spec_accepted_tokens"), bc.get("spec_accepted_tokens"))
            sample["spec_acceptance_rate_pct"] = _ratio_pct(
                accepted, _delta(c.get("spec_draft_tokens"), bc.get("spec_draft_tokens"))
            )
            if drafts and drafts > 0 and accepted is not None:
                sample["spec_mean_acceptance_length"] = 1.0 + accepted / drafts
                if reading.spec_accepted_per_pos and len(base.spec_accepted_per_pos) == len(
                    reading.spec_accepted_per_pos
                ):
                    sample["spec_acceptance_per_position"] = tuple(
                        (a - b) / drafts
                        for a, b in zip(reading.spec_accepted_per_pos, base.spec_accepted_per_pos)
                    )
            for key, out in (("ttft", "ttft_s"), ("itl", "itl_s"), ("e2e", "e2e_s"), ("queue", "queue_s")):
                h_new = reading.histograms.get(key)
                h_old = base.histograms.get(key)
                if h_new is not None and h_old is not None:
                    sample[out] = percentiles(h_new.minus(h_old))
        if recent is not None and reading.t_mono > recent.t_mono:
            h_new, h_old = reading.histograms.get("ttft"), recent.histograms.get("ttft")
            if h_new is not None and h_old is not None:
                sample["ttft_recent_s"] = percentiles(h_new.minus(h_old))
        return EngineMetricsSample(**sample)

    def _base(self, t_mono: float, window_s: float) -> MetricsReading | None:
        """A window's base: the newest earlier reading at least ``window_s`` old, else the
        oldest one (the reading being added is not in the history yet)."""
        base = None
        for r in self._history:
            if r.t_mono <= t_mono - window_s:
                base = r
            else:
                break
        if base is None and self._history:
            base = self._history[0]
        return base


def _went_down(prev: MetricsReading, cur: MetricsReading) -> bool:
    for key in ("generation_tokens", "prompt_tokens", "requests_finished"):
        old, new = prev.counters.get(key), cur.counters.get(key)
        if old is not None and new is not None and new < old:
            return True
    return False


def down_sample(endpoint: str, error: str) -> EngineMetricsSample:
    """The sample of an endpoint that did not answer."""
    return EngineMetricsSample(endpoint=endpoint, t_mono=time.monotonic(), t_wall=time.time(), up=False, error=error)


def no_metrics_sample(endpoint: str, why: str) -> EngineMetricsSample:
    """The sample of an endpoint that answers but has no ``/metrics`` (not an engine down)."""
    return EngineMetricsSample(endpoint=endpoint, t_mono=time.monotonic(), t_wall=time.time(), up=True,
                               error=why, has_metrics=False)
