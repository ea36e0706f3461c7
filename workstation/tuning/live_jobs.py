"""The tuning jobs the window runs against the live engine: capture a traffic shape (agent
sessions of the demo manifest, recorded) and bench the engine (the newest captured shape's
workload, else the built-in agent-like one). Qt-free; each job is one coroutine that the
caller may cancel at any point (the capture's fleet closes, the load generator's requests
end), says what it does through ``say``, stores what it made and returns one line for it."""

from __future__ import annotations

import asyncio
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx

from workstation.core.endpoints import Endpoint
from workstation.engine.environment import EngineInstall
from workstation.tuning.bench import context_for, run_workload
from workstation.tuning.fleet_capture import FleetMaker, capture_fleet_shape
from workstation.tuning.loadgen import agent_like_workload, workload_from_shape
from workstation.tuning.store import TuningStore

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
    capture_sessions: int = 4
    capture_s: float = 60.0
    bench_s: float = 30.0
    bench_concurrency: int = 8

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

    async def bench(self, say: Say) -> str:
        """Load the live engine for ``bench_s``; stores the result."""
        names = self.store.shapes()
        shape = self.store.load_shape(names[-1]) if names else None
        if shape is not None:
            workload = workload_from_shape(shape, concurrency=self.bench_concurrency, duration_s=self.bench_s,
                                           warmup_s=min(5.0, self.bench_s / 5))
        else:
            workload = agent_like_workload(concurrency=self.bench_concurrency, duration_s=self.bench_s,
                                           warmup_s=min(5.0, self.bench_s / 5))
        endpoint = self.endpoint()
        say(f"benchmark of {endpoint.base_url}: {workload.describe()}"
            + (f" (shape {shape.name})" if shape is not None else " (no shape captured: the built-in agent-like one)"))
        engine = await asyncio.to_thread(self.engine)
        result = await run_workload(self.http, endpoint, workload, context_for(None, engine, None),
                                    shape=shape, store=self.store, timeout_s=self.bench_s + 120)
        return f"{result.headline()} — stored as {result.result_id}"
