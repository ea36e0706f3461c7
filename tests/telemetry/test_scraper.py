"""The /metrics scraper over HTTP: a scripted server for determinism, then the real engine."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from tests.telemetry.test_vllm_metrics import exposition
from workstation.core.endpoints import Endpoint
from workstation.engine.chat_client import ChatClient
from workstation.engine.http import make_http_client
from workstation.telemetry.scraper import MetricsScraper
from workstation.telemetry.streams import StreamCounters

EP = Endpoint(base_url="http://engine.test", api_key="k", model="smollm2", name="local")


def scripted(responses: list) -> httpx.AsyncClient:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        item = responses.pop(0)
        if isinstance(item, Exception):
            raise item
        if isinstance(item, int):
            return httpx.Response(item, text="nope")
        return httpx.Response(200, text=item)

    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    client.seen = seen  # type: ignore[attr-defined]
    return client


async def test_scrapes_derive_rates_and_send_the_key() -> None:
    async with scripted([exposition(gen=100), exposition(gen=400, running=4)]) as http:
        s = MetricsScraper(http, EP)
        got: list = []
        s.sampled.connect(got.append)
        first = await s.scrape_once()
        await asyncio.sleep(0.05)
        second = await s.scrape_once()
        assert first.up and first.generation_tokens_per_s is None
        assert second.up and second.running == 4
        assert second.generation_tokens_per_s == pytest.approx(300 / second.interval_s)
        assert got == [first, second] and s.latest is second
        assert http.seen[0].url == "http://engine.test/metrics"
        assert http.seen[0].headers["authorization"] == "Bearer k"


async def test_down_endpoint_is_a_sample_not_an_exception() -> None:
    async with scripted([httpx.ConnectError("refused"), 503, exposition(gen=5), exposition(gen=25)]) as http:
        s = MetricsScraper(http, EP)
        a = await s.scrape_once()
        b = await s.scrape_once()
        assert not a.up and "cannot reach http://engine.test/metrics" in a.error
        assert not b.up and "HTTP 503" in b.error
        assert a.to_dict()["generation_tokens_per_s"] == "n/a"
        c = await s.scrape_once()
        d = await s.scrape_once()
        assert c.up and c.generation_tokens_per_s is None  # back up: a fresh baseline
        assert c.windowed_generation_tokens_per_s is None  # its rate window too
        assert d.generation_tokens_per_s is not None and d.generation_tokens_per_s > 0
        assert d.windowed_generation_tokens_per_s == pytest.approx(d.generation_tokens_per_s)  # one interval so far
        assert d.rate_window_s == pytest.approx(d.interval_s)


async def test_the_set_gives_every_scraper_its_rate_window() -> None:
    """``ScraperSet(rate_window_s=…)`` → each ``MetricsScraper`` → its ``MetricsDeriver``,
    and a scraper pointed at a restarted engine keeps it."""
    from workstation.telemetry.scrapers import ScraperSet
    from workstation.telemetry.streams import TOKEN_RATE_WINDOW_S

    async with scripted([]) as http:
        default = ScraperSet(http).add(EP)
        assert default.deriver.rate_window_s == TOKEN_RATE_WINDOW_S
        scrapers = ScraperSet(http, window_s=30.0, rate_window_s=3.0)
        scraper = scrapers.add(EP)
        assert (scraper.deriver.window_s, scraper.deriver.rate_window_s) == (30.0, 3.0)
        moved = Endpoint(base_url="http://engine.test:9", api_key="k2", model="smollm2", name="local")
        scrapers.follow(moved)  # the engine restarted on another port
        assert scrapers.scrapers["local"] is scraper and scraper.endpoint == moved
        assert (scraper.deriver.window_s, scraper.deriver.rate_window_s) == (30.0, 3.0)
        other = scrapers.add(Endpoint(base_url="http://other.test", api_key="", model="m", name="other"))
        assert other.deriver.rate_window_s == 3.0
        await scrapers.aclose()


async def test_periodic_loop_starts_and_stops() -> None:
    async with scripted([exposition(gen=i) for i in range(100)]) as http:
        s = MetricsScraper(http, EP, interval_s=0.05)
        got: list = []
        s.sampled.connect(got.append)
        await s.start()
        for _ in range(100):
            if len(got) >= 3:
                break
            await asyncio.sleep(0.02)
        await s.aclose()
        assert len(got) >= 3 and not s.running


@pytest.mark.engine
async def test_real_engine_meters_match_the_stream(smollm2_engine: Endpoint) -> None:
    """Scrape the real vLLM engine while one stream runs through ChatClient; the stream's
    usage, the chunk counter and the engine's generation counter must agree."""
    async with make_http_client(max_connections=8) as http:
        scraper = MetricsScraper(http, smollm2_engine, interval_s=0.5)
        counters = StreamCounters()
        before = await scraper.scrape_once()
        assert before.up and before.model
        rates: list[float] = []
        windowed: list[float] = []
        scraper.sampled.connect(lambda s: rates.append(s.generation_tokens_per_s or 0.0))
        scraper.sampled.connect(lambda s: windowed.append(s.windowed_generation_tokens_per_s or 0.0))
        await scraper.start()
        client = ChatClient(http, smollm2_engine)
        usage = None
        async for delta in client.stream_chat(
            [{"role": "user", "content": "Count from one to forty in words."}],
            max_tokens=64, temperature=0.0, extra={"ignore_eos": True},
        ):
            if delta.content:
                counters.on_chunk("s1")
            if delta.usage is not None:
                usage = delta.usage
                counters.on_usage("s1", usage)
        await asyncio.sleep(0.6)
        await scraper.aclose()
        after = await scraper.scrape_once()
    assert usage is not None and usage.completion_tokens == 64
    s1 = counters.session("s1")
    assert s1 is not None and s1.completion_tokens == 64 and s1.requests == 1
    # about one SSE event per token, but a token whose text is empty (an end-of-turn token
    # under ignore_eos, half a UTF-8 character) sends none: the chunk count is a live
    # estimate at or below the usage count (measured: 59 content chunks for 64 tokens)
    assert 0.8 * 64 <= s1.streamed_chunks <= 64
    # the engine counted at least our 64 tokens (other clients of the dev engine may add more)
    assert after.generation_tokens_total - before.generation_tokens_total >= 64
    assert after.prompt_tokens_total - before.prompt_tokens_total >= usage.prompt_tokens
    assert max(rates) > 0 and max(windowed) > 0


async def test_an_endpoint_without_metrics_is_no_metrics_not_down() -> None:
    """An outside OpenAI-compatible server answers chats but has no /metrics (HTTP 404): the
    sample says so and stays up; the cost meter takes nothing from it."""
    from tests.helpers.scripted_server import ScriptedServer

    async with ScriptedServer(metrics=False) as server:
        async with make_http_client() as http:
            s = MetricsScraper(http, server.endpoint)
            a = await s.scrape_once()
            b = await s.scrape_once()
    assert a.up and not a.has_metrics and "has no engine metrics (HTTP 404)" in (a.error or "")
    assert b.up and not b.has_metrics and b.generation_tokens_per_s is None and b.running is None
