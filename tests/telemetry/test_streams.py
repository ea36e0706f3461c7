from __future__ import annotations

from dataclasses import dataclass

import pytest

from workstation.telemetry.streams import StreamCounters


@dataclass
class Usage:
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int = 0


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_usage_totals_per_session_and_overall() -> None:
    c = StreamCounters(clock=Clock())
    c.on_usage("a", Usage(100, 20, 64))
    c.on_usage("a", Usage(150, 30, 128))
    c.on_usage("b", Usage(10, 5))
    a = c.session("a")
    assert a is not None
    assert (a.requests, a.prompt_tokens, a.cached_prompt_tokens, a.completion_tokens) == (2, 250, 192, 50)
    totals = c.totals()
    assert (totals.prompt_tokens, totals.cached_prompt_tokens, totals.output_tokens) == (260, 192, 55)
    assert c.session("nobody") is None
    assert [s.session_id for s in c.snapshot()] == ["a", "b"]


def test_live_rate_from_chunks_over_the_window() -> None:
    clock = Clock()
    c = StreamCounters(window_s=5.0, clock=clock)
    for _ in range(5):  # 40 chunks per second for 5 s
        for _ in range(4):
            for _ in range(10):
                c.on_chunk("a")
            clock.t += 0.25
    clock.t -= 0.25  # now is the time of the last chunk
    a = c.session("a")
    assert a is not None and a.streamed_chunks == 200
    assert a.tokens_per_s == pytest.approx(40.0, rel=0.06)
    clock.t += 30  # quiet since: rate falls to zero, counts stay
    assert c.session("a").tokens_per_s == 0.0
    assert c.session("a").streamed_chunks == 200
    assert c.tokens_per_s() == 0.0


def test_forget_and_to_dict() -> None:
    c = StreamCounters(clock=Clock())
    c.on_chunk("a", 3)
    assert c.session("a").to_dict()["streamed_chunks"] == 3
    c.forget("a")
    assert c.snapshot() == ()
