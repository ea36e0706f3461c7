"""The tuning jobs the window runs: capture a traffic shape (agent sessions of the demo
manifest on the live engine, recorded), bench the live engine (the newest captured shape's
workload, else the built-in agent-like one — as the guided protocol sends it where the app's
agents are guided for the model) and tune (trial engines, one change at a time). Qt-free; each job is one coroutine that the
caller may cancel at any point (the capture's fleet closes, the load generator's requests
end), says what it does through ``say``, stores what it made and returns one line for it. A
tune that keeps a change saves it as the profile ``tuned-<baseline>``."""

from __future__ import annotations

import asyncio
import functools
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx

from workstation.config import Settings
from workstation.core.endpoints import Endpoint
from workstation.core.errors import UserError
from workstation.core.traffic import TrafficShape
from workstation.engine.environment import EngineInstall
from workstation.tuning.autotune import MIN_REPEATS, Autotuner, save_tuned
from workstation.tuning.bench import context_for, run_workload
from workstation.tuning.fleet_capture import FleetMaker, capture_fleet_shape
from workstation.tuning.loadgen import builtin_workload, workload_from_shape
from workstation.tuning.results import Workload
from workstation.tuning.store import TuningStore
from workstation.tuning.tune_plan import plan_tune

Say = Callable[[str], None]


@dataclass
class LiveJobs:
    http: httpx.AsyncClient
    endpoint: Callable[[], Endpoint]
    """The live engine's endpoint when the job starts (the engine's owner follows restarts)."""
    store: TuningStore
    fleets: FleetMaker
    engine: Callable[[], EngineInstall | None] = lambda: None
    """The installed engine the results name (looked up in a worker thread when a bench starts)."""
    settings: Settings | None = None
    """The app's settings (Tune plans its trial engines from them)."""
    autotuners: Callable[..., Autotuner] | None = None
    """``Services.autotuner``."""
    capture_sessions: int = 4
    capture_s: float = 60.0
    bench_s: float = 30.0
    bench_concurrency: int = 8
    tune_s: float = 900.0
    """Tune's budget: it tries one change after another until this time is spent."""

    async def capture(self, say: Say) -> str:
        """Record ``capture_sessions`` agent sessions for ``capture_s``; saves the shape."""
        name = f"live-{self.capture_sessions}-{time.strftime('%Y%m%d-%H%M%S')}"
        self.store.root.mkdir(parents=True, exist_ok=True)
        workdir = Path(tempfile.mkdtemp(prefix="capture-", dir=self.store.root))
        shape = await capture_fleet_shape(self.http, self.endpoint(), name=name, sessions=self.capture_sessions,
                                          duration_s=self.capture_s, workdir=workdir, say=say,
                                          fleets=self.fleets)
        path = self.store.save_shape(shape)
        return f"{shape.summary_line()} — saved as {path.stem}"

    def _newest_shape(self) -> TrafficShape | None:
        name = self.store.latest_shape()
        return self.store.load_shape(name) if name is not None else None

    async def _workload(self, shape: TrafficShape | None, served_name: str | None, *, duration_s: float,
                        warmup_s: float, concurrency: int | None = None) -> Workload:
        """The shape's replay, else the built-in agent-like workload as the app's agents send it
        to this model (:func:`~workstation.tuning.loadgen.builtin_workload`; no settings: the
        plain one)."""
        if shape is not None:
            return workload_from_shape(shape, concurrency=concurrency, duration_s=duration_s, warmup_s=warmup_s)
        workload, _how = await asyncio.to_thread(builtin_workload, self.settings, served_name, concurrency=concurrency,
                                                 duration_s=duration_s, warmup_s=warmup_s)
        return workload

    async def tune(self, say: Say) -> str:
        """Autotune a trial engine (beside the live one: it needs free GPU memory) for the newest
        shape's workload, else the built-in one, within ``tune_s``; saves the run."""
        if self.settings is None or self.autotuners is None:
            raise UserError("tuning needs the app's settings and service factory")
        shape = self._newest_shape()
        workload = await self._workload(shape, None, duration_s=30.0, warmup_s=5.0)
        say("planning: the installed engine, its flags and the changes worth trying…")
        plan = await plan_tune(self.settings, self.store, workload, shape=shape)
        say(plan.describe(workload, self.tune_s, MIN_REPEATS))
        run_name = f"tune-{time.strftime('%Y%m%d-%H%M%S')}"
        tuner = self.autotuners(plan.trial_settings, plan.engine, plan.model, plan.baseline, workload, shape=shape,
                                traits=plan.traits, help_flags=plan.help_flags, candidates=plan.candidates,
                                budget_s=self.tune_s, repeats=MIN_REPEATS, store=self.store,
                                log_dir=self.store.runs_dir / run_name)
        tuner.progress.connect(say)
        tuner.step_done.connect(lambda step: say(step.table_row()))
        report = await tuner.run()
        self.store.save_run(run_name, report.to_json())
        # the kept changes become a profile the dock can switch the live engine to
        saved = await asyncio.to_thread(functools.partial(save_tuned, self.store, report, baseline=plan.baseline.name,
                                                          platform=plan.engine.platform))
        if saved is None or not report.best_tok_s:
            return f"tuned for {report.elapsed_s:.0f} s: nothing measured better than the baseline — run {run_name}"
        gain = (f" ({100 * (report.best_tok_s / report.baseline_tok_s - 1):+.1f}% over the baseline)"
                if report.baseline_tok_s else "")
        return f"best {report.best_tok_s:,.1f} tok/s{gain}, saved as profile '{saved.profile.name}' — run {run_name}"

    async def bench(self, say: Say) -> str:
        """Load the live engine for ``bench_s``; stores the result."""
        shape = self._newest_shape()
        endpoint = self.endpoint()
        workload = await self._workload(shape, endpoint.model, concurrency=self.bench_concurrency,
                                        duration_s=self.bench_s, warmup_s=min(5.0, self.bench_s / 5))
        say(f"benchmark of {endpoint.base_url}: {workload.describe()}"
            + (f" (shape {shape.name})" if shape is not None else
               f" (no shape captured: the built-in agent-like one{_guided_words(workload)})"))
        engine = await asyncio.to_thread(self.engine)
        result = await run_workload(self.http, endpoint, workload, context_for(None, engine, None),
                                    shape=shape, store=self.store, timeout_s=self.bench_s + 120)
        return f"{result.headline()} — stored as {result.result_id}"


def _guided_words(workload: Workload) -> str:
    return ", as the guided protocol sends it" if workload.guided_choices else ""
