"""The Tuning dock: profiles with their diffs and checks, traffic-shape charts, stored results,
and the switch of the live engine through the app's wiring (fake engines, no vLLM)."""

from __future__ import annotations

from types import SimpleNamespace

import pyqtgraph as pg
import pytest
from psygnal import Signal

from tests.tuning.fake_vllm import FakeLauncher, FakeVllm
from tests.ui.conftest import run, wait_until
from workstation.core.endpoints import Endpoint
from workstation.core.profiles import PRESETS, Profile, flatten
from workstation.core.replicas import plan_replicas
from workstation.core.requests import RequestRecord
from workstation.core.traffic import shape_from_records
from workstation.engine.launcher import EngineState
from workstation.tuning.checks import CheckReport, check_resolved, model_traits
from workstation.tuning.placement import Placement
from workstation.tuning.results import BenchResult, LatencyStats, Slo, Workload
from workstation.tuning.store import TuningStore

pytestmark = pytest.mark.gui

HELP = "\n".join(f"  {flag} VALUE" for flag in (
    "--enforce-eager", "--no-enforce-eager", "--max-num-seqs", "--max-num-batched-tokens",
    "--performance-mode", "--stream-interval", "--speculative-config", "--async-scheduling"))
LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "max_position_embeddings": 8192}
VERSION = "0.0.0+test"


def rec(sid: str, start: float, prompt: int, out: int) -> RequestRecord:
    return RequestRecord("e", "m", sid, start, 0.1, 2.0, prompt, out, 0, 0.2, True)


def result(profile: str, tok_s: float, created_s: float) -> BenchResult:
    w = Workload(kind="synthetic", concurrency=8, input_len=512, output_len=128, duration_s=8)
    return BenchResult(tool="loadgen", workload=w, profile=profile, profile_args=("--enforce-eager",),
                       profile_env=(), engine_version=VERSION, platform="cpu", model="smollm2",
                       hardware={"cpu": "test cpu", "cpu_count": 2, "gpus": []}, duration_s=8, completed=20,
                       failed=0, cut=2, output_tokens=2000, prompt_tokens=9000, output_tok_s=tok_s,
                       total_tok_s=tok_s * 5, requests_per_s=2.0, ttft=LatencyStats(120, 480, 150),
                       tpot=LatencyStats(30, 60, 35), itl=LatencyStats(28, 95, 31), e2e=LatencyStats(),
                       slo=Slo(), goodput_req_s=1.8, goodput_pct=90.0, created_s=created_s)


@pytest.fixture
def store(settings) -> TuningStore:  # type: ignore[no-untyped-def]
    store = TuningStore(settings.data_dir)
    store.save_profile(Profile("fewer-seqs", "fewer sequences", args=("--max-num-seqs", "16"), parent="default"))
    store.save_profile(Profile("typo", "a misspelt flag", args=("--max-num-seq", "16"), parent="default"))
    records = [rec(f"s{i % 3}", i * 0.5, 200 + 300 * i, 20 + 5 * i) for i in range(12)]
    store.save_shape(shape_from_records("fleet-3", records, source="test"))
    store.save_result(result("default", 40.0, 1_700_000_000.0))
    store.save_result(result("fewer-seqs", 47.5, 1_700_000_100.0))
    return store


def fed_checker(profile, catalogue):  # type: ignore[no-untyped-def]
    return check_resolved(profile, catalogue, platform="cpu", engine_version=VERSION, help_text=HELP,
                          traits=model_traits("smollm2", LLAMA))


@pytest.fixture
def dock(qtbot, qloop, settings, store):  # type: ignore[no-untyped-def]
    from workstation.ui.tuning_dock import TuningDock

    d = TuningDock(settings)
    qtbot.addWidget(d)
    d.set_checker(fed_checker)
    d.resize(1400, 420)
    d.show()  # the first show reads the store (in a worker thread)
    qtbot.waitExposed(d)
    run(qloop, wait_until(lambda: d.view is not None))
    return d


def test_profiles_listed_with_their_diffs(dock) -> None:  # type: ignore[no-untyped-def]
    names = [dock.profile_list.item(i).text() for i in range(dock.profile_list.count())]
    assert {"default", "compiled", "latency"} <= {n.split()[0] for n in names}
    assert any(n.startswith("fewer-seqs") and "yours" in n for n in names)
    assert any("CUDA only" in n for n in names)  # the ladder
    dock.select_profile("fewer-seqs")
    assert "parent 'default'" in dock.diff_header.text()
    assert dock.diff_label.text() == "--max-num-seqs 16"
    dock.select_profile("latency")
    assert dock.diff_label.text().splitlines() == [
        "--performance-mode interactivity", "--max-num-batched-tokens 1024", "--max-num-seqs 64"]


def test_a_bad_profile_gets_its_check_in_plain_words(qloop, dock) -> None:  # type: ignore[no-untyped-def]
    async def body() -> None:
        dock.select_profile("typo")
        await wait_until(lambda: isinstance(dock.checks.get("typo"), CheckReport))

    run(qloop, body())
    assert dock.check_label.text().startswith("Cannot launch on vLLM 0.0.0+test (cpu)")
    messages = [dock.findings.item(i).text() for i in range(dock.findings.count())]
    assert any("does not know --max-num-seq" in m and "did you mean --max-num-seqs" in m for m in messages)
    assert "errors" in (dock.switch_blocker() or "") or "managed" in (dock.switch_blocker() or "")

    async def good() -> None:
        dock.select_profile("fewer-seqs")
        await wait_until(lambda: isinstance(dock.checks.get("fewer-seqs"), CheckReport))

    run(qloop, good())
    assert dock.check_label.text().startswith("Can launch")


def test_results_table_and_chart_from_stored_results(dock) -> None:  # type: ignore[no-untyped-def]
    table = dock.results_view.table
    assert table.rowCount() == 2
    row = [table.item(0, c).text() for c in range(table.columnCount())]
    assert row[:5] == ["fewer-seqs", VERSION, "smollm2", "47.5", "237.5"]  # newest first
    assert row[5:9] == ["120", "480", "28", "95"] and row[9] == "90%" and row[11].startswith("512/128 x 8")
    bars = [i for i in dock.results_view.plot.getPlotItem().items if isinstance(i, pg.BarGraphItem)]
    assert len(bars) == 2
    table.selectRow(1)
    bars = [i for i in dock.results_view.plot.getPlotItem().items if isinstance(i, pg.BarGraphItem)]
    assert len(bars) == 1


def test_shape_charts_drawn(dock) -> None:  # type: ignore[no-untyped-def]
    assert dock.shapes_view.shape_list.count() == 1 and dock.shapes_view.shape_list.currentItem().text() == "fleet-3"
    assert "12 requests from 3 sessions" in dock.shapes_view.summary.text()
    for plot in (dock.shapes_view.prompt_plot, dock.shapes_view.output_plot):
        assert [i for i in plot.getPlotItem().items if isinstance(i, pg.BarGraphItem)]
    curves = dock.shapes_view.concurrency_plot.getPlotItem().listDataItems()
    assert curves and len(curves[0].yData) > 1


# ----- the switch, through the app's wiring -----
class QtFakeLauncher(FakeLauncher):
    """A fake engine with what the live engine's owner and the window follow (state, log, model)."""

    state_changed = Signal(object, str)
    log_line = Signal(str)

    def __init__(self, *a, **kw) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*a, **kw)
        self.model = SimpleNamespace(served_name="smollm2", config_json=LLAMA, max_model_len=8192)
        self.extra_env: dict[str, str] = {}
        self.log_tail: list[str] = []
        self.state = EngineState.STOPPED
        self.pid = None

    async def start(self, progress=None):  # type: ignore[no-untyped-def]
        endpoint = await super().start(progress)
        # ``engine`` is the fake server here and the install on an EngineLauncher: be both
        self.engine.platform, self.engine.version = "cpu", VERSION  # type: ignore[union-attr]
        self.state = EngineState.READY
        self.state_changed.emit(self.state, "")
        return endpoint

    async def stop(self) -> None:
        await super().stop()
        self.state = EngineState.STOPPED
        self.state_changed.emit(self.state, "")


class FakeFleet:
    def __init__(self) -> None:
        self.endpoints: list[Endpoint] = []

    def update_endpoint(self, endpoint: Endpoint) -> None:
        self.endpoints.append(endpoint)


@pytest.fixture
def app_with(qtbot, qloop, settings, store):  # type: ignore[no-untyped-def]
    from workstation.app import Application
    from workstation.engine.host import EngineHost
    from workstation.services import Services
    from workstation.ui.engine_adapter import EngineAdapter
    from workstation.ui.main_window import MainWindow

    made = []

    def build(*, fail_start: bool = False, external: Endpoint | None = None,
              layout=None):  # type: ignore[no-untyped-def]
        vllm = FakeVllm()
        launchers: list[QtFakeLauncher] = []

        def factory(profile=None, env=None, *, name=None, **_where):  # type: ignore[no-untyped-def]
            first = not launchers  # the live engine; the switch's new ones may fail
            launchers.append(QtFakeLauncher(vllm, profile or flatten(PRESETS["default"], PRESETS), env,
                                            fail_start=fail_start and not first))
            launchers[-1].name = name or "managed:smollm2"
            return launchers[-1]

        if external is None:
            plans = layout(None) if layout is not None else ()
            host = EngineHost(launchers=factory, layout=layout, replicas=plans)
            run(qloop, host.start())
        else:
            host = EngineHost(external=external)
        app = Application(settings)
        app.services = Services(settings, http=vllm.client(), engine=host)
        app.http = app.services.http
        app.fleet = FakeFleet()
        app.services.follow_endpoint(app.fleet.update_endpoint)  # as services.fleet() wires a fleet
        app.services._plan_beside = lambda: Placement({}, side_by_side=True, reason="test: side by side")
        app.engine = EngineAdapter(host, profiles=tuple(PRESETS))
        # the app's checker reads the engine's help from its cache, as it does after the first run
        (settings.cache_dir / f"vllm-serve-help-{VERSION}-cpu.txt").parent.mkdir(parents=True, exist_ok=True)
        (settings.cache_dir / f"vllm-serve-help-{VERSION}-cpu.txt").write_text(HELP)
        app.window = MainWindow(settings, engine=app.engine)
        app._install_tuning()
        app.window.resize(1600, 900)
        app.window.show()
        app.window.tuning_dock.show()
        qtbot.waitExposed(app.window)
        made.append(app)
        return app, launchers

    yield build
    for app in made:
        run(qloop, app.window.tasks.aclose())
        run(qloop, app.http.aclose())
        app.window.allow_close()
        app.window.close()


def _switch_to(qloop, app, name: str) -> None:  # type: ignore[no-untyped-def]
    dock = app.window.tuning_dock

    async def body() -> None:
        await wait_until(lambda: dock.view is not None)
        dock.select_profile(name)
        await wait_until(lambda: dock.checks.get(name) not in (None, "checking"))
        assert isinstance(dock.checks[name], CheckReport), dock.checks[name]
        assert dock.switch_button.isEnabled(), dock.switch_blocker()
        dock.switch_button.click()
        await wait_until(lambda: dock.confirm_dialog is not None)
        dock.confirm_dialog.accept()
        assert not dock.switch_button.isEnabled() and dock.switch_task is not None
        await wait_until(lambda: dock.switch_task is None)

    run(qloop, body())


def test_switch_moves_the_fleet_to_the_new_engine(qloop, app_with) -> None:  # type: ignore[no-untyped-def]
    app, launchers = app_with()
    old = launchers[0]
    _switch_to(qloop, app, "fewer-seqs")
    dock = app.window.tuning_dock
    new = launchers[1]
    assert dock.switch_status.text().startswith("Switched to 'fewer-seqs'"), dock.switch_status.text()
    assert new.alive() and not old.alive()
    assert new.profile.args == ("--enforce-eager", "--max-num-seqs", "16")  # flattened from its parent
    assert app.fleet.endpoints and app.fleet.endpoints[-1] == new.endpoint
    assert app.engine.launcher is new and app.engine.view().profile == "fewer-seqs"
    assert "already runs this profile" in dock.switch_button.toolTip()
    assert "done" in dock.stepper.text()


def test_failed_switch_rolls_back_and_the_old_engine_keeps_serving(qloop, app_with):  # type: ignore[no-untyped-def]
    app, launchers = app_with(fail_start=True)
    old = launchers[0]
    _switch_to(qloop, app, "fewer-seqs")
    dock = app.window.tuning_dock
    assert dock.switch_status.text().startswith("Not switched: new engine failed"), dock.switch_status.text()
    assert "keeps serving" in dock.switch_status.text()
    assert old.alive() and app.engine.launcher is old and app.fleet.endpoints == []
    assert dock.switch_button.isEnabled()


def _confirmation(qloop, app, name: str) -> str:  # type: ignore[no-untyped-def]
    """The switch's confirmation box for ``name``, as it opens (then cancelled)."""
    dock = app.window.tuning_dock

    async def body() -> str:
        await wait_until(lambda: dock.view is not None)
        dock.select_profile(name)
        await wait_until(lambda: dock.checks.get(name) not in (None, "checking"))
        dock.switch_button.click()
        await wait_until(lambda: dock.confirm_dialog is not None)
        text = dock.confirm_dialog.text()
        dock.confirm_dialog.reject()
        return text

    return run(qloop, body())


TWO_ON_GPU0 = tuple(plan_replicas("cuda", gpu_indices=[0], engines_per_gpu=2))


def test_switch_confirmation_says_every_engine_restarts_where_engines_share_a_gpu(
        qloop, app_with) -> None:  # type: ignore[no-untyped-def]
    """The box promised a new engine beside the running one, which keeps serving, also where
    the switch restarts every engine (LiveSwitch's restart path). Fails before: the same text
    for every switch."""
    app, _ = app_with()  # one engine, no layout: a safe switch
    text = _confirmation(qloop, app, "fewer-seqs")
    assert "A new engine starts with it" in text and "keeps serving" in text

    # one engine now; 'fewer-seqs' would run two on GPU 0
    app, _ = app_with(layout=lambda p: list(TWO_ON_GPU0) if getattr(p, "name", p) == "fewer-seqs" else [])
    text = _confirmation(qloop, app, "fewer-seqs")
    assert "Every engine restarts" in text and "Sessions wait until the first engine serves again" in text
    assert "keeps serving" not in text

    # two engines share GPU 0 now, and would under the new profile too
    app, launchers = app_with(layout=lambda p: list(TWO_ON_GPU0))
    assert len(launchers) == 2 and app.engine.host.shares_devices
    text = _confirmation(qloop, app, "fewer-seqs")
    assert "Every engine restarts" in text and "keeps serving" not in text
    assert "Restart every engine" in app.window.tuning_dock.switch_button.toolTip()


def test_external_endpoint_cannot_be_switched(qloop, app_with) -> None:  # type: ignore[no-untyped-def]
    app, _ = app_with(external=Endpoint("http://127.0.0.1:9", "", "smollm2"))
    dock = app.window.tuning_dock
    run(qloop, wait_until(lambda: dock.view is not None))
    dock.select_profile("fewer-seqs")
    assert not dock.switch_button.isEnabled()
    assert "external endpoint" in dock.switch_button.toolTip()
    assert dock.check_label.text().startswith("Not checked: this window uses an external endpoint")
