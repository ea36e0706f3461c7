"""The service factory's wiring: whatever follows the live engine reads the engine that
serves after a safe switch, and after a restart (stop, start: a new port and key) — the
meters scrape it and mark its pid, the fleet's router sends sessions to it. Fake engines
(``tests/tuning/fake_vllm.py``: real HTTP semantics over a mock transport, no vLLM)."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from psygnal import Signal

from tests.tuning.fake_vllm import FakeLauncher, FakeVllm
from workstation.core.endpoints import Endpoint
from workstation.core.profiles import PRESETS, Profile, flatten
from workstation.engine.host import EngineHost
from workstation.engine.launcher import EngineState
from workstation.services import Services
from workstation.tuning.placement import Placement

_pids = itertools.count(41_000)


class Engine(FakeLauncher):
    """A managed engine as the host sees one: state and log signals, a pid, and one endpoint
    name for every engine of the same model (as ``EngineLauncher`` names them)."""

    state_changed = Signal(object, str)
    log_line = Signal(str)

    def __init__(self, *a, **kw) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*a, **kw)
        self.state = EngineState.STOPPED
        self.extra_env: dict[str, str] = {}
        self.pid: int | None = None

    @property
    def endpoint(self) -> Endpoint:
        assert self.engine is not None
        return Endpoint(self.engine.base_url, "k", "smollm2", name="managed:smollm2", managed=True)

    async def start(self, progress=None) -> Endpoint:  # type: ignore[no-untyped-def]
        endpoint = await super().start(progress)
        self.pid = next(_pids)
        self.state = EngineState.READY
        self.state_changed.emit(self.state, "ready")
        return endpoint

    async def stop(self) -> None:
        await super().stop()
        self.pid = None
        self.state = EngineState.STOPPED
        self.state_changed.emit(self.state, "")


def never_called(setup):  # type: ignore[no-untyped-def]
    raise AssertionError("no agent runs in these tests")


async def _wired(settings):  # type: ignore[no-untyped-def]
    vllm = FakeVllm()
    made: list[Engine] = []

    def launchers(profile: Profile | None = None, env=None, **_where):  # type: ignore[no-untyped-def]
        made.append(Engine(vllm, profile or flatten(PRESETS["default"], PRESETS), env))
        return made[-1]

    host = EngineHost(launchers=launchers)
    services = Services(settings, http=vllm.client(), engine=host)
    await host.start()
    fleet = services.fleet(agent_factory=never_called)
    await fleet.start()
    meters = services.meters(metrics_interval_s=0.1)
    return services, host, fleet, meters, made


async def _reads(meters, engine: Engine):  # type: ignore[no-untyped-def]
    """What the meters' engine scraper reads now; the fake engine says who it is by its load."""
    assert engine.engine is not None
    engine.engine.running = 7
    (scraper,) = meters.scrapers.values()
    return scraper, await scraper.scrape_once()


async def test_after_a_safe_switch_the_meters_and_the_fleet_follow_the_new_engine(settings) -> None:
    services, host, fleet, meters, made = await _wired(settings)
    try:
        old = made[0]
        assert meters.engine_pid() == old.pid
        scraper, before = await _reads(meters, old)
        assert before.up and before.running == 7 and scraper.endpoint == old.endpoint
        old.engine.running = 0

        switch = services.live_switch(plan=lambda: Placement({}, side_by_side=True, reason="test"))
        assert switch is not None
        report = await switch.run(flatten(Profile("fewer", "", args=("--max-num-seqs", "4"), parent="default"),
                                          PRESETS))
        assert report is not None and report.ok, report
        new = made[-1]
        assert new is not old and host.launcher is new and not old.alive()

        scraper, after = await _reads(meters, new)
        assert scraper.endpoint == new.endpoint != old.endpoint
        assert after.up and after.running == 7  # the new engine's metrics, not the old one's
        assert meters.engine_pid() == new.pid != old.pid
        assert fleet.router.get("managed:smollm2") == new.endpoint
    finally:
        await services.aclose()


async def test_the_apps_clients_share_one_count_of_open_requests_and_the_switch_drains_it(settings) -> None:
    """A request an agent sent just before the switch, still in the old engine's API server
    (its gauges read idle), finishes there: the switch waits for the app's one count."""
    import asyncio

    services, host, fleet, meters, made = await _wired(settings)
    try:
        old = made[0]
        old.engine.admit_delay_s = 0.4
        agent_client = services.agent_factory(streams=None)._client(old.endpoint, None, "s1")  # the fake transport
        assert agent_client.open_requests is services.open_requests
        assert services.chat_client(old.endpoint).open_requests is services.open_requests
        late = asyncio.create_task(agent_client.complete([{"role": "user", "content": "x"}], max_tokens=5))
        await asyncio.sleep(0.05)
        assert services.open_requests.on(old.endpoint.base_url) == 1 and old.engine.running == 0
        switch = services.live_switch(plan=lambda: Placement({}, side_by_side=True, reason="test"))
        assert switch is not None
        report = await switch.run(flatten(Profile("fewer", "", args=("--max-num-seqs", "4"), parent="default"),
                                          PRESETS))
        text, _ = await asyncio.wait_for(late, 5)
        assert report is not None and report.ok and text == "yyyyy" and not old.alive()
        assert report.drain_s is not None and report.drain_s >= 0.3
    finally:
        await services.aclose()


async def test_after_a_restart_the_meters_read_the_engine_on_its_new_port(settings) -> None:
    services, host, fleet, meters, made = await _wired(settings)
    try:
        first = made[0]
        first_endpoint = first.endpoint
        await host.stop()
        assert host.endpoint is None
        await host.start()  # stop-start: the same launcher on a new port, with a new key
        second_endpoint = first.endpoint
        assert second_endpoint != first_endpoint
        scraper, sample = await _reads(meters, first)
        assert scraper.endpoint == second_endpoint and sample.up and sample.running == 7
        assert meters.engine_pid() == first.pid

        await host.restart()
        third_endpoint = first.endpoint
        scraper, sample = await _reads(meters, first)
        assert scraper.endpoint == third_endpoint != second_endpoint and sample.up
        assert fleet.router.get("managed:smollm2") == third_endpoint
    finally:
        await services.aclose()


async def test_meters_without_the_wiring_would_keep_the_old_engine(settings) -> None:
    """The control: meters given an endpoint by hand do not follow (so the tests above show
    the wiring, not a scraper that finds engines by itself)."""
    services, host, fleet, meters, made = await _wired(settings)
    try:
        pinned = services.meters(endpoints=[made[0].endpoint])
        await host.restart()
        (scraper,) = pinned.scrapers.values()
        sample = await scraper.scrape_once()
        assert not sample.up  # the old port is gone
    finally:
        await services.aclose()


async def test_a_failing_shutdown_stage_is_logged_and_the_next_stages_still_run(settings, caplog) -> None:
    services, host, fleet, meters, made = await _wired(settings)

    async def broken() -> None:
        raise RuntimeError("the store is gone")

    fleet.aclose = broken  # type: ignore[method-assign]
    with caplog.at_level("ERROR", logger="workstation.services"):
        await services.aclose()
    assert "shutdown: closing the fleet failed" in caplog.text and "the store is gone" in caplog.text
    assert not made[0].alive()  # the engine stage ran after the failed one


async def test_the_tuners_share_the_client_and_a_screening_left_running_is_stopped_on_close(
        settings, monkeypatch: pytest.MonkeyPatch) -> None:
    """Both tuners are the factory's, over its one HTTP client; the trial engines a screening
    started are stopped by the services' close even when the caller never got to close it."""
    from workstation.engine.environment import EngineInstall
    from workstation.engine.models import ModelSpec
    from workstation.tuning import screening
    from workstation.tuning.bench import tuning_settings
    from workstation.tuning.checks import model_traits
    from workstation.tuning.results import Workload

    vllm = FakeVllm()
    started: list[FakeLauncher] = []

    class TrialLaunchers:  # the screening makes its engines through Launchers(settings, engine, model)
        def __init__(self, trial_settings, engine, model, **_sizing) -> None:  # type: ignore[no-untyped-def]
            assert trial_settings.engine.port == 0  # the lab's settings reached it, not the live engine's
        def __call__(self, profile, env, **_where):  # type: ignore[no-untyped-def]
            started.append(FakeLauncher(vllm, profile, env))
            return started[-1]

    monkeypatch.setattr(screening, "Launchers", TrialLaunchers)
    install = EngineInstall(python=Path("python3"), platform="cuda", version="0.26.0", managed=False)
    model = ModelSpec("smollm2", "smollm2", None, max_model_len=8192, builtin=True)
    traits = model_traits("smollm2", {"architectures": ["LlamaForCausalLM"], "model_type": "llama"})
    base, lab = flatten(PRESETS["default"], PRESETS, platform="cuda"), tuning_settings(settings)
    workload = Workload(kind="synthetic", concurrency=4, input_len=64, output_len=32)
    services = Services(settings, http=vllm.client())
    auto = services.autotuner(lab, install, model, base, workload, candidates=[], traits=traits, help_flags=None,
                              budget_s=60.0, log_dir=settings.logs_dir, env={"A": "1"})
    assert auto.http is services.http and auto.settings is lab and auto.env == {"A": "1"}
    with pytest.raises(RuntimeError, match="the caller failed"):
        async with services:
            tuner = services.screening_tuner(lab, install, model, base, candidates=[], traits=traits,
                                             help_flags=None, side=screening.SideBySide(1 << 30, 0.1),
                                             references=[flatten(PRESETS["vllm-defaults"], PRESETS)],
                                             log_dir=settings.logs_dir)
            assert tuner.http is services.http
            await tuner.start()
            assert [t.launcher is not None for t in tuner.trials] == [True, True]
            assert all(launcher.alive() for launcher in started)
            raise RuntimeError("the caller failed before closing the tuner")
    assert len(started) == 2 and not any(launcher.alive() for launcher in started)


async def test_closing_the_services_stops_the_guided_drafts_check_processes(settings) -> None:
    import os

    import psutil

    from workstation.agent.guided import checks

    services = Services(settings, http=FakeVllm().client())
    child = await checks.off_loop(os.getpid)  # starts the pool and one of its processes
    assert child != os.getpid() and psutil.pid_exists(child)
    await services.aclose()
    assert checks._pool is None
    assert not psutil.pid_exists(child) or psutil.Process(child).status() == psutil.STATUS_ZOMBIE
