"""Admission rules: priorities, per-engine limits, the no-starvation bound, and the adaptive
limit's reading of an engine's load."""

from __future__ import annotations

import random

import pytest

from workstation.core.admission import LAG, LEAD, AdmissionQueue, Priority
from workstation.core.admission_limit import (
    AdaptiveLimit,
    AdmissionTarget,
    EngineLoad,
    OverCause,
    Verdict,
    overload,
)

F, N, B = Priority.FOREGROUND, Priority.NORMAL, Priority.BACKGROUND


def test_foreground_goes_first_background_lets_others_go() -> None:
    q: AdmissionQueue[str] = AdmissionQueue(1)
    assert q.request("busy")
    for k in ("n1", "n2"):
        assert not q.request(k)
    assert not q.request("bg", priority=B)
    assert not q.request("n3")
    assert not q.request("focus", priority=F)
    assert q.waiting == ("focus", "n1", "n2", "n3", "bg")
    assert q.release("busy") == ["focus"]
    assert q.release("focus") == ["n1"]


def test_reprioritize_keeps_the_arrival() -> None:
    q: AdmissionQueue[str] = AdmissionQueue(1)
    q.request("busy")
    for k in ("a", "b", "c"):
        q.request(k)
    q.reprioritize("c", F)
    assert q.waiting[0] == "c"
    q.reprioritize("c", N)
    assert q.waiting == ("a", "b", "c")


def test_a_background_request_is_never_starved() -> None:
    """However many normal requests keep coming, at most LAG later ones pass it."""
    q: AdmissionQueue[str] = AdmissionQueue(1)
    q.request("busy")
    q.request("bg", priority=B)
    holder, passed, n = "busy", 0, 0
    while True:
        n += 1
        q.request(f"n{n}")  # a steady stream of normal requests
        (admitted,) = q.release(holder)
        if admitted == "bg":
            break
        passed += 1
        holder = admitted
    assert LAG - 1 <= passed <= LAG


def test_foreground_lead_is_bounded_too() -> None:
    q: AdmissionQueue[str] = AdmissionQueue(1)
    q.request("busy")
    q.request("old")
    holder, passed, n = "busy", 0, 0
    while True:
        n += 1
        q.request(f"f{n}", priority=F)
        (admitted,) = q.release(holder)
        if admitted == "old":
            break
        passed += 1
        holder = admitted
    assert passed <= LEAD + 1


def test_engine_limits_apply_per_group_under_the_cap() -> None:
    q: AdmissionQueue[str] = AdmissionQueue(4)
    q.set_limit("a", 1)
    assert q.request("a1", group="a")
    assert not q.request("a2", group="a")  # engine a is at its limit…
    assert q.request("b1", group="b")  # …which does not hold b back
    assert q.blocked_by("a2") == "group"
    assert q.request("b2", group="b") and q.request("b3", group="b")
    assert not q.request("b4", group="b")
    assert q.blocked_by("b4") == "cap"
    assert q.set_limit("a", 3) == []  # room on a, but the cap is reached
    assert q.release("b1") == ["a2"]  # the first in line whose engine has room
    assert q.holding_in("a") == 2 and q.waiting_in("b") == 1
    assert q.set_limit("a", 1) == [] and q.holding_in("a") == 2  # lowering takes nothing away
    with pytest.raises(ValueError):
        q.set_limit("a", 0)


def test_regroup_moves_a_waiter_to_another_engine() -> None:
    q: AdmissionQueue[str] = AdmissionQueue(8)
    q.set_limit("dead", 1)
    q.request("x", group="dead")
    assert not q.request("y", group="dead")
    assert q.regroup("y", "alive") == ["y"] and q.group_of("y") == "alive"


def test_random_traffic_respects_every_limit_and_admits_everyone() -> None:
    rng = random.Random(7)
    q: AdmissionQueue[int] = AdmissionQueue(5)
    q.set_limit("a", 2)
    q.set_limit("b", 3)
    waiting_since: dict[int, int] = {}
    for step in range(3000):
        key = rng.randrange(40)
        if q.holds(key) and rng.random() < 0.6:
            for k in q.release(key):
                waiting_since.pop(k)
        elif not q.holds(key) and not q.is_waiting(key):
            if not q.request(key, group=rng.choice("ab"), priority=rng.choice(list(Priority))):
                waiting_since[key] = step
        if rng.random() < 0.02:
            for k in q.set_limit(rng.choice("ab"), rng.randint(1, 4)):
                waiting_since.pop(k)
        assert len(q.holding) <= q.cap
        for g in "ab":
            limit = q.limit(g)
            assert limit is None or q.holding_in(g) <= max(limit, 4)  # lowered limits drain, never grow
    for key in list(q.holding):
        q.release(key)
    while q.waiting:  # everyone still waiting is admitted once others are done
        for key in list(q.holding):
            q.release(key)
    assert not q.waiting


# ----------------------------------------------------------------------------- the adaptive limit
T = AdmissionTarget(ttft_p95_s=2.0, start=4, hold_s=5.0)


def load(t: float = 0.0, **kw: object) -> EngineLoad:
    return EngineLoad(t_s=t, **kw)  # type: ignore[arg-type]


FAST = {"ttft_p95_s": 0.3, "ttft_count": 20}
"""First tokens measured, well under the target."""


def test_slow_start_doubles_only_while_the_limit_holds_sessions_back() -> None:
    lim = AdaptiveLimit(T, ceiling=64)
    assert lim.limit == 4
    assert lim.observe(load(kv_usage_pct=10, waiting=0, **FAST), now_s=0, in_flight=4, queued=10).limit == 8
    assert lim.observe(load(1, kv_usage_pct=20, waiting=0, **FAST), now_s=1, in_flight=8, queued=5).limit == 8  # too soon
    assert lim.observe(load(2.5, kv_usage_pct=20, waiting=0, **FAST), now_s=2.5, in_flight=3, queued=0).limit == 8  # not binding
    assert lim.observe(load(3, kv_usage_pct=20, waiting=0, **FAST), now_s=3, in_flight=8, queued=5).limit == 16
    d = lim.observe(load(5.5, kv_usage_pct=30, **FAST), now_s=5.5, in_flight=16, queued=40)
    assert d.limit == 32 and d.verdict is Verdict.ROOM and d.reason == ""
    assert lim.observe(load(8, kv_usage_pct=30, **FAST), now_s=8, in_flight=32, queued=40).limit == 64
    assert lim.observe(load(11, kv_usage_pct=30, **FAST), now_s=11, in_flight=64, queued=40).limit == 64  # the ceiling


def test_no_growth_before_first_tokens_come_back() -> None:
    """A slow engine (the CPU one) has sent no first token yet: that is not room."""
    lim = AdaptiveLimit(T, ceiling=64)
    for i in range(10):
        d = lim.observe(load(i * 3, kv_usage_pct=5, waiting=0, ttft_count=i // 4), now_s=i * 3, in_flight=4,
                        queued=60)
        assert d.limit == 4 and d.verdict is Verdict.STEADY and d.reason == "first tokens pending: holding at 4 generating"


def test_a_full_kv_cache_holds_the_limit_and_says_why() -> None:
    lim = AdaptiveLimit(T, ceiling=64)
    lim.limit = 32
    d = lim.observe(load(10, kv_usage_pct=97.2, waiting=1), now_s=10, in_flight=32, queued=20)
    assert d.verdict is Verdict.FULL and d.reason == "engine full: KV 97 %" and d.limit == 32
    assert not lim.slow_start  # growth after it is by an eighth, not by doubling
    d = lim.observe(load(11, kv_usage_pct=97.2, waiting=0), now_s=11, in_flight=32, queued=20)
    assert d.limit == 33  # nothing ready inside the engine: one more, so its batch stays full
    assert lim.observe(load(12, kv_usage_pct=50, **FAST), now_s=12, in_flight=33, queued=20).limit == 37


def test_a_queue_or_preemptions_step_the_limit_down_once_per_half_hold() -> None:
    lim = AdaptiveLimit(T, ceiling=64)
    lim.limit = 32
    d = lim.observe(load(0, kv_usage_pct=97, waiting=9, running=32), now_s=0, in_flight=32, queued=20)
    assert d.verdict is Verdict.OVER and d.reason == "engine full: KV 97 %, 9 waiting" and d.limit == 28
    d = lim.observe(load(1, kv_usage_pct=97, waiting=9, running=28), now_s=1, in_flight=28, queued=20)
    assert d.limit == 28  # not again within half the hold
    d = lim.observe(load(3, waiting=3, running=8, kv_usage_pct=40), now_s=3, in_flight=8, queued=0)
    assert d.verdict is Verdict.STEADY  # a few waiting between steps: hold
    assert lim.observe(load(4, waiting=8, running=20), now_s=4, in_flight=20, queued=5).reason == "engine queue: 8 waiting"
    # preemptions: the counter's growth between readings
    p = AdaptiveLimit(T, ceiling=64)
    p.limit = 16
    assert p.observe(load(0, preemptions_total=40.0), now_s=0, in_flight=16, queued=1).verdict is not Verdict.OVER
    d = p.observe(load(1, preemptions_total=43.0, kv_usage_pct=99), now_s=1, in_flight=16, queued=1)
    assert d.verdict is Verdict.OVER and d.reason == "engine full: KV 99 %, 3 preempted" and d.limit == 14
    d = p.observe(load(5, preemptions_total=44.0), now_s=5, in_flight=14, queued=1)
    assert d.reason == "engine preempting: 1 request" and d.limit == 13


def test_a_slow_first_token_cuts_harder_and_holds_longer() -> None:
    lim = AdaptiveLimit(T, ceiling=64)
    lim.limit = 32
    slow = {"ttft_p95_s": 3.0, "ttft_count": 50}
    d = lim.observe(load(0, **slow), now_s=0, in_flight=32, queued=5)
    assert d.limit == 24 and d.reason == "slow first token: p95 3.0 s > 2.0 s"
    assert lim.observe(load(3, **slow), now_s=3, in_flight=24, queued=5).limit == 24  # the window lags
    assert lim.observe(load(5, **slow), now_s=5, in_flight=24, queued=5).limit == 18
    d = lim.observe(load(6, ttft_p95_s=9.0, ttft_count=2), now_s=6, in_flight=18, queued=5)
    assert d.verdict is Verdict.STEADY and d.limit == 18  # two observations are not enough to judge either way


def test_what_makes_an_engine_over_is_typed_and_the_first_found_names_it() -> None:
    slow = {"ttft_p95_s": 3.0, "ttft_count": 9}
    queue = {"waiting": 9, "running": 8}
    over = overload(load(kv_usage_pct=99, **slow, **queue), T, preempted=2)
    assert over is not None and over.cause is OverCause.SLOW_FIRST_TOKEN
    assert over.reason == "slow first token: p95 3.0 s > 2.0 s"
    over = overload(load(kv_usage_pct=99, **queue), T, preempted=2)
    assert over is not None and (over.cause, over.reason) == (OverCause.PREEMPTING, "engine full: KV 99 %, 2 preempted")
    over = overload(load(**queue), T)
    assert over is not None and (over.cause, over.reason) == (OverCause.QUEUE, "engine queue: 9 waiting")
    assert overload(load(kv_usage_pct=99, waiting=1, **FAST), T) is None  # full, not over


def test_the_cut_starts_from_what_was_in_flight() -> None:
    lim = AdaptiveLimit(T, ceiling=64)
    lim.limit = 64
    assert lim.observe(load(ttft_p95_s=5.0, ttft_count=9), now_s=0, in_flight=12, queued=0).limit == 9


def test_no_readings_means_the_fleet_cap_and_a_reason() -> None:
    lim = AdaptiveLimit(T, ceiling=32)
    lim.limit = 8
    for reading in (None, load(up=False), load(0.0, kv_usage_pct=10)):
        d = lim.observe(reading, now_s=100.0, in_flight=8, queued=3)  # the last one is stale
        assert d.verdict is Verdict.BLIND and d.limit == 32 and "fleet cap applies" in d.reason
    assert lim.limit == 8  # steering resumes where it was once readings come back


def test_limits_stay_between_the_floor_and_the_ceiling() -> None:
    lim = AdaptiveLimit(AdmissionTarget(start=100, hold_s=0.0), ceiling=10)
    assert lim.limit == 10
    for i in range(10):
        lim.observe(load(i, ttft_p95_s=9.0, ttft_count=9), now_s=i, in_flight=1, queued=5)
    assert lim.limit == 1
    assert lim.set_ceiling(0) == 1
    with pytest.raises(ValueError):
        AdmissionTarget(ttft_p95_s=0)
    with pytest.raises(ValueError):
        AdmissionTarget(kv_room_pct=99, kv_full_pct=90)


def test_an_endpoint_without_metrics_gets_the_fleet_cap_not_a_held_limit() -> None:
    # an outside API answers /metrics with 404: its sample is up but says nothing; without
    # this, sessions generating on it read as "first tokens pending" and held at the start
    lim = AdaptiveLimit(T, ceiling=64)
    d = lim.observe(EngineLoad(t_s=0.0, has_metrics=False), now_s=0.1, in_flight=4, queued=60)
    assert (d.limit, d.verdict) == (64, Verdict.BLIND) and "no /metrics" in d.reason
