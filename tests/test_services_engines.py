"""How many engines the service factory runs, and where: the profile's ``engines_per_gpu``
(presets and the user's saved profiles alike) on each GPU group of ``engine.replicas`` /
``gpus_per_engine``; and a safe switch to a profile with another engine count, done as a
restart of every engine. GPU facts are data (NVML stood in); engines are fakes
(``tests/tuning/fake_vllm.py``)."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import pytest

from tests.test_services import Engine, never_called
from tests.tuning.fake_vllm import FakeVllm
from workstation.core.endpoints import Endpoint
from workstation.core.engine_sizing import GIB, GpuMemory
from workstation.core.errors import UserError
from workstation.core.profiles import PRESETS, Profile, flatten
from workstation.engine.host import EngineHost
from workstation.services import Services
from workstation.tuning.placement import Placement
from workstation.tuning.store import TuningStore


def _gpus(monkeypatch: pytest.MonkeyPatch, count: int) -> list[int]:
    reads: list[int] = []

    def read_gpu_memory(*_a: Any, **_kw: Any) -> list[GpuMemory]:
        reads.append(1)
        return [GpuMemory(i, "NVIDIA H200", 143 * GIB, 142 * GIB) for i in range(count)]

    monkeypatch.setattr("workstation.engine.gpu_memory.read_gpu_memory", read_gpu_memory)
    return reads


def _save(settings: Any) -> None:
    store = TuningStore(settings.data_dir)
    store.save_profile(Profile("two-engines", "two engines on each GPU", parent="default", engines_per_gpu=2))
    store.save_profile(Profile("two-small", "", args=("--max-num-seqs", "8"), parent="two-engines"))  # inherits 2


def test_the_layout_takes_the_profiles_engine_count_from_presets_and_saved_profiles(
        settings: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    _save(settings)
    reads = _gpus(monkeypatch, 1)
    services = Services(settings)
    assert services.engine_layout("cuda", "default") == [] and reads == []  # one engine: NVML not even asked
    plans = services.engine_layout("cuda", "two-small")
    assert [(p.suffix, p.engines_on_device, p.place) for p in plans] == [("", 2, 1), ("@gpu0#2", 2, 2)]
    assert services.engine_layout("cpu", "two-small") == []  # the CPU engine shares out cores instead
    folded = services.engine_profile("two-small", "cuda")  # what the launcher runs: ancestry folded in
    assert isinstance(folded, Profile) and folded.parent is None and folded.engines_per_gpu == 2
    assert services.engine_profile("default", "cuda") == "default"  # a preset stays a name
    assert len(services.engine_layout("cuda", folded)) == 2 and reads == [1]  # the GPUs are read once
    with pytest.raises(UserError, match="unknown profile 'nope'"):
        services.engine_profile("nope", "cuda")
    settings.engine.replicas = 0
    _gpus(monkeypatch, 2)
    services = Services(settings)
    assert [p.suffix for p in services.engine_layout("cuda", "two-engines")] == ["", "@gpu0#2", "@gpu1", "@gpu1#2"]


def test_two_engines_on_a_machine_without_gpu_facts_are_refused_with_a_hint(
        settings: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    _save(settings)
    _gpus(monkeypatch, 0)
    with pytest.raises(UserError, match="no GPU was found") as caught:
        Services(settings).engine_layout("cuda", "two-engines")
    assert "choose a profile with one engine on each GPU" in (caught.value.hint or "")


class Named(Engine):
    """A fake engine under the name the host gives it (replicas need names of their own)."""

    def __init__(self, *a: Any, name: str | None = None, fail_start: bool = False, **told: Any) -> None:
        super().__init__(*a, fail_start=fail_start)
        self.name = name or "managed:smollm2"
        self.told = told

    @property
    def endpoint(self) -> Endpoint:
        assert self.engine is not None
        return Endpoint(self.engine.base_url, "k", "smollm2", name=self.name, managed=True)


async def test_a_switch_to_a_profile_with_another_engine_count_restarts_every_engine_and_says_so(
        settings: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    _gpus(monkeypatch, 1)
    vllm = FakeVllm()
    made: list[Named] = []

    def launchers(profile: Any = None, env: Any = None, *, port: Any = None, log_subdir: str = "",
                  add_args: Any = (), name: str | None = None, **told: Any) -> Named:
        made.append(Named(vllm, profile or flatten(PRESETS["default"], PRESETS), env, name=name, **told))
        return made[-1]

    layout = functools.partial(Services(settings).engine_layout, "cuda")
    host = EngineHost(launchers=launchers, layout=layout, replicas=layout("default"))
    services = Services(settings, http=vllm.client(), engine=host)
    try:
        await host.start()
        fleet = services.fleet(agent_factory=never_called)
        await fleet.start()
        switch = services.live_switch(plan=lambda: Placement({}, side_by_side=True, reason="test"))
        assert switch is not None
        said: list[str] = []
        phases: list[str] = []
        switch.state_changed.connect(lambda phase, _d: phases.append(phase.value))
        two = flatten(Profile("two-engines", "", parent="default", engines_per_gpu=2), PRESETS)
        report = await switch.run(two, say=said.append)
        assert report is not None and report.ok, report
        assert report.placement == "every engine restarted: 1 engine on each GPU -> 2 engines on each GPU"
        assert phases == ["stopping_old", "done"] and switch.blocker() is None
        assert any("every engine restarts with 'two-engines' instead of a safe switch" in s for s in said)
        assert host.names() == ["managed:smollm2", "managed:smollm2@gpu0#2"]
        assert not made[0].alive() and made[1].alive() and made[2].alive()
        assert [m.told for m in made[1:]] == [{"engines_on_device": 2, "place": 1}, {"engines_on_device": 2, "place": 2}]
        assert {e.name for e in fleet.router.endpoints} == {"managed:smollm2", "managed:smollm2@gpu0#2"}
        assert fleet.router.get("managed:smollm2") == made[1].endpoint  # sessions on the plain name follow
        # the same count but the engines share their GPU: no engine fits beside them either
        report = await switch.run(flatten(Profile("two-small", "", args=("--max-num-seqs", "8"),
                                                  parent="default", engines_per_gpu=2), PRESETS), say=said.append)
        assert report is not None and report.ok and report.placement.endswith("2 engines on each GPU -> 2 engines on each GPU")
        assert made[1].alive() and made[1].profile.name == "two-small" and made[2].profile.name == "two-small"
        assert len(made) == 3  # the same engines, restarted
    finally:
        await services.aclose()


async def test_a_restart_switch_whose_profile_fails_starts_the_old_one_again(
        settings: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    _gpus(monkeypatch, 1)
    vllm = FakeVllm()
    made: list[Named] = []

    def launchers(profile: Any = None, env: Any = None, *, name: str | None = None, **told: Any) -> Named:
        profile = profile or flatten(PRESETS["default"], PRESETS)
        engine = Named(vllm, profile, env, name=name, fail_start=profile.name == "two-engines")
        made.append(engine)
        return engine

    layout = functools.partial(Services(settings).engine_layout, "cuda")
    host = EngineHost(launchers=launchers, layout=layout, replicas=layout("default"))
    services = Services(settings, http=vllm.client(), engine=host)
    try:
        await host.start()
        switch = services.live_switch(plan=lambda: Placement({}, side_by_side=True, reason="test"))
        assert switch is not None
        two = flatten(Profile("two-engines", "", parent="default", engines_per_gpu=2), PRESETS)
        report = await switch.run(two)
        assert report is not None and not report.ok and report.rolled_back
        assert "new profile failed" in report.reason
        assert host.names() == ["managed:smollm2"] and host.launcher is not None and host.launcher.alive()
        assert host.launcher.profile.name == "default"
    finally:
        await services.aclose()


async def test_the_engine_of_a_saved_profile_with_two_engines_runs_two_sharing_the_gpu(
        settings: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from tests.engine.test_replicas import _launchers

    _save(settings)
    _gpus(monkeypatch, 1)
    settings.engine.profile = "two-small"  # a saved profile: the launcher alone knows only the presets
    services = Services(settings)
    made = _launchers(tmp_path, "cuda")
    services._launchers[None] = type(made)(settings, made.install, made.model, sequences_per_session=6)
    host = await services.engine()
    assert host.names() == ["managed:smollm2", "managed:smollm2@gpu0#2"]
    for engine in (host.launcher, *host.replicas):
        assert engine.profile.name == "two-small" and engine.profile.parent is None  # type: ignore[union-attr]
        assert (engine.engines_on_device, engine.sessions) == (2, 32)  # type: ignore[union-attr]
    assert [e.place for e in (host.launcher, *host.replicas)] == [1, 2]  # type: ignore[union-attr]
    await services.aclose()
