"""The Tuning dock's Capture and Bench buttons: progress, a stored result, and Cancel — the
real dock, real jobs (tuning/live_jobs.py) against the scripted vLLM-format server standing
in for the live engine."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from PySide6.QtCore import Qt

from tests.helpers.scripted_server import ScriptedServer
from tests.ui.conftest import agent_responder, run, wait_until

pytestmark = pytest.mark.gui


@pytest.fixture
def server() -> Iterator[ScriptedServer]:
    with ScriptedServer(responder=agent_responder).in_thread() as s:
        yield s


@pytest.fixture
def dock_and_jobs(qtbot, qloop, settings, server, tiny_engine):  # type: ignore[no-untyped-def]
    """Capture runs agents (the scripted server answers them); Bench loads a real engine
    (tiny: /v1/completions and /metrics as vLLM serves them)."""
    from workstation.services import Services
    from workstation.tuning.live_jobs import LiveJobs
    from workstation.ui.tuning_dock import TuningDock

    services = Services(settings)
    dock = TuningDock(settings)
    qtbot.addWidget(dock)
    dock.show()
    jobs = LiveJobs(services.http, endpoint=lambda: server.endpoint, store=dock.store, fleets=services.fleet,
                    capture_sessions=2, capture_s=4.0, bench_s=3.0, bench_concurrency=2)
    dock.jobs.set_jobs(jobs)
    yield dock, jobs
    run(qloop, dock.tasks.aclose())
    run(qloop, services.aclose())


@pytest.mark.engine
def test_bench_shows_progress_and_stores_its_result(qtbot, qloop, dock_and_jobs, tiny_engine) -> None:  # type: ignore[no-untyped-def]
    dock, jobs = dock_and_jobs
    jobs.endpoint = lambda: tiny_engine
    row = dock.jobs

    async def body() -> None:
        assert row.bench_button.isEnabled() and not row.cancel_button.isEnabled()
        qtbot.mouseClick(row.bench_button, Qt.MouseButton.LeftButton)
        assert row.running and row.cancel_button.isEnabled() and not row.capture_button.isEnabled()
        await asyncio.sleep(1.5)
        assert 0 < row.progress.value() < 1000 and row.progress.isVisible()  # the bar moves over the planned time
        assert row.status.text().startswith(f"benchmark of {tiny_engine.base_url}")
        await wait_until(lambda: not row.running, 60)
        assert "stored as" in row.status.text() and row.progress.value() == 1000
        assert len(dock.store.results()) == 1
        await wait_until(lambda: dock.view is not None and len(dock.view.results) == 1)  # the Results tab has it

    run(qloop, body())


@pytest.mark.engine
def test_a_bench_is_cancelled_and_stores_nothing(qtbot, qloop, dock_and_jobs, tiny_engine) -> None:  # type: ignore[no-untyped-def]
    dock, jobs = dock_and_jobs
    jobs.endpoint = lambda: tiny_engine
    jobs.bench_s = 120.0
    row = dock.jobs

    async def body() -> None:
        qtbot.mouseClick(row.bench_button, Qt.MouseButton.LeftButton)
        await asyncio.sleep(1.0)
        qtbot.mouseClick(row.cancel_button, Qt.MouseButton.LeftButton)
        await wait_until(lambda: not row.running, 20)
        assert row.status.text() == "bench cancelled; nothing was stored"
        assert dock.store.results() == []
        assert row.bench_button.isEnabled() and not row.cancel_button.isEnabled()

    run(qloop, body())


def test_capture_records_a_traffic_shape_from_agent_sessions(qtbot, qloop, dock_and_jobs) -> None:  # type: ignore[no-untyped-def]
    dock, _jobs = dock_and_jobs
    row = dock.jobs

    async def body() -> None:
        before = set(dock.store.shapes())
        qtbot.mouseClick(row.capture_button, Qt.MouseButton.LeftButton)
        await wait_until(lambda: not row.running, 90)
        (new,) = set(dock.store.shapes()) - before
        assert new.startswith("live-2-") and f"saved as {new}" in row.status.text()
        assert dock.store.load_shape(new).requests > 0

    run(qloop, body())


@pytest.mark.engine
def test_tune_plans_from_the_installed_engine_runs_and_is_cancelled(qtbot, qloop, dock_and_jobs, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from workstation.config import load_settings
    from workstation.services import Services

    dock, jobs = dock_and_jobs
    with monkeypatch.context() as m:
        m.delenv("WORKSTATION_DATA_DIR")
        real = load_settings()  # the installed engine and models (the dock's store stays the test's)
    jobs.settings = real.model_copy(update={"engine": real.engine.model_copy(update={"model": "tiny"})})
    services = Services(jobs.settings)
    jobs.autotuners = services.autotuner
    row = dock.jobs
    said: list[str] = []

    def engines() -> set[int]:
        import psutil

        found = set()
        for p in psutil.process_iter(["cmdline"]):
            if any("vllm" in part for part in (p.info["cmdline"] or [])[:3]):
                found.add(p.pid)
        return found

    async def body() -> None:
        before = engines()  # the shared dev engines
        qtbot.mouseClick(row.tune_button, Qt.MouseButton.LeftButton)
        await wait_until(lambda: "starting vLLM" in row.status.text() or not row.running, 240)
        said.append(row.status.text())
        assert row.running and "with tiny" in said[0], said  # planned from the installed engine: a trial starts
        await wait_until(lambda: engines() - before != set(), 60)  # the trial engine runs
        await asyncio.sleep(1.0)
        qtbot.mouseClick(row.cancel_button, Qt.MouseButton.LeftButton)
        await wait_until(lambda: not row.running, 60)
        assert row.status.text() == "tune cancelled; nothing was stored"
        assert not list(dock.store.runs_dir.glob("tune-*.json"))
        await wait_until(lambda: engines() - before == set(), 30)  # the trial engine was stopped
        await services.aclose()

    run(qloop, body())
