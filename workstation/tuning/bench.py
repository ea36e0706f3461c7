"""One benchmark, end to end: (optionally) a managed engine with a profile, the workload, the
numbers stamped with profile, engine version, model and hardware, stored for comparison.

Engines started here are made by :class:`~workstation.engine.host.Launchers` (the app's one
recipe for a managed engine) and are always stopped in a ``finally``; their KV cache is sized explicitly (default 1 GiB on the CPU)
so two of them fit next to each other during a switch.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import httpx

from workstation.config import Settings
from workstation.core.endpoints import Endpoint
from workstation.core.profiles import Profile, engine_count
from workstation.core.traffic import TrafficShape
from workstation.engine.environment import EngineInstall
from workstation.engine.host import Launchers
from workstation.engine.launcher import EngineLauncher
from workstation.engine.models import ModelSpec
from workstation.tuning.bench_serve import run_bench_serve
from workstation.tuning.loadgen import LoadGenerator
from workstation.tuning.results import BenchResult, Slo, Workload, describe_hardware
from workstation.tuning.store import TuningStore

log = logging.getLogger(__name__)

DEFAULT_CPU_KV_GIB = 1.0


def tuning_settings(settings: Settings, *, kv_cache_gib: float | None = None) -> Settings:
    """Settings for engines the lab starts: a fixed KV cache (measurements must not depend on
    how much memory happened to be free) and a free port."""
    kv = kv_cache_gib if kv_cache_gib is not None else (settings.engine.kv_cache_gib or DEFAULT_CPU_KV_GIB)
    engine = settings.engine.model_copy(update={"kv_cache_gib": kv, "port": 0})
    return settings.model_copy(update={"engine": engine})


def sequences_per_stream(workload: Workload, shape: TrafficShape | None = None) -> int:
    """The ``n`` of ``workload``'s requests, which an engine's batch is sized for: a guided
    draw asks for n at once; a captured shape's p90."""
    n = max(1, workload.guided_choices)
    if shape is not None and shape.choices.count:
        n = max(n, round(shape.choices.p90))
    return n


@contextlib.asynccontextmanager
async def managed_engine(
    settings: Settings, engine: EngineInstall, model: ModelSpec, profile: Profile, *,
    log_dir: Path, env: Mapping[str, str] | None = None, say: Callable[[str], None] | None = None,
    sessions: int | None = None, sequences_per_session: int = 1,
) -> AsyncIterator[EngineLauncher]:
    """Start an engine with ``profile`` (already flattened), yield it, always stop it.

    ``sessions``: the concurrency a sized profile plans for (a benchmark's streams), each with
    ``sequences_per_session`` sequences in flight (:func:`sequences_per_stream`)."""
    launcher = Launchers(settings, engine, model, sequences_per_session=sequences_per_session)(
        profile, env, log_dir=log_dir, sessions=sessions)
    try:
        await launcher.start(say)
        yield launcher
    finally:
        await launcher.stop()


@contextlib.asynccontextmanager
async def managed_engines(
    settings: Settings, engine: EngineInstall, model: ModelSpec, profile: Profile, *,
    log_dir: Path, env: Mapping[str, str] | None = None, say: Callable[[str], None] | None = None,
    sessions: int | None = None, sequences_per_session: int = 1,
) -> AsyncIterator[list[EngineLauncher]]:
    """:func:`managed_engine` for a profile of several engines on the GPU
    (:attr:`Profile.engines_per_gpu`): each sized by the launcher for its share of the sessions
    and of the memory (``engines_on_device``), started one after another (vLLM sizes its KV cache by profiling the
    device's memory, which another engine starting beside it would disturb), all stopped in
    the end. One engine: a list of one."""
    count = engine_count(profile, {}, platform=engine.platform)
    if count == 1:
        async with managed_engine(settings, engine, model, profile, log_dir=log_dir, env=env, say=say,
                                  sessions=sessions, sequences_per_session=sequences_per_session) as one:
            yield [one]
        return
    make = Launchers(settings, engine, model, sequences_per_session=sequences_per_session)
    launchers: list[EngineLauncher] = []
    try:
        for i in range(count):
            launcher = make(profile, env, log_dir=log_dir / f"engine{i + 1}", sessions=sessions,
                            engines_on_device=count, place=i + 1)
            launchers.append(launcher)
            await launcher.start(None if say is None else (lambda m, i=i: say(f"[engine {i + 1}/{count}] {m}")))
        yield launchers
    finally:
        for launcher in launchers:
            await launcher.stop()


@dataclass(frozen=True, slots=True)
class BenchContext:
    """What the numbers are stamped with."""

    profile: Profile | None
    engine: EngineInstall | None
    model: ModelSpec | None
    hardware: Mapping[str, object]

    def stamp(self, result: BenchResult) -> BenchResult:
        return replace(
            result,
            profile=self.profile.name if self.profile else "external",
            profile_args=tuple(self.profile.args) if self.profile else (),
            profile_env=tuple(self.profile.env) if self.profile else (),
            engine_version=self.engine.version if self.engine else "?",
            platform=self.engine.platform if self.engine else "?",
            model=self.model.served_name if self.model else result.model,
            hardware=dict(self.hardware),
        )


async def run_workload(
    http: httpx.AsyncClient, endpoint: Endpoint | Sequence[Endpoint], workload: Workload, context: BenchContext, *,
    shape: TrafficShape | None = None, slo: Slo | None = None, tool: str = "loadgen",
    store: TuningStore | None = None, timeout_s: float = 600.0,
) -> BenchResult:
    """Run one workload against a running endpoint (or several engines of one model, the
    load spread over them: :class:`LoadGenerator`), stamp it, store it when given a store."""
    max_context = context.model.max_model_len if context.model else None
    if tool == "vllm":
        if context.engine is None:
            raise ValueError("vllm bench serve needs the engine's Python")
        if not isinstance(endpoint, Endpoint):
            if len(endpoint) != 1:
                raise ValueError("vllm bench serve measures one endpoint; the app's load generator spreads over several")
            endpoint = endpoint[0]
        tokenizer = str(context.model.local_dir) if context.model and context.model.local_dir else None
        raw = await run_bench_serve(context.engine, endpoint, workload, tokenizer=tokenizer, slo=slo,
                                    timeout_s=timeout_s)
    else:
        raw = await LoadGenerator(http, endpoint, workload, shape=shape, slo=slo, max_context=max_context).run()
    result = context.stamp(raw)
    if store is not None:
        result = store.save_result(result)
    return result


def context_for(profile: Profile | None, engine: EngineInstall | None, model: ModelSpec | None) -> BenchContext:
    return BenchContext(profile=profile, engine=engine, model=model, hardware=describe_hardware())
