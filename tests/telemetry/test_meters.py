"""The meters service: events, series, CSV, app metrics endpoint, one-shot snapshot."""

from __future__ import annotations

import asyncio
import csv
import json
import math
from pathlib import Path

import httpx
import pytest

from tests.helpers.scrapes import scrape_at
from tests.telemetry.fake_nvml import FakeNvml, device
from tests.telemetry.test_vllm_metrics import exposition
from workstation.core.cost import SelfHostAssumptions, SelfHostMode
from workstation.core.endpoints import Endpoint
from workstation.telemetry.meters import Meters, unit_of
from workstation.telemetry.nvml import NvmlReader
from workstation.telemetry.prices import load_price_table

EP = Endpoint(base_url="http://engine.test", api_key="", model="smollm2", name="local")


class Engine:
    """A scripted engine whose counters grow by 100 generated tokens per scrape."""

    def __init__(self) -> None:
        self.scrapes = 0

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.scrapes += 1
        n = self.scrapes
        return httpx.Response(200, text=exposition(gen=100 * n, prompt=300 * n, running=2, waiting=1, kv=0.5))


def make_meters(http: httpx.AsyncClient, **kw) -> Meters:  # type: ignore[no-untyped-def]
    fake = FakeNvml(devices=[device(), device(uuid="GPU-1", util=(5, 1), power_mw=130_000)])
    return Meters(
        http,
        endpoints=[EP],
        gpu_reader=NvmlReader(fake),
        prices=load_price_table(),
        api_model="gpt-4.1-mini",
        assumptions=SelfHostAssumptions(mode=SelfHostMode.GPU_HOURLY, gpu_hourly_usd=3.6),
        **kw,
    )


def test_units_from_names() -> None:
    assert unit_of("gpu0.power_w") == "W"
    assert unit_of("gpu1.memory_used_bytes") == "B"
    assert unit_of("engine.local.generation_tokens_per_s") == "tok/s"
    assert unit_of("engine.local.ttft_p99_s") == "s"
    assert unit_of("cost.api_usd_per_m_tokens") == "$/M tok"
    assert unit_of("engine.local.waiting") == "requests"


async def test_collect_once_reads_every_meter(tmp_path: Path) -> None:
    async with httpx.AsyncClient(transport=httpx.MockTransport(Engine())) as http:
        meters = make_meters(http)
        try:
            snap = await meters.collect_once(0.05)
        finally:
            await meters.aclose()
    assert snap.gpu is not None and snap.gpu.ok and len(snap.gpu.devices) == 2
    assert snap.host is not None
    (e,) = snap.engines
    assert e.up and e.generation_tokens_per_s > 0 and e.running == 2 and e.kv_cache_usage_pct == 50.0
    assert snap.cost is not None and snap.cost.tokens.output_tokens == 100
    assert snap.cost.assumptions.gpu_count == 2  # GPU rental: every GPU NVML sees
    out = json.loads(json.dumps(snap.to_dict()))
    assert out["gpu"]["devices"][1]["power_w"] == 130.0
    assert out["cost"]["api_model"] == "openai/gpt-4.1-mini"
    assert out["cost"]["energy_j"] == 0.0  # measured: the scripted energy counters did not move
    # series for the charts
    names = meters.series.names()
    for name in ("gpu0.util_pct", "gpu1.power_w", "host.cpu_pct", "engine.local.generation_tokens_per_s",
                 "engine.local.running", "cost.savings_pct", "sessions.tokens_per_s"):
        assert name in names
    assert meters.series.get("gpu1.power_w").unit == "W"
    rows = meters.export_csv(tmp_path / "m.csv")
    with (tmp_path / "m.csv").open() as fh:
        table = list(csv.reader(fh))
    assert table[0] == ["time_utc", "t_s", "series", "unit", "value"]
    assert len(table) == rows + 1
    power = [r for r in table if r[2] == "gpu1.power_w"]
    assert power and power[0][3] == "W" and float(power[0][4]) == 130.0
    assert any(r[4] == "n/a" for r in table)  # first tok/s reading has no rate yet


async def test_running_service_emits_events_and_serves_app_metrics() -> None:
    engine = Engine()
    async with httpx.AsyncClient(transport=httpx.MockTransport(engine)) as http:
        meters = make_meters(http, gpu_interval_s=0.05, metrics_interval_s=0.05, app_metrics_port=0)
        events: dict[str, list] = {k: [] for k in ("gpu", "host", "engine", "cost", "sessions", "series")}
        meters.gpu_sampled.connect(events["gpu"].append)
        meters.host_sampled.connect(events["host"].append)
        meters.engine_sampled.connect(events["engine"].append)
        meters.cost_updated.connect(events["cost"].append)
        meters.sessions_sampled.connect(events["sessions"].append)
        meters.series_updated.connect(events["series"].append)
        meters.streams.on_chunk("s1", 5)
        await meters.start()
        try:
            for _ in range(300):
                if len(events["engine"]) >= 3 and events["cost"]:
                    break
                await asyncio.sleep(0.02)
            url = meters.app_metrics_url
            assert url is not None and url.startswith("http://127.0.0.1:")
            async with httpx.AsyncClient() as plain:
                body = (await plain.get(url)).text
        finally:
            await meters.aclose()
    assert len(events["gpu"]) >= 3 and events["host"] and len(events["engine"]) >= 3
    assert events["cost"][-1].tokens.output_tokens >= 100
    assert events["sessions"][-1][0].session_id == "s1"
    assert any("gpu0.power_w" in names for names in events["series"])
    assert 'workstation_gpu_power_watts{gpu="1",name="NVIDIA H200"} 130.0' in body
    assert 'workstation_engine_requests_running{endpoint="local"} 2.0' in body
    assert "workstation_cost_saved_usd" in body
    # stopped: the app-metrics port is closed again
    assert meters.app_metrics_url is None
    with pytest.raises(httpx.ConnectError):
        async with httpx.AsyncClient() as plain:
            await plain.get(url)


async def test_endpoints_come_and_go_and_price_switches() -> None:
    async with httpx.AsyncClient(transport=httpx.MockTransport(Engine())) as http:
        meters = make_meters(http)
        await meters.add_endpoint(Endpoint(base_url="http://other.test", api_key="", model="m", name="other"))
        assert set(meters.scrapers) == {"local", "other"}
        await meters.remove_endpoint("local")
        assert set(meters.scrapers) == {"other"}
        assert meters.set_api_price("claude-haiku-4-5").provider == "anthropic"
        assert meters.set_api_price("no-such-model") is None
        meters.set_assumptions(SelfHostAssumptions(mode=SelfHostMode.GPU_HOURLY, gpu_hourly_usd=2.0, gpu_count=1))
        await meters.gpu.read_once()
        assert meters.cost.assumptions.gpu_count == 1  # the user's count stays
        meters.set_engine_pid(12345)
        assert meters.engine_pid() == 12345
        await meters.aclose()


def test_one_token_rate_the_engine_count_where_it_has_one_else_the_streams() -> None:
    """The strip, the status bar and the recording's caption read ``Meters.tokens_per_s``."""
    import time

    from workstation.telemetry.vllm_metrics import EngineMetricsSample

    meters = make_meters(httpx.AsyncClient())
    meters.streams.on_chunk("s1", 40)
    streamed = meters.streams.tokens_per_s()
    assert streamed > 0 and meters.tokens_per_s == streamed  # no engine sample yet: the streams
    seen: list[float | None] = []
    meters.rate_updated.connect(seen.append)

    def sample(endpoint: str, rate: float | None, *, up: bool = True, metrics: bool = True) -> EngineMetricsSample:
        return EngineMetricsSample(endpoint=endpoint, t_mono=time.monotonic(), t_wall=time.time(), up=up,
                                   has_metrics=metrics, windowed_generation_tokens_per_s=rate)

    meters._on_engine_sampled(sample("a", 900.0))
    meters._on_engine_sampled(sample("b", 100.0))
    assert meters.tokens_per_s == 1000.0  # both engines' own counts, also what no pane shows
    meters.tick()
    assert seen == [1000.0] and meters.rate == 1000.0  # what the caption reads between ticks
    meters._on_engine_sampled(sample("b", None, up=False))
    assert meters.tokens_per_s == 900.0  # an engine down no longer counts
    meters._on_engine_sampled(sample("a", None, metrics=False))  # an outside API: no /metrics
    assert meters.tokens_per_s == meters.streams.tokens_per_s()


async def test_with_no_price_set_the_gpu_hour_costs_what_its_model_typically_rents_for(tmp_path: Path) -> None:
    from workstation.config import Settings

    settings = Settings(data_dir=tmp_path)  # no gpu_hourly_usd, no hardware price
    async with httpx.AsyncClient(transport=httpx.MockTransport(Engine())) as http:
        meters = Meters.from_settings(settings, http, endpoints=[EP],
                                      gpu_reader=NvmlReader(FakeNvml(devices=[device(), device(uuid="GPU-1")])))
        assert meters.cost.assumptions.mode is SelfHostMode.ENERGY  # until a GPU is seen
        try:
            snap = await meters.collect_once(0.05)
        finally:
            await meters.aclose()
    assert snap.cost is not None
    a = snap.cost.assumptions
    assert (a.mode, a.gpu_hourly_usd, a.gpu_count) == (SelfHostMode.GPU_HOURLY, 3.80, 2)  # two H200s
    # a price the user set is theirs: no typical one replaces it
    mine = Settings(data_dir=tmp_path, telemetry={"gpu_hourly_usd": 2.0})
    async with httpx.AsyncClient(transport=httpx.MockTransport(Engine())) as http:
        meters = Meters.from_settings(mine, http, endpoints=[EP], gpu_reader=NvmlReader(FakeNvml(devices=[device()])))
        try:
            snap = await meters.collect_once(0.05)
        finally:
            await meters.aclose()
    assert snap.cost is not None and snap.cost.assumptions.gpu_hourly_usd == 2.0


def test_the_strip_and_the_panes_count_over_the_same_window() -> None:
    """A CPU engine generates in bursts between prefills of several seconds: the last
    one-second scrape reads 0 while a pane's streamed rate (5 s) still shows 3 t/s. The strip
    read the scrape's rate and said 0 tok/s; it reads the engine's counter over the streams'
    window now (the scrape's windowed rate: the meters' scrapers count over the streams'
    window), and never says less than the streams."""
    from workstation.telemetry.streams import StreamCounters

    now = [100.0]
    streams = StreamCounters(window_s=5.0, clock=lambda: now[0])
    meters = make_meters(httpx.AsyncClient(), streams=streams)
    scraper = meters.scrapers["local"]
    assert scraper.deriver.rate_window_s == streams.window_s == 5.0

    for t, total in ((95.0, 1000.0), (96.0, 1005.0), (97.0, 1010.0), (98.0, 1015.0), (99.0, 1015.0),
                     (100.0, 1015.0)):
        if t < 98.0:
            now[0] = t + 0.5
            streams.on_chunk("s1", 5)  # what the pane's session streamed of those tokens
        last = scrape_at(scraper, t, generated=total)
    now[0] = 100.0
    pane = streams.rate("s1")
    assert pane == pytest.approx(3.0)  # 15 tokens streamed in the last 5 s: the pane says 3 t/s
    assert last.generation_tokens_per_s == 0.0  # what the strip said: the last second's
    assert meters.tokens_per_s == pytest.approx(3.0)  # the strip says what the pane says

    scrape_at(scraper, 101.0, generated=5.0)  # the engine restarted: its counter went down, the window starts again
    assert meters.tokens_per_s == pytest.approx(streams.tokens_per_s())  # no rate of its own yet
    scrape_at(scraper, 102.0, generated=45.0)
    assert meters.tokens_per_s == pytest.approx(40.0)


def test_the_strip_never_says_less_than_the_panes() -> None:
    """The guided protocol's drafts make the engine count more than any pane shows; the
    panes' streams can count a burst the engine's window has not seen yet (a scrape is up
    to a second old): the strip shows the larger."""
    from workstation.telemetry.streams import StreamCounters

    now = [10.0]
    streams = StreamCounters(clock=lambda: now[0])
    meters = make_meters(httpx.AsyncClient(), streams=streams)
    scraper = meters.scrapers["local"]
    scrape_at(scraper, 5.0, generated=0.0)
    scrape_at(scraper, 10.0, generated=10.0)  # 2 tok/s over the window
    streams.on_chunk("s1", 30)  # 6 t/s streamed
    assert meters.tokens_per_s == pytest.approx(6.0)
    scrape_at(scraper, 11.0, generated=60.0)  # the engine's count catches up, and counts drafts too
    assert meters.tokens_per_s == pytest.approx(10.0)


def test_the_meters_scrapers_count_over_the_streams_window() -> None:
    """One window, chosen in one place (``streams.TOKEN_RATE_WINDOW_S``): the meters' own
    scrapers take their streams'; a shared set made with another window is said in the log."""
    import logging

    from workstation.telemetry.scrapers import ScraperSet
    from workstation.telemetry.streams import TOKEN_RATE_WINDOW_S, StreamCounters

    meters = make_meters(httpx.AsyncClient())
    assert meters.streams.window_s == meters.engines.rate_window_s == TOKEN_RATE_WINDOW_S == 5.0
    short = make_meters(httpx.AsyncClient(), streams=StreamCounters(window_s=2.0))
    assert short.scrapers["local"].deriver.rate_window_s == 2.0
    shared = ScraperSet(httpx.AsyncClient())
    assert shared.rate_window_s == TOKEN_RATE_WINDOW_S  # what the service factory makes
    logger = logging.getLogger("workstation.telemetry.meters")
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    logger.addHandler(handler)
    try:
        make_meters(httpx.AsyncClient(), scrapers=shared)
        assert not records
        make_meters(httpx.AsyncClient(), scrapers=shared, streams=StreamCounters(window_s=2.0))
    finally:
        logger.removeHandler(handler)
    assert len(records) == 1 and "will disagree" in records[0].getMessage()


async def test_the_per_engine_series_count_over_the_same_window_as_the_strip() -> None:
    """The meters dock charts ``engine.<name>.generation_tokens_per_s``: recorded from the
    one-second scrape, it jumped between 0 and the burst's rate on a CPU engine while the strip
    beside it read the counter over 5 s. The series holds the scrape's windowed rate now, the
    strip's (and the prompt tokens' likewise)."""
    async with httpx.AsyncClient(transport=httpx.MockTransport(lambda r: httpx.Response(503))) as http:
        meters = make_meters(http)
        scraper = meters.scrapers["local"]
        samples = [scrape_at(scraper, t, generated=total, prompt=2 * total) for t, total in (
            (95.0, 1000.0), (96.0, 1005.0), (97.0, 1010.0), (98.0, 1015.0), (99.0, 1015.0), (100.0, 1015.0))]
        assert [s.generation_tokens_per_s for s in samples[1:]] == [5.0, 5.0, 5.0, 0.0, 0.0]  # the scrape's own
        generated = list(meters.series.get("engine.local.generation_tokens_per_s").values())
        prompt = list(meters.series.get("engine.local.prompt_tokens_per_s").values())
        # no one-second zeros between bursts: 15 tokens over the last 4, then 5 seconds
        assert math.isnan(generated[0]) and math.isnan(prompt[0])  # one reading: no rate yet
        assert generated[1:] == pytest.approx([5.0, 5.0, 5.0, 3.75, 3.0])
        assert prompt[1:] == pytest.approx([10.0, 10.0, 10.0, 7.5, 6.0])
        assert generated[-1] == pytest.approx(meters.tokens_per_s)  # what the strip says
        # down (a real scrape answered 503): nothing to chart, and the window starts again
        down = await scraper.scrape_once()
        assert not down.up
        scrape_at(scraper, 102.0, generated=1100.0)
        after = list(meters.series.get("engine.local.generation_tokens_per_s").values())
        assert len(after) == 8 and all(math.isnan(v) for v in after[-2:])  # a gap, then no rate from one reading
        scrape_at(scraper, 103.0, generated=1110.0)
        assert meters.series.get("engine.local.generation_tokens_per_s").values()[-1] == pytest.approx(10.0)


async def test_a_removed_engines_last_rate_leaves_the_total() -> None:
    meters = make_meters(httpx.AsyncClient())
    scraper = meters.scrapers["local"]
    scrape_at(scraper, 5.0, generated=0.0)
    scrape_at(scraper, 10.0, generated=10.0)
    assert meters.tokens_per_s == pytest.approx(2.0)
    await meters.remove_endpoint("local")
    assert not meters.tokens_per_s
