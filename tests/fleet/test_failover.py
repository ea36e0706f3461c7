"""Several endpoints: new sessions go to the least loaded (by KV, then by sessions), a session
sticks to its endpoint, and an endpoint that stops answering is drained — its sessions move
to another and continue there from their history, no turn lost and none done twice."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import httpx

from tests.fleet.conftest import EngineSwitch
from tests.fleet.fakes import Script, factory
from workstation.core import agent_events as ev
from workstation.core.endpoints import Endpoint
from workstation.core.fleet_events import EndpointAvailabilityChanged, SessionMoved
from workstation.core.session_state import SessionState as S
from workstation.fleet.routing import Router
from workstation.fleet.service import Fleet
from workstation.fleet.session import SessionSpec
from workstation.telemetry.vllm_metrics import EngineMetricsSample

E1 = Endpoint(base_url="http://127.0.0.1:9", api_key="k", model="m", name="e1")
E2 = Endpoint(base_url="http://127.0.0.1:10", api_key="k", model="m", name="e2")


def _ep(name: str) -> Endpoint:
    return Endpoint(base_url=f"http://127.0.0.1:1/{name}", api_key="", model="m", name=name)


def test_new_sessions_go_where_the_kv_cache_has_room() -> None:
    r = Router([_ep("a"), _ep("b"), _ep("c")])
    r.set_kv("a", 72.0)
    r.set_kv("b", 15.0)
    r.set_kv("c", 18.0)  # same 10 % step as b: the session count decides
    picks = []
    for i in range(4):
        picks.append(r.assign(f"s{i}").name)
        r.set_active(f"s{i}", True)
    assert picks == ["b", "c", "b", "c"]
    assert r.assign("s0", previous="a").name == "a"  # sticky: its prefix lives there
    assert r.drain("b") and not r.drain("b")
    assert r.assign("s9").name == "c" and r.healthy() == ("a", "c")
    assert r.assign("s1", previous="b").name != "b"  # a drained endpoint keeps nobody
    assert r.move("s2") is not None and r.endpoint_of("s2").name in ("a", "c")
    r.undrain("b")
    assert r.assign("s10").name == "b"


def sample(name: str, *, up: bool) -> EngineMetricsSample:
    return EngineMetricsSample(endpoint=name, t_mono=time.monotonic(), t_wall=time.time(), up=up,
                               kv_cache_usage_pct=10.0, waiting=0, running=1)


def turns_done(events: list[tuple[int, object]]) -> list[int]:
    return [e.turn for _, e in events if isinstance(e, ev.UsageReported)]


async def test_an_engine_that_dies_mid_turn_has_its_sessions_moved(
        tmp_path: Path, git_repo: Path, mock_http: httpx.AsyncClient, engine_switch: EngineSwitch) -> None:
    dead: set[str] = set()
    script = Script(steps=6, turn_s=0.1, tool_s=0.05, engine_ok=lambda setup: setup.endpoint.name not in dead)
    fleet = Fleet(data_dir=tmp_path / "data", endpoints=(E1, E2), agent_factory=factory(script), http=mock_http,
                  max_generating=8, engine_poll_s=0.05)
    events: list[object] = []
    fleet.changed.connect(events.append)
    await fleet.start()
    made = await fleet.create_sessions(SessionSpec(task="t", repo=str(git_repo), headless=True), 4, start=True)
    first = {s.session_id: s.endpoint_name for s in made}
    assert sorted(first.values()) == ["e1", "e1", "e2", "e2"]
    await asyncio.sleep(0.35)  # a few turns in
    dead.add("e1")  # the engine is killed: its streams break, it answers nothing
    engine_switch.dead_hosts.add("127.0.0.1:9")
    await asyncio.wait_for(fleet.wait_settled(), 60)
    moved = [e for e in events if isinstance(e, SessionMoved)]
    assert {m.session_id for m in moved} == {sid for sid, name in first.items() if name == "e1"}
    assert all(m.from_endpoint == "e1" and m.to_endpoint == "e2" for m in moved)
    assert any(isinstance(e, EndpointAvailabilityChanged) and not e.available for e in events)
    for s in fleet.sessions():
        assert s.state is S.DONE, (s.name, s.state, s.error)
        assert s.endpoint_name == "e2"
        assert turns_done(await fleet.transcript(s.session_id)) == list(range(1, 8))  # none lost, none twice
        for step in range(6):  # every tool step ran exactly once
            assert (Path(s.worktree_path) / f"{s.name}-{step}.txt").read_text() == f"{s.name}\n"
    assert fleet.router.is_drained("e1")
    # a new session avoids the drained engine until it answers again
    (late,) = await fleet.create_sessions(SessionSpec(task="late", repo=str(git_repo), headless=True), 1)
    assert late.endpoint_name == "e2"
    await fleet.aclose()


async def test_failed_scrapes_drain_an_engine_and_refuse_its_waiting_sessions(
        tmp_path: Path, git_repo: Path, mock_http: httpx.AsyncClient, engine_switch: EngineSwitch) -> None:
    script = Script(steps=3, turn_s=0.3)
    fleet = Fleet(data_dir=tmp_path / "data", endpoints=(E1, E2), agent_factory=factory(script), http=mock_http,
                  max_generating=8, engine_poll_s=0.05)
    moved: list[SessionMoved] = []
    back: list[EndpointAvailabilityChanged] = []
    fleet.changed.connect(lambda e: moved.append(e) if isinstance(e, SessionMoved) else None)
    fleet.changed.connect(lambda e: back.append(e) if isinstance(e, EndpointAvailabilityChanged) and e.available
                          else None)
    await fleet.start()
    fleet.gate.set_limit("e1", 1)  # e1 takes one at a time: the others on it wait in the queue
    made = await fleet.create_sessions(SessionSpec(task="t", repo=str(git_repo), headless=True), 6, start=True)
    on_e1 = {s.session_id for s in made if s.endpoint_name == "e1"}
    deadline = time.monotonic() + 10
    while fleet.gate.queue.waiting_in("e1") < 2:
        assert time.monotonic() < deadline
        await asyncio.sleep(0.01)
    waiting = {sid for sid in fleet.gate.waiting_ids() if sid in on_e1}
    engine_switch.dead_hosts.add("127.0.0.1:9")
    fleet.scheduling.observe_engine(sample("e1", up=False))
    assert not moved  # one failed scrape is not enough
    fleet.scheduling.observe_engine(sample("e1", up=False))
    assert waiting <= {m.session_id for m in moved}  # refused in the queue, moved at once
    await asyncio.wait_for(fleet.wait_settled(), 60)
    for s in fleet.sessions():
        assert s.state is S.DONE and turns_done(await fleet.transcript(s.session_id)) == [1, 2, 3, 4]
    engine_switch.dead_hosts.clear()  # the engine answers again: it takes sessions again
    deadline = time.monotonic() + 10
    while not back:
        assert time.monotonic() < deadline
        await asyncio.sleep(0.02)
    assert not fleet.router.is_drained("e1")
    await fleet.aclose()


async def test_a_session_in_a_tool_when_its_engine_drains_takes_its_next_turn_elsewhere(
        tmp_path: Path, git_repo: Path, mock_http: httpx.AsyncClient, engine_switch: EngineSwitch) -> None:
    script = Script(steps=3, turn_s=0.02, tool_s=0.6)  # the fake agent itself could go on generating on e1
    fleet = Fleet(data_dir=tmp_path / "data", endpoints=(E1, E2), agent_factory=factory(script), http=mock_http,
                  max_generating=8, engine_poll_s=0.05)
    await fleet.start()
    made = await fleet.create_sessions(SessionSpec(task="t", repo=str(git_repo), headless=True), 2, start=True)
    (sid,) = [s.session_id for s in made if s.endpoint_name == "e1"]
    deadline = time.monotonic() + 10
    while turns_done(await fleet.transcript(sid)) != [1]:  # its first turn is done: its first tool runs
        assert time.monotonic() < deadline
        await asyncio.sleep(0.01)
    engine_switch.dead_hosts.add("127.0.0.1:9")
    fleet.scheduling.observe_engine(sample("e1", up=False))
    fleet.scheduling.observe_engine(sample("e1", up=False))
    assert fleet.record(sid).endpoint_name == "e2"  # moved while its tool runs
    await asyncio.wait_for(fleet.wait_settled(), 60)
    # the agent built on e1 had its next turn refused; the session went on from its history on e2
    assert [u for r, u in zip(script.runs, script.urls) if r == sid] == [E1.base_url, E2.base_url]
    assert fleet.record(sid).state is S.DONE
    assert turns_done(await fleet.transcript(sid)) == [1, 2, 3, 4]  # none lost, none twice
    await fleet.aclose()


async def test_with_one_engine_sessions_wait_for_it_as_before(
        tmp_path: Path, git_repo: Path, mock_http: httpx.AsyncClient, engine_switch: EngineSwitch) -> None:
    script = Script(steps=3, turn_s=0.05, engine_ok=lambda setup: engine_switch.up)
    fleet = Fleet(data_dir=tmp_path / "data", endpoints=(E1,), agent_factory=factory(script), http=mock_http,
                  max_generating=8, engine_poll_s=0.05)
    await fleet.start()
    fleet.scheduling.observe_engine(sample("e1", up=False))
    fleet.scheduling.observe_engine(sample("e1", up=False))
    assert not fleet.router.is_drained("e1")  # nowhere to move to: never drained
    await fleet.aclose()
