"""The fleet's admission with a scripted agent: engine readings steer how many sessions
generate and the window is told why a session waits; priorities from the session's state;
tools hold no slot; budgets pause a session in ``budget_reached``."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import httpx

from tests.fleet.fakes import Script, factory
from workstation.core import agent_events as ev
from workstation.core.admission import Priority
from workstation.core.cost import ApiPrice
from workstation.core.endpoints import Endpoint
from workstation.core.errors import UserError
from workstation.core.fleet_events import (
    AdmissionChanged,
    FleetCostChanged,
    GenerationSlotsChanged,
    SessionAgentEvent,
    SessionStateChanged,
    SessionStatsChanged,
    SessionWaitChanged,
)
from workstation.core.session_state import SessionState as S
from workstation.fleet.service import Fleet
from workstation.fleet.session import SessionSpec
from workstation.telemetry.vllm_metrics import EngineMetricsSample, Percentiles

EP = Endpoint(base_url="http://127.0.0.1:9", api_key="k", model="m", name="e1")


def make_fleet(data: Path, http: httpx.AsyncClient, script: Script, cap: int = 32, **kw: object) -> Fleet:
    return Fleet(data_dir=data, endpoints=(EP,), agent_factory=factory(script), http=http,
                 max_generating=cap, engine_poll_s=0.05, **kw)  # type: ignore[arg-type]


def sample(*, up: bool = True, kv: float | None = None, waiting: int | None = 0, running: int | None = 0,
           ttft_p95_s: float | None = None) -> EngineMetricsSample:
    recent = None if ttft_p95_s is None else Percentiles(ttft_p95_s, ttft_p95_s, ttft_p95_s, ttft_p95_s, None, 20)
    return EngineMetricsSample(endpoint="e1", t_mono=time.monotonic(), t_wall=time.time(), up=up,
                               kv_cache_usage_pct=kv, waiting=waiting, running=running, ttft_recent_s=recent)


async def until(cond, timeout_s: float = 20.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, "condition not reached"
        await asyncio.sleep(0.01)


async def test_engine_readings_steer_the_limit_and_say_why_sessions_wait(
        tmp_path: Path, git_repo: Path, mock_http: httpx.AsyncClient) -> None:
    script = Script(steps=4, turn_s=0.25)
    fleet = make_fleet(tmp_path / "data", mock_http, script, cap=8)
    slots: list[int] = []
    waits: list[str] = []
    limits: list[AdmissionChanged] = []

    def on_change(e: object) -> None:
        if isinstance(e, GenerationSlotsChanged):
            slots.append(e.generating)
        elif isinstance(e, SessionWaitChanged):
            waits.append(e.reason)
        elif isinstance(e, SessionStateChanged) and e.new is S.QUEUED:
            waits.append(e.reason)
        elif isinstance(e, AdmissionChanged):
            limits.append(e)

    fleet.changed.connect(on_change)
    await fleet.start()
    await fleet.create_sessions(SessionSpec(task="t", repo=str(git_repo), headless=True), 6, start=True)
    await until(lambda: fleet.gate.generating == 6)  # no readings yet: the cap alone applies
    fleet.scheduling.observe_engine(sample(kv=97.0, running=6, waiting=6))
    assert limits[-1].limit == 3 and limits[-1].verdict == "over"
    assert limits[-1].reason == "engine full: KV 97 %, 6 waiting"
    mark = len(slots)
    await until(lambda: fleet.gate.waiting > 0)
    assert "engine full: KV 97 %, 6 waiting" in waits  # what the pane shows for a waiting session
    queued = [s for s in fleet.sessions() if s.state is S.QUEUED]
    assert queued and fleet.admission.why_waiting(queued[0].session_id) == "engine full: KV 97 %, 6 waiting"
    # the first wave drains below the new limit, and from then on at most 3 generate
    after = slots[mark:]
    low = next(i for i, g in enumerate(after) if g <= 3)
    assert max(after[low:]) <= 3
    # room again: the limit grows (an eighth at a time after the first cut)
    fleet.scheduling.observe_engine(sample(kv=20.0, running=3, ttft_p95_s=0.3))
    await until(lambda: fleet.gate.generating >= 3 and fleet.gate.waiting > 0, 5)
    fleet.scheduling.observe_engine(sample(kv=20.0, running=3, ttft_p95_s=0.3))
    assert limits[-1].limit >= 4 and limits[-1].verdict == "room"
    # the engine stops answering its /metrics: the fleet cap applies again, and the window says so
    fleet.scheduling.observe_engine(sample(up=False))
    assert limits[-1].verdict == "blind" and limits[-1].limit == 8
    await asyncio.wait_for(fleet.wait_settled(), 60)
    assert all(s.state is S.DONE for s in fleet.sessions())
    await fleet.aclose()


async def test_fixed_admission_ignores_the_readings(tmp_path: Path, git_repo: Path,
                                                   mock_http: httpx.AsyncClient) -> None:
    fleet = make_fleet(tmp_path / "data", mock_http, Script(steps=1), cap=4, adaptive=False)
    await fleet.start()
    fleet.scheduling.observe_engine(sample(kv=99.0, waiting=20))
    assert fleet.gate.queue.limit("e1") is None and fleet.admission.limit_of("e1") == 4
    await fleet.aclose()


async def test_the_watched_session_goes_first(tmp_path: Path, git_repo: Path, mock_http: httpx.AsyncClient) -> None:
    script = Script(steps=1, turn_s=0.3)
    fleet = make_fleet(tmp_path / "data", mock_http, script, cap=1)
    admitted: list[str] = []
    fleet.changed.connect(lambda e: admitted.append(e.session_id)
                          if isinstance(e, SessionStateChanged) and e.reason == "generating" else None)
    await fleet.start()
    a, b, c = await fleet.create_sessions(SessionSpec(task="t", repo=str(git_repo), headless=True), 3)
    await fleet.start_session(a.session_id)
    await until(lambda: admitted == [a.session_id])
    await fleet.start_session(b.session_id)
    await fleet.start_session(c.session_id)
    await until(lambda: fleet.gate.waiting == 2)
    assert fleet.gate.waiting_ids() == (b.session_id, c.session_id)
    fleet.scheduling.set_focus(c.session_id)  # the user zooms into c
    assert fleet.gate.waiting_ids() == (c.session_id, b.session_id)
    await until(lambda: len(admitted) >= 2)
    assert admitted[1] == c.session_id
    fleet.scheduling.set_focus(None)
    assert fleet.admission.priority_of(c.session_id) is Priority.NORMAL
    await asyncio.wait_for(fleet.wait_settled(), 30)
    await fleet.aclose()


async def test_an_answered_session_goes_first_once(tmp_path: Path, git_repo: Path,
                                                   mock_http: httpx.AsyncClient) -> None:
    script = Script(steps=2, question_at=1)
    fleet = make_fleet(tmp_path / "data", mock_http, script)
    await fleet.start()
    (s,) = await fleet.create_sessions(SessionSpec(task="t", repo=str(git_repo)), 1, start=True)
    await asyncio.wait_for(fleet.wait_settled(), 30)
    assert fleet.summary(s.session_id).state is S.NEEDS_INPUT
    await fleet.reply(s.session_id, "the README")
    assert fleet.admission.priority_of(s.session_id) is Priority.FOREGROUND
    await asyncio.wait_for(fleet.wait_settled(), 30)
    assert fleet.admission.priority_of(s.session_id) is Priority.NORMAL  # spent on its next turn
    await fleet.aclose()


async def test_a_long_tool_call_holds_no_slot(tmp_path: Path, git_repo: Path, mock_http: httpx.AsyncClient) -> None:
    script = Script(steps=2, turn_s=0.02, tool_s=0.6)
    fleet = make_fleet(tmp_path / "data", mock_http, script, cap=1)
    in_tool: set[str] = set()
    overlaps: list[str] = []

    def on_agent(e: SessionAgentEvent) -> None:
        if isinstance(e.event, ev.ToolCallStarted):
            in_tool.add(e.session_id)
        elif isinstance(e.event, ev.ToolCallFinished):
            in_tool.discard(e.session_id)
        elif isinstance(e.event, ev.TurnStarted) and in_tool - {e.session_id}:
            overlaps.append(e.session_id)  # it generates while another runs its tool

    fleet.agent_event.connect(on_agent)
    await fleet.start()
    await fleet.create_sessions(SessionSpec(task="t", repo=str(git_repo), headless=True), 2, start=True)
    await asyncio.wait_for(fleet.wait_settled(), 30)
    assert overlaps and fleet.gate.peak_generating == 1
    await fleet.aclose()


async def test_background_mark_is_kept_and_lets_others_go_first(tmp_path: Path, git_repo: Path,
                                                                mock_http: httpx.AsyncClient) -> None:
    fleet = make_fleet(tmp_path / "data", mock_http, Script(steps=1))
    await fleet.start()
    (s,) = await fleet.create_sessions(SessionSpec(task="t", repo=str(git_repo), headless=True), 1)
    await fleet.scheduling.set_background(s.session_id)
    assert fleet.admission.priority_of(s.session_id) is Priority.BACKGROUND
    assert fleet.summary(s.session_id).background
    await fleet.aclose()
    again = make_fleet(tmp_path / "data", mock_http, Script(steps=1))
    await again.start()
    assert again.summary(s.session_id).background
    assert again.admission.priority_of(s.session_id) is Priority.BACKGROUND
    await again.aclose()


def _turns(events: list[tuple[int, object]]) -> list[int]:
    return [e.turn for _, e in events if isinstance(e, ev.UsageReported)]


async def test_a_token_budget_pauses_the_session_and_raising_it_continues(
        tmp_path: Path, git_repo: Path, mock_http: httpx.AsyncClient) -> None:
    script = Script(steps=5, tokens_per_turn=5)  # each turn: 100 prompt + 5 completion tokens
    fleet = make_fleet(tmp_path / "data", mock_http, script)
    await fleet.start()
    (s,) = await fleet.create_sessions(SessionSpec(task="t", repo=str(git_repo), headless=True,
                                                   budget_tokens=300), 1, start=True)
    await asyncio.wait_for(fleet.wait_settled(), 30)
    got = fleet.summary(s.session_id)
    assert got.state is S.BUDGET_REACHED and got.error == "budget reached: 315 of 300 tokens"
    assert _turns(await fleet.transcript(s.session_id)) == [1, 2, 3]
    try:
        await fleet.start_session(s.session_id)
        raise AssertionError("a session over its budget must not start")
    except UserError as exc:
        assert "budget reached" in str(exc)
    await fleet.aclose()
    fleet = make_fleet(tmp_path / "data", mock_http, script)  # the state survives a restart
    await fleet.start()
    assert fleet.summary(s.session_id).state is S.BUDGET_REACHED
    await fleet.scheduling.set_budget(s.session_id, tokens=10_000)
    await asyncio.wait_for(fleet.wait_settled(), 30)
    assert fleet.summary(s.session_id).state is S.DONE
    assert _turns(await fleet.transcript(s.session_id)) == [1, 2, 3, 4, 5, 6]  # none lost, none twice
    await fleet.aclose()


async def test_money_budget_and_per_session_cost(tmp_path: Path, git_repo: Path,
                                                 mock_http: httpx.AsyncClient) -> None:
    price = ApiPrice("p", "m1", input_usd_per_m=10.0, cached_input_usd_per_m=1.0, output_usd_per_m=100.0)
    script = Script(steps=5, tokens_per_turn=5)  # a turn: 50 uncached + 50 cached prompt, 5 out
    fleet = make_fleet(tmp_path / "data", mock_http, script, price=price)
    stats: list[SessionStatsChanged] = []
    totals: list[FleetCostChanged] = []
    fleet.changed.connect(lambda e: stats.append(e) if isinstance(e, SessionStatsChanged) else None)
    fleet.changed.connect(lambda e: totals.append(e) if isinstance(e, FleetCostChanged) else None)
    await fleet.start()
    per_turn = (50 * 10.0 + 50 * 1.0 + 5 * 100.0) / 1e6
    a, b = await fleet.create_sessions(SessionSpec(task="t", repo=str(git_repo), headless=True,
                                                   budget_usd=2.5 * per_turn), 2, start=True)
    await asyncio.wait_for(fleet.wait_settled(), 30)
    await asyncio.sleep(0.7)  # one stats tick
    for s in fleet.sessions():
        assert s.state is S.BUDGET_REACHED and "at m1 prices" in s.error
        assert abs(s.cost_usd - 3 * per_turn) < 1e-12
    assert {e.session_id for e in stats if e.cost_usd} == {a.session_id, b.session_id}
    assert totals and abs(totals[-1].cost_usd - 6 * per_turn) < 1e-12 and totals[-1].api_model == "p/m1"
    fleet.scheduling.set_price(None)  # no price: a money budget cannot be judged and holds nothing back
    assert fleet.summary(a.session_id).cost_usd is None
    await fleet.start_session(a.session_id)
    await asyncio.wait_for(fleet.wait_settled(), 30)
    assert fleet.summary(a.session_id).state is S.DONE
    await fleet.aclose()
