import asyncio

from workstation.core.profiles import PRESETS, flatten
from workstation.engine.chat_client import ChatClient, EngineHTTPError, EngineUnreachable
from workstation.tuning.placement import (
    GpuInfo,
    cpu_bind_apart,
    parse_cpu_bind,
    parse_cuda_visible,
    plan_placement,
    spare_gpu,
)
from workstation.tuning.switch import SafeSwitch, SwitchPhase

from .fake_vllm import FakeLauncher, FakeVllm

DEFAULT = flatten(PRESETS["default"], PRESETS)
COMPILED = flatten(PRESETS["compiled"], PRESETS)


class Sessions:
    """Chat sessions streaming one request after another until stopped; a broken request is
    retried once on whatever endpoint the client points at then (what the agent loop does)."""

    def __init__(self, clients, max_tokens=20):
        self.clients = clients
        self.max_tokens = max_tokens
        self.done = 0
        self.retried = 0
        self.lost = 0
        self.stop = asyncio.Event()
        self.tasks = []

    async def _one(self, client):
        while not self.stop.is_set():
            for attempt in range(2):
                try:
                    await client.complete([{"role": "user", "content": "go"}], max_tokens=self.max_tokens)
                    self.done += 1
                    break
                except (EngineUnreachable, EngineHTTPError):
                    if attempt == 0:
                        self.retried += 1
                        continue
                    self.lost += 1

    def start(self):
        self.tasks = [asyncio.create_task(self._one(c), name=f"session-{i}") for i, c in enumerate(self.clients)]

    async def finish(self):
        self.stop.set()
        await asyncio.gather(*self.tasks)


async def test_switch_side_by_side_loses_nothing_and_measures_the_pause():
    vllm = FakeVllm()
    old = FakeLauncher(vllm, DEFAULT, token_delay_s=0.004)
    await old.start()
    async with vllm.client() as http:
        clients = [ChatClient(http, old.endpoint, session_id=f"s{i}") for i in range(4)]
        sessions = Sessions(clients)
        sessions.start()
        phases = []
        switch = SafeSwitch(http, old, lambda p, env: FakeLauncher(vllm, p, env, start_delay_s=0.2),
                            clients=clients, drain_poll_s=0.01, baseline_s=0.2,
                            placement_env={"VLLM_CPU_OMP_THREADS_BIND": "1"}, placement_reason="apart")
        switch.state_changed.connect(lambda ph, _d: phases.append(ph))
        report, serving = await switch.run(COMPILED)
        await asyncio.sleep(0.1)
        await sessions.finish()
    assert report.ok and not report.rolled_back
    assert serving is not old and old.stopped and serving.env == {"VLLM_CPU_OMP_THREADS_BIND": "1"}
    assert all(c.endpoint == serving.endpoint for c in clients)
    assert sessions.lost == 0 and sessions.retried == 0
    assert report.failed_during == 0 and report.requests_during > 0
    assert report.left_on_old == 0
    # the sessions streamed on the old engine while the new one started: no pause that long
    # (how long the pause is on the real engine: benchmarks/switch_pause.py)
    assert report.largest_gap_s is not None and report.start_new_s is not None
    assert report.largest_gap_s < report.start_new_s
    assert report.baseline_gap_s is not None
    assert phases == [SwitchPhase.STARTING_NEW, SwitchPhase.PROBING, SwitchPhase.RETARGETING,
                      SwitchPhase.DRAINING, SwitchPhase.STOPPING_OLD, SwitchPhase.DONE]
    assert report.from_profile == "default" and report.to_profile == "compiled"
    assert "largest gap" in "\n".join(report.lines())


async def test_a_new_engine_that_does_not_start_is_rolled_back():
    vllm = FakeVllm()
    old = FakeLauncher(vllm, DEFAULT)
    await old.start()
    async with vllm.client() as http:
        clients = [ChatClient(http, old.endpoint, session_id="s")]
        made = []

        def factory(p, env):
            made.append(FakeLauncher(vllm, p, env, fail_start=True))
            return made[-1]

        report, serving = await SafeSwitch(http, old, factory, clients=clients).run(COMPILED)
        assert not report.ok and report.rolled_back and "new engine failed" in report.reason
        assert serving is old and not old.stopped and clients[0].endpoint == old.endpoint
        assert made[0].stopped
        text, _ = await clients[0].complete([{"role": "user", "content": "x"}], max_tokens=3)
        assert text == "yyy"


async def test_a_probe_answered_500_is_tried_again_and_three_500s_roll_back_with_the_engines_words(monkeypatch):
    from workstation.tuning import switch as switch_mod

    monkeypatch.setattr(switch_mod, "PROBE_RETRY_S", 0.01)
    vllm = FakeVllm()
    old = FakeLauncher(vllm, DEFAULT)
    await old.start()
    async with vllm.client() as http:
        clients = [ChatClient(http, old.endpoint, session_id="s")]
        once = SafeSwitch(http, old, lambda p, env: FakeLauncher(vllm, p, env, fail_completions=1),
                          clients=clients, drain_poll_s=0.01, settle_s=0.05)
        report, serving = await once.run(COMPILED)
        assert report.ok and serving is not old and clients[0].endpoint == serving.endpoint

        made = []

        def always(p, env):
            made.append(FakeLauncher(vllm, p, env, fail_completions=3))
            return made[-1]

        report, back = await SafeSwitch(http, serving, always, clients=clients, drain_poll_s=0.01).run(DEFAULT)
        assert not report.ok and report.rolled_back and back is serving and made[0].stopped
        assert "a probe of the new engine: engine answered HTTP 500: EngineCore encountered an issue. (3 tries, 0.01 s apart)" in report.reason
        assert clients[0].endpoint == serving.endpoint


async def test_a_new_engine_that_dies_while_the_old_drains_is_rolled_back():
    vllm = FakeVllm()
    old = FakeLauncher(vllm, DEFAULT, token_delay_s=0.01)
    await old.start()
    async with vllm.client() as http:
        clients = [ChatClient(http, old.endpoint, session_id=f"s{i}") for i in range(2)]
        long_streams = [asyncio.create_task(c.complete([{"role": "user", "content": "x"}], max_tokens=60))
                        for c in clients]
        await asyncio.sleep(0.05)
        made = []

        def factory(p, env):
            made.append(FakeLauncher(vllm, p, env))
            return made[-1]

        switch = SafeSwitch(http, old, factory, clients=clients, drain_poll_s=0.01)

        async def kill_new():
            while not made or made[0].engine is None or switch.phase is not SwitchPhase.DRAINING:
                await asyncio.sleep(0.005)
            made[0].engine.up = False

        killer = asyncio.create_task(kill_new())
        report, serving = await switch.run(COMPILED)
        await killer
        assert report.rolled_back and "died" in report.reason
        assert serving is old and not old.stopped
        assert all(c.endpoint == old.endpoint for c in clients)
        results = await asyncio.wait_for(asyncio.gather(*long_streams), 5)
        assert [text for text, _ in results] == ["y" * 60] * 2  # the old engine finished them


async def test_without_a_spare_device_it_drains_restarts_and_rolls_back_to_the_old_profile():
    vllm = FakeVllm()
    old = FakeLauncher(vllm, DEFAULT)
    await old.start()
    async with vllm.client() as http:
        clients = [ChatClient(http, old.endpoint, session_id="s")]
        started = []

        def factory(p, env):
            started.append(p.name)
            return FakeLauncher(vllm, p, env, fail_start=(p.name == "compiled"))

        report, serving = await SafeSwitch(http, old, factory, clients=clients, side_by_side=False).run(COMPILED)
        assert report.rolled_back and old.stopped
        assert started == ["compiled", "default"]
        assert serving.profile.name == "default" and clients[0].endpoint == serving.endpoint
        ok_switch = SafeSwitch(http, serving, lambda p, env: FakeLauncher(vllm, p, env), clients=clients,
                               side_by_side=False)
        report2, serving2 = await ok_switch.run(COMPILED)
        assert report2.ok and serving2.profile.name == "compiled" and clients[0].endpoint == serving2.endpoint


def test_placement_rules():
    assert parse_cpu_bind("auto", 2) == {0} and parse_cpu_bind(None, 8) == set(range(7))
    assert parse_cpu_bind("0-3|4-7", 8) == set(range(8)) and parse_cpu_bind("1", 2) == {1}
    assert cpu_bind_apart(None, 2) == "1"          # auto leaves core 1 free on a 2-core machine
    assert cpu_bind_apart("1", 2) == "0"           # and the next switch goes back
    assert cpu_bind_apart("0-3", 8) == "4-7"
    assert cpu_bind_apart("auto", 8) == "7"
    assert cpu_bind_apart(None, 1) is None
    assert parse_cuda_visible(None, 4) == {0, 1, 2, 3} and parse_cuda_visible("1,3", 4) == {1, 3}
    gpus = [GpuInfo(0, "H200", 0.9, 1), GpuInfo(1, "H200", 0.5, 0), GpuInfo(2, "H200", 0.01, 0),
            GpuInfo(3, "H200", 0.0, 1)]
    assert spare_gpu(gpus, {0}) == 2
    assert spare_gpu(gpus, {0, 2}) is None
    p = plan_placement("cuda", live_env={"CUDA_VISIBLE_DEVICES": "0"}, cpu_count=64, gpus=gpus)
    assert p.side_by_side and p.env == {"CUDA_VISIBLE_DEVICES": "2"}
    one = plan_placement("cuda", live_env={}, cpu_count=64, gpus=[GpuInfo(0, "H200", 0.9, 1)])
    assert not one.side_by_side and "drained" in one.reason
    cpu = plan_placement("cpu", live_env={}, cpu_count=2)
    assert cpu.env == {"VLLM_CPU_OMP_THREADS_BIND": "1"}


async def test_the_drain_waits_for_requests_the_engine_gauges_do_not_show_yet():
    """A request sent just before the retarget sits in the old engine's API server while its
    scheduler reads idle: the drain waits for the clients' own count of open requests."""
    vllm = FakeVllm()
    old = FakeLauncher(vllm, DEFAULT)
    await old.start()
    old.engine.admit_delay_s = 0.4  # the gauges miss it for 0.4 s
    async with vllm.client() as http:
        client = ChatClient(http, old.endpoint, session_id="s")
        late = asyncio.create_task(client.complete([{"role": "user", "content": "x"}], max_tokens=5))
        await asyncio.sleep(0.05)
        assert client.open_requests.on(old.endpoint.base_url) == 1 and old.engine.running == 0
        switch = SafeSwitch(http, old, lambda p, env: FakeLauncher(vllm, p, env, start_delay_s=0.01),
                            clients=[client], drain_poll_s=0.01, settle_s=0.05, probe=False)
        report, serving = await switch.run(COMPILED)
        text, _ = await asyncio.wait_for(late, 5)
    assert text == "yyyyy" and report.ok and old.stopped
    assert report.drain_s is not None and report.drain_s >= 0.3
    assert client.open_requests.on(old.endpoint.base_url) == 0


async def test_the_drain_settles_for_requests_of_clients_it_does_not_know():
    """The app's switch counts requests through a shared count (``open_requests``); where a
    request comes from elsewhere, the old engine must stay idle for ``settle_s`` before it
    stops, so one that reaches its scheduler late is not cut."""
    from workstation.core.requests import OpenRequests

    vllm = FakeVllm()
    old = FakeLauncher(vllm, DEFAULT)
    await old.start()
    old.engine.admit_delay_s = 0.15
    shared = OpenRequests()
    async with vllm.client() as http:
        known = ChatClient(http, old.endpoint, session_id="known")
        known.open_requests = shared
        stranger = ChatClient(http, old.endpoint, session_id="stranger")  # its own count
        late = asyncio.create_task(stranger.complete([{"role": "user", "content": "x"}], max_tokens=30))
        await asyncio.sleep(0.01)
        switch = SafeSwitch(http, old, lambda p, env: FakeLauncher(vllm, p, env, start_delay_s=0.01),
                            open_requests=shared.on, drain_poll_s=0.01, settle_s=0.5, probe=False)
        report, _ = await switch.run(COMPILED)
        text, _ = await asyncio.wait_for(late, 5)
    assert text == "y" * 30 and report.ok and report.left_on_old == 0
