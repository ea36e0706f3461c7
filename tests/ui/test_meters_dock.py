"""The meters dock: editable cost assumptions, per-GPU cards, CSV export."""

from __future__ import annotations

import threading

import httpx
import pytest

from tests.telemetry.fake_nvml import FakeNvml, device
from workstation.config import Settings, load_settings
from workstation.core.cost import SelfHostAssumptions, SelfHostMode
from workstation.telemetry.meters import Meters
from workstation.telemetry.nvml import NvmlReader
from workstation.telemetry.prices import load_price_table

pytestmark = pytest.mark.gui


@pytest.fixture
def dock(qtbot, tmp_path, monkeypatch):  # type: ignore[no-untyped-def]
    from workstation.ui.meters.dock import MetersDock

    monkeypatch.setenv("WORKSTATION_DATA_DIR", str(tmp_path / "data"))
    http = httpx.AsyncClient(transport=httpx.MockTransport(lambda r: httpx.Response(404)))
    meters = Meters(http, gpu_reader=NvmlReader(FakeNvml(devices=[device(), device(uuid="GPU-1")])),
                    prices=load_price_table(), api_model="gpt-4.1-mini",
                    assumptions=SelfHostAssumptions(mode=SelfHostMode.GPU_HOURLY, gpu_hourly_usd=3.6))
    widget = MetersDock(meters, settings=Settings(data_dir=tmp_path / "data"))
    qtbot.addWidget(widget)
    widget.show()
    return widget


def test_editing_an_assumption_reprices_and_is_kept_in_settings(dock, tmp_path):
    editor = dock.assumptions_editor
    editor.gpu_hourly.setValue(2.5)
    assert dock.meters.cost.assumptions.gpu_hourly_usd == pytest.approx(2.5)
    editor.mode.setCurrentIndex(editor.mode.findData(SelfHostMode.ENERGY.value))
    editor.electricity.setValue(0.3)
    assert dock.meters.cost.assumptions.mode is SelfHostMode.ENERGY
    assert dock.meters.cost.assumptions.electricity_usd_per_kwh == pytest.approx(0.3)
    assert not editor.gpu_hourly.isEnabled() and editor.electricity.isEnabled()
    saved = load_settings()
    assert saved.telemetry.electricity_usd_per_kwh == pytest.approx(0.3)
    assert (tmp_path / "data" / "settings.json").stat().st_mode & 0o777 == 0o600


def test_choosing_another_api_changes_the_comparison(dock):
    editor = dock.assumptions_editor
    target = next(i for i in range(editor.api.count()) if "gpt-4.1-mini" not in editor.api.itemData(i))
    editor.api.setCurrentIndex(target)
    key = editor.api.itemData(target)
    assert f"{dock.meters.cost.api.provider}/{dock.meters.cost.api.model}" == key
    assert load_settings().telemetry.api_price_model == key.split("/", 1)[1]


def test_gpu_cards_show_each_gpu(dock):
    reader = NvmlReader(FakeNvml(devices=[device(), device(uuid="GPU-1")]))
    reader.open()
    dock.gpu_cards.on_gpu(reader.read())
    assert sorted(dock.gpu_cards.cards) == [0, 1]
    assert "GPU0" in dock.gpu_cards.cards[0].text() and "util" in dock.gpu_cards.cards[0].text()


def test_csv_export_writes_the_series_off_the_gui_thread(dock, tmp_path, qloop, monkeypatch):
    from tests.ui.conftest import run

    dock.meters.series.record(1.0, {"gpu0.util_pct": 50.0}, units={"gpu0.util_pct": "%"})
    out = tmp_path / "meters.csv"
    writers: list[int] = []
    real_export = dock.meters.export_csv

    def export_and_note_the_thread(path):  # type: ignore[no-untyped-def]
        writers.append(threading.get_ident())
        return real_export(path)

    monkeypatch.setattr(dock.meters, "export_csv", export_and_note_the_thread)

    async def body() -> None:
        dock.csv_export.export_to(str(out))
        await dock.csv_export._task

    run(qloop, body())
    gui_thread = threading.get_ident()  # the test runs on the GUI thread, as the dock does
    assert writers and all(ident != gui_thread for ident in writers)
    lines = out.read_text().splitlines()
    assert lines[0] == "time_utc,t_s,series,unit,value"
    assert lines[1].endswith(",1.000,gpu0.util_pct,%,50.0") and len(lines) == 2
    assert dock.csv_export.status.text() == f"1 rows written to {out}"


def test_the_strip_says_no_metrics_for_an_endpoint_without_them(qtbot, qloop, settings):  # type: ignore[no-untyped-def]
    """In the window: an endpoint that answers but has no /metrics is "no metrics", never
    "engine down"."""
    from tests.helpers.scripted_server import ScriptedServer
    from tests.ui.conftest import run, wait_until
    from workstation.engine.http import make_http_client
    from workstation.ui.main_window import MainWindow
    from workstation.ui.meters.install import install_meters

    window = MainWindow(settings)
    qtbot.addWidget(window)

    async def body() -> None:
        async with make_http_client() as http:
            with ScriptedServer(metrics=False).in_thread() as server:
                meters = Meters.from_settings(settings, http, endpoints=[server.endpoint], metrics_interval_s=0.2)
                strip = install_meters(window, meters, settings)
                await meters.start()
                try:
                    await wait_until(lambda: strip.requests.text() == "no metrics", 20)
                    assert "has no engine metrics" in strip.requests.toolTip()
                finally:
                    await meters.aclose()

    run(qloop, body())
    window.allow_close()
    window.close()


def test_the_strip_and_the_status_bar_show_the_one_token_rate(qtbot, settings):  # type: ignore[no-untyped-def]
    """Both read ``Meters.tokens_per_s``: the engine's own count where it has /metrics."""
    import time

    from workstation.telemetry.vllm_metrics import EngineMetricsSample
    from workstation.ui.main_window import MainWindow
    from workstation.ui.meters.install import install_meters

    window = MainWindow(settings)
    qtbot.addWidget(window)
    meters = Meters.from_settings(settings, httpx.AsyncClient())
    strip = install_meters(window, meters, settings)
    meters.streams.on_chunk("s1", 5)  # what the panes' streams saw
    meters._on_engine_sampled(EngineMetricsSample(endpoint="local", t_mono=time.monotonic(), t_wall=time.time(),
                                                  up=True, windowed_generation_tokens_per_s=1234.0))
    meters.tick()
    assert strip.rate.text() == "1,234 tok/s"
    assert "1,234 tok/s" in window.summary_label.text()
    window.allow_close()
    window.close()


def test_the_throughput_chart_draws_each_engine_over_the_strips_window(dock):
    """Between a CPU engine's bursts the one-second scrape reads 0: the chart's engine line
    dropped to 0 there while the strip (5 s) did not. It draws the scrape's windowed rate now."""
    import time

    import numpy as np

    from tests.helpers.scrapes import scrape_at
    from workstation.core.endpoints import Endpoint

    scraper = dock.meters.engines.add(Endpoint(base_url="http://engine.test", api_key="", model="m", name="local"))
    t0 = time.monotonic() - 6
    samples = [scrape_at(scraper, t0 + i, generated=total)
               for i, total in enumerate((1000.0, 1005.0, 1010.0, 1015.0, 1015.0, 1015.0))]
    assert [s.generation_tokens_per_s for s in samples[-2:]] == [0.0, 0.0]  # what the line drew
    dock.redraw()
    plot = next(plot for plot, patterns in dock.plots if "engine.*.generation_tokens_per_s" in patterns)
    curves = [item for item in plot.listDataItems() if item.name() == "engine.local.generation_tokens_per_s"]
    assert len(curves) == 1
    _x, y = curves[0].getData()
    assert np.isnan(y[0])  # one reading: no rate yet
    assert np.allclose(y[1:], [5.0, 5.0, 5.0, 3.75, 3.0])  # it drew 0, 0 at the end
    assert y[-1] == pytest.approx(dock.meters.tokens_per_s)
