"""Engines sharing a GPU, as the engine host runs them: the ones of one GPU start one after
another (vLLM profiles the whole device's memory while it starts), the live one first, the
engines of other GPUs alongside; a restart with a profile of another engine count makes them
anew. Stand-in launchers record what they were told and when they started (no vLLM)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest
from psygnal import Signal

from workstation.core.endpoints import Endpoint
from workstation.core.errors import UserError
from workstation.core.profiles import PRESETS, Profile
from workstation.core.replicas import PlacementError, ReplicaPlan, plan_replicas
from workstation.engine.host import EngineHost
from workstation.engine.launcher import EngineState


class Timeline:
    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []  # ("start"|"ready"|"failed"|"stop", name)
        self.starting: dict[str, str] = {}  # name -> CUDA_VISIBLE_DEVICES while starting
        self.overlaps: list[tuple[str, str]] = []  # two engines starting at once


class StandIn:
    state_changed = Signal(object, str)
    log_line = Signal(str)

    def __init__(self, timeline: Timeline, profile: Any, env: dict[str, str] | None, *, name: str = "managed:m",
                 fails: set[str] = frozenset(), start_s: float = 0.02, **told: Any) -> None:  # type: ignore[assignment]
        self.timeline = timeline
        self.profile = profile if isinstance(profile, Profile) else PRESETS[profile or "default"]
        self.extra_env = dict(env or {})
        self.name = name
        self.told = told
        self.fails = fails
        self.start_s = start_s
        self.state = EngineState.STOPPED
        self.log_tail: list[str] = []
        self.port = 0

    @property
    def device(self) -> str:
        return self.extra_env.get("CUDA_VISIBLE_DEVICES", "0")

    @property
    def endpoint(self) -> Endpoint:
        return Endpoint(f"http://127.0.0.1:{self.port}", "k", "m", name=self.name, managed=True)

    @property
    def pid(self) -> int | None:
        return 1 if self.state is EngineState.READY else None

    def alive(self) -> bool:
        return self.state in (EngineState.STARTING, EngineState.READY)

    async def start(self, progress: Any = None) -> Endpoint:
        t = self.timeline
        t.overlaps += [(other, self.name) for other in t.starting]
        t.starting[self.name] = self.device
        t.events.append(("start", self.name))
        self.state = EngineState.STARTING
        try:
            await asyncio.sleep(self.start_s)
        finally:
            del t.starting[self.name]
        if self.name in self.fails:
            t.events.append(("failed", self.name))
            self.state = EngineState.FAILED
            raise UserError(f"{self.name}: Error in memory profiling")
        self.port = 8000 + len(t.events)
        t.events.append(("ready", self.name))
        self.state = EngineState.READY
        self.state_changed.emit(self.state, "ready")
        return self.endpoint

    async def stop(self) -> None:
        if self.state is not EngineState.STOPPED:
            self.timeline.events.append(("stop", self.name))
        self.state = EngineState.STOPPED
        self.state_changed.emit(self.state, "")


def _factory(timeline: Timeline, made: list[StandIn], **options: Any) -> Any:
    def launchers(profile: Any = None, env: dict[str, str] | None = None, *, port: int | None = None,
                  log_subdir: str = "", add_args: Sequence[str] = (), name: str | None = None, **told: Any) -> StandIn:
        made.append(StandIn(timeline, profile, env, name=name or "managed:m", **told, **options))
        return made[-1]
    return launchers


def _same_device(timeline: Timeline, made: list[StandIn]) -> list[tuple[str, str]]:
    device = {m.name: m.device for m in made}
    return [(a, b) for a, b in timeline.overlaps if device[a] == device[b]]


async def test_engines_of_one_gpu_start_one_after_another_the_live_one_first_other_gpus_alongside() -> None:
    timeline, made = Timeline(), []
    plans = plan_replicas("cuda", replicas=0, gpu_indices=range(2), engines_per_gpu=3)
    host = EngineHost(launchers=_factory(timeline, made), replicas=plans)
    assert host.names() == ["managed:m", "managed:m@gpu0#2", "managed:m@gpu0#3", "managed:m@gpu1",
                            "managed:m@gpu1#2", "managed:m@gpu1#3"]
    # each is told its share: three engines on its GPU, and which of them it starts
    assert [(m.told.get("engines_on_device"), m.told.get("place"), m.device) for m in made] == [
        (3, 1, "0"), (3, 2, "0"), (3, 3, "0"), (3, 1, "1"), (3, 2, "1"), (3, 3, "1")]
    joined: list[str] = []
    host.endpoint_joined.connect(lambda e: joined.append(e.name))
    live: list[Endpoint | None] = []
    host.endpoint_changed.connect(live.append)
    await host.start()
    starts = [name for kind, name in timeline.events if kind == "start"]
    assert starts[0] == "managed:m" and timeline.events[1] == ("ready", "managed:m")  # alone, first
    assert live and live[0] is not None and live[0].name == "managed:m"  # sessions may start now
    assert _same_device(timeline, made) == []  # never two at once on one GPU
    assert ("managed:m@gpu0#2", "managed:m@gpu1") in timeline.overlaps  # other GPUs alongside
    order0 = [n for n in starts if n.startswith("managed:m@gpu0") or n == "managed:m"]
    assert order0 == ["managed:m", "managed:m@gpu0#2", "managed:m@gpu0#3"]
    assert sorted(joined) == sorted(host.names()[1:]) and len(host.endpoints()) == 6
    await host.stop()


async def test_an_engine_that_fails_on_a_shared_gpu_is_left_out_and_the_next_one_still_starts() -> None:
    timeline, made = Timeline(), []
    plans = plan_replicas("cuda", gpu_indices=[0], engines_per_gpu=3)
    assert all(p.env == {} for p in plans)  # one GPU: not named, but still a share each
    said: list[str] = []
    host = EngineHost(launchers=_factory(timeline, made, fails={"managed:m@gpu0#2"}), replicas=plans)
    await host.start(progress=said.append)
    assert [e for e in timeline.events if e[0] != "stop"] == [
        ("start", "managed:m"), ("ready", "managed:m"), ("start", "managed:m@gpu0#2"),
        ("failed", "managed:m@gpu0#2"), ("start", "managed:m@gpu0#3"), ("ready", "managed:m@gpu0#3")]
    assert [e.name for e in host.endpoints()] == ["managed:m", "managed:m@gpu0#3"]
    assert any("managed:m@gpu0#2 did not start: managed:m@gpu0#2: Error in memory profiling" in s for s in said)


def _layout(gpus: int = 1) -> Any:
    """What the service factory gives the host: the plans under a profile, its engine count."""
    def layout(profile: Any) -> list[ReplicaPlan]:
        engines = profile.engines_per_gpu if isinstance(profile, Profile) else 1
        if engines == 1 and gpus == 1:
            return []
        try:
            return plan_replicas("cuda", gpu_indices=range(gpus), replicas=0, engines_per_gpu=engines or 1)
        except PlacementError as exc:
            raise UserError(str(exc)) from None
    return layout


async def test_a_restart_with_another_engine_count_makes_the_engines_anew() -> None:
    timeline, made = Timeline(), []
    layout = _layout()
    host = EngineHost(launchers=_factory(timeline, made), replicas=layout("default"), layout=layout)
    await host.start()
    first = host.launcher
    assert host.names() == ["managed:m"] and not host.shares_devices
    changed: list[Any] = []
    host.launcher_changed.connect(changed.append)
    two = Profile("two-engines", "", engines_per_gpu=2)
    said: list[str] = []
    await host.restart(two, progress=said.append)
    assert host.names() == ["managed:m", "managed:m@gpu0#2"] and host.shares_devices
    assert host.launcher is not first and changed == [host.launcher] and not first.alive()  # type: ignore[union-attr]
    assert [m.told for m in made[1:]] == [{"engines_on_device": 2, "place": 1}, {"engines_on_device": 2, "place": 2}]
    assert all(m.profile is two for m in made[1:]) and len(host.endpoints()) == 2
    assert "engines now: managed:m on GPU 0, engine 1 of 2, managed:m@gpu0#2 on GPU 0, engine 2 of 2" in said
    # back to one engine: the second stops and is no longer planned (the fleet moves its sessions)
    await host.restart("default")
    assert host.names() == ["managed:m"] and not any(m.alive() for m in made[1:3]) and made[-1].alive()
    # the same engine count: the engines stay the ones they were
    kept = host.launcher
    await host.restart("compiled")
    assert host.launcher is kept and kept.profile.name == "compiled"  # type: ignore[union-attr]


async def test_a_placement_that_cannot_work_is_refused_before_anything_stops() -> None:
    timeline, made = Timeline(), []
    host = EngineHost(launchers=_factory(timeline, made), layout=_layout(gpus=0))
    await host.start()
    with pytest.raises(UserError, match="no GPU was found"):
        await host.restart(Profile("two-engines", "", engines_per_gpu=2))
    assert made[0].alive() and ("stop", "managed:m") not in timeline.events
    await host.stop()


async def test_a_start_with_a_profile_of_another_engine_count_places_the_engines_first() -> None:
    timeline, made = Timeline(), []
    host = EngineHost(launchers=_factory(timeline, made), layout=_layout())
    await host.start(Profile("two-engines", "", engines_per_gpu=2))
    assert host.names() == ["managed:m", "managed:m@gpu0#2"] and len(host.endpoints()) == 2
    assert len(made) == 3 and not made[0].alive()  # the first one made was never started
