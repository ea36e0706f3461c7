"""Pure rules: session state machine, fair admission, least-loaded routing, token rate."""

from __future__ import annotations

import asyncio

import pytest

from workstation.core.admission import AdmissionQueue, least_loaded
from workstation.core.endpoints import Endpoint
from workstation.core.errors import UserError
from workstation.core.session_state import (
    LEGAL_TRANSITIONS,
    IllegalTransition,
    SessionState as S,
    check_transition,
    state_after_restart,
)
from workstation.fleet.gate import GenerationGate
from workstation.fleet.routing import Router
from workstation.fleet.session import SessionSpec
from workstation.telemetry.streams import StreamCounters


def test_every_state_has_rules_and_no_self_loops() -> None:
    assert set(LEGAL_TRANSITIONS) == set(S)
    for old, news in LEGAL_TRANSITIONS.items():
        assert old not in news


def test_illegal_transition_says_what_is_allowed() -> None:
    assert check_transition(S.READY, S.QUEUED) is S.QUEUED
    with pytest.raises(IllegalTransition, match="from done to running.*allowed: queued"):
        check_transition(S.DONE, S.RUNNING)


def test_state_after_restart() -> None:
    assert state_after_restart(S.RUNNING) is S.QUEUED
    assert state_after_restart(S.AWAITING_APPROVAL) is S.QUEUED
    assert state_after_restart(S.ENGINE_WAIT) is S.QUEUED
    assert state_after_restart(S.PREPARING) is S.FAILED
    for keep in (S.PAUSED, S.DONE, S.NEEDS_INPUT, S.READY, S.STOPPED, S.FAILED):
        assert state_after_restart(keep) is keep


def test_admission_is_fifo_and_round_robin() -> None:
    q: AdmissionQueue[str] = AdmissionQueue(2)
    assert q.request("a") and q.request("b")
    assert not q.request("c") and not q.request("d")
    assert q.release("a") == ["c"]
    assert not q.request("a")  # asks again: joins the back, behind d
    assert q.release("b") == ["d"]
    assert q.release("c") == ["a"]
    assert q.holding == {"d", "a"} and q.waiting == ()


def test_admission_cap_changes_and_cancel() -> None:
    q: AdmissionQueue[int] = AdmissionQueue(1)
    assert q.request(1)
    for k in (2, 3, 4):
        assert not q.request(k)
    assert q.release(3) == []  # stops waiting
    assert q.set_cap(3) == [2, 4]
    assert q.set_cap(1) == []  # lowering takes no slot away
    assert len(q.holding) == 3
    assert q.release(1) == [] and q.release(2) == []
    assert q.holding == {4}
    with pytest.raises(ValueError, match="at least 1"):
        AdmissionQueue(0)


def test_least_loaded_ties_go_first() -> None:
    assert least_loaded({"a": 2, "b": 1, "c": 1}, ["a", "b", "c"]) == "b"
    assert least_loaded({}, ["x", "y"]) == "x"
    with pytest.raises(ValueError):
        least_loaded({}, [])


def _ep(name: str) -> Endpoint:
    return Endpoint(base_url=f"http://127.0.0.1:1/{name}", api_key="", model="m", name=name)


def test_router_sticks_and_balances() -> None:
    r = Router([_ep("e1"), _ep("e2")])
    picks = []
    for i in range(4):
        picks.append(r.assign(f"s{i}").name)
        r.set_active(f"s{i}", True)
    assert picks == ["e1", "e2", "e1", "e2"]
    r.set_active("s0", False)
    r.set_active("s2", False)  # e1 now idle
    assert r.assign("s4").name == "e1"
    assert r.assign("s1", previous="e2").name == "e2"  # stays where it was
    assert r.assign("s9", previous="gone").name in ("e1", "e2")
    with pytest.raises(UserError, match="no endpoint named"):
        r.assign("s5", pinned="e3")
    with pytest.raises(UserError, match="unique"):
        Router([_ep("a"), _ep("a")])
    with pytest.raises(UserError, match="no engine endpoint"):
        Router([])


async def test_gate_caps_and_hands_over_on_cancel() -> None:
    changes: list[tuple[int, int, int]] = []
    gate = GenerationGate(2, on_change=lambda g, w, c: changes.append((g, w, c)))
    inside = 0
    peak = 0
    release = asyncio.Event()

    async def turn(sid: str) -> None:
        nonlocal inside, peak
        async with gate.slot(sid):
            inside += 1
            peak = max(peak, inside)
            await release.wait()
            inside -= 1

    tasks = [asyncio.create_task(turn(f"s{i}")) for i in range(5)]
    await asyncio.sleep(0.01)
    assert gate.generating == 2 and gate.waiting == 3
    tasks[3].cancel()  # a waiter goes away (pause)
    await asyncio.sleep(0.01)
    assert gate.waiting == 2
    release.set()
    await asyncio.gather(*tasks, return_exceptions=True)
    assert peak == 2 and gate.peak_generating == 2
    assert gate.generating == 0 and gate.waiting == 0
    assert all(c[0] <= 2 for c in changes)


def test_token_rate_is_quiet_when_idle() -> None:
    """The fleet's (and the whole app's) one token rate: ``StreamCounters``."""
    now = [0.0]
    rate = StreamCounters(window_s=5.0, clock=lambda: now[0])
    for i in range(10):
        now[0] = 100.0 + i * 0.5
        rate.on_chunk("s", 10)
    now[0] = 105.0
    assert rate.rate("s") == pytest.approx(90 / 5.0, rel=0.2)
    now[0] = 200.0
    assert rate.rate("s") == 0.0


def test_spec_round_trips_and_ignores_unknown_keys() -> None:
    spec = SessionSpec(task="t", repo="/r", auto_approve=("read", "edit"))
    data = spec.to_json() | {"future_field": 1}
    assert SessionSpec.from_json(data) == spec
