"""What an autotune starts from, worked out once for the tune verb and the Tuning dock's Tune
button: the trial engines' settings (a fixed KV cache, a free port), the installed engine,
the model, the baseline profile, the flags this engine version knows, the model's traits
and the changes worth trying for the workload."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from workstation.config import Settings
from workstation.core.profiles import Profile
from workstation.core.traffic import TrafficShape
from workstation.engine.environment import EngineInstall, engine_help_text, require_engine
from workstation.engine.flags import known_flags
from workstation.engine.models import ModelSpec, resolve_model
from workstation.tuning.autotune import Candidate, candidates_for
from workstation.tuning.bench import sequences_per_stream, tuning_settings
from workstation.tuning.checks import ModelTraits, agents_constrain_output, model_traits
from workstation.tuning.results import Workload
from workstation.tuning.store import TuningStore


@dataclass(frozen=True)
class TunePlan:
    trial_settings: Settings
    engine: EngineInstall
    model: ModelSpec
    baseline: Profile
    help_flags: set[str]
    traits: ModelTraits
    candidates: list[Candidate]

    def describe(self, workload: Workload, budget_s: float, repeats: int) -> str:
        return (f"autotune {self.model.served_name} on vLLM {self.engine.version} ({self.engine.platform}), "
                f"baseline '{self.baseline.name}', {workload.describe()}, budget {budget_s:.0f} s, "
                f"{repeats} runs per measurement")


def sequences_in_flight(workload: Workload, shape: TrafficShape | None = None) -> int:
    """Sequences the engine holds at once under ``workload``: its streams times the ``n`` of
    their requests (:func:`sequences_per_stream`), which is what a ``--max-num-seqs``
    candidate must hold: with n=6 the streams' count alone offered the CPU engine 2 sequences
    for 4 streams of 6."""
    return max(1, workload.concurrency) * sequences_per_stream(workload, shape)


async def plan_tune(settings: Settings, store: TuningStore, workload: Workload, *, model: str | None = None,
                    profile: str | None = None, kv_cache_gib: float | None = None,
                    shape: TrafficShape | None = None) -> TunePlan:
    """``model``, ``profile``: default the settings' engine model and profile; ``shape``: the
    captured shape a replay workload plays (its ``n`` sizes the candidates). Raises
    ``UserError`` when no engine is installed or the model or profile is unknown."""
    trial = tuning_settings(settings, kv_cache_gib=kv_cache_gib)
    engine = require_engine(trial)
    spec = resolve_model(trial, model)
    baseline, _ = store.resolve(profile or settings.engine.profile, platform=engine.platform)
    help_flags = known_flags(await asyncio.to_thread(engine_help_text, engine, settings.cache_dir))
    guided = await asyncio.to_thread(agents_constrain_output, settings, spec)
    traits = model_traits(spec.served_name, spec.config_json, structured_outputs=guided)
    kv = int((trial.engine.kv_cache_gib or 0) * (1 << 30)) or None
    candidates = candidates_for(engine.platform, traits, concurrency=sequences_in_flight(workload, shape),
                                base_args=list(baseline.args), kv_cache_bytes=kv)
    return TunePlan(trial, engine, spec, baseline, help_flags, traits, list(candidates))
