"""Screening: every candidate change measured against one baseline at once, engines side by side.

For a machine where several engines fit next to each other (a large GPU and a small model).
On a GPU one engine start costs 60-100 s (compile, CUDA-graph capture), so the sequential loop
of :mod:`workstation.tuning.autotune` gets through four or five changes in ten minutes. Here:

1. **Side by side.** The baseline, one engine per candidate change (the baseline plus that one
   change) and any reference profiles (``vllm-defaults``) start together
   (:meth:`ScreeningTuner.start`). Each gets the same fixed memory share and KV cache
   (:class:`SideBySide`: ``--gpu-memory-utilization`` for vLLM's start-up check and
   ``--kv-cache-memory-bytes``, which skips its memory profiling), so no engine's size depends
   on what the others took while starting. An idle engine costs the one being measured nothing.
2. **In turns.** Repeat *r* of every engine runs before repeat *r + 1* of any, so a drift of the
   machine (clocks, temperature, another tenant) lands on all of them alike.
3. **One change at a time decides** (:meth:`ScreeningTuner.screen`). A change is kept when its
   gain over the baseline, in output tok/s, clears twice the pooled run-to-run noise and its
   TTFT p95 is not worse than the baseline's by more than the guard (``ttft_guard_pct``).
4. **Confirmed together** (:meth:`ScreeningTuner.confirm`). The kept changes are combined (for
   a flag two of them set, the value that gained more), and the combination is measured against
   the baseline and the references in a second round, side by side again. The combination wins
   when its gain over that round's baseline beats the best single change's.

One round of engines can be screened with several workloads (an agent shape and a synthetic
one) before it is stopped (:meth:`ScreeningTuner.close`). Reports are the autotuner's
:class:`~workstation.tuning.autotune.TuneReport`, with :attr:`Screening.outcome` holding the
baseline, the best and the references as measured in the round that decided.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import statistics
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

import httpx
from psygnal import Signal

from workstation.config import Settings
from workstation.core.engine_sizing import GpuMemory
from workstation.core.profiles import STAND_IN_VALUES, Profile, apply_changes, effective
from workstation.core.traffic import TrafficShape
from workstation.engine.environment import EngineInstall
from workstation.engine.host import Launchers
from workstation.engine.launcher import EngineLauncher
from workstation.engine.models import ModelSpec
from workstation.core.endpoints import Endpoint
from workstation.tuning.agent_check import AgentCheck, refusal
from workstation.tuning.autotune import (
    TTFT_GUARD_PCT, Candidate, RunsSummary, TuneReport, TuneStep, cv_pct, pooled_noise_pct, verdict,
)
from workstation.tuning.bench import BenchContext, run_workload
from workstation.tuning.checks import ModelTraits, check_profile
from workstation.tuning.results import BenchResult, Slo, Workload, describe_hardware
from workstation.tuning.store import TuningStore, safe_name

log = logging.getLogger(__name__)

GIB = 1 << 30


class RunObserver(Protocol):
    """Watches one measured run: ``start()`` before it, ``stop(tokens=n)`` after, its record."""

    def start(self) -> None: ...

    def stop(self, *, tokens: int) -> dict[str, Any]: ...


@dataclass(frozen=True, slots=True)
class SideBySide:
    """How much of the GPU each engine of a screening round may take."""

    kv_cache_bytes: int
    gpu_memory_utilization: float

    def args(self) -> list[str]:
        return ["--kv-cache-memory-bytes", str(self.kv_cache_bytes),
                "--gpu-memory-utilization", f"{self.gpu_memory_utilization:.2f}"]

    @classmethod
    def for_round(cls, engines: int, gpu: GpuMemory, kv_cache_bytes: int, *,
                  overhead_bytes: int = 4 * GIB) -> SideBySide:
        """Every engine's KV cache plus its working memory must fit in what is free; the share
        vLLM checks at start-up is what one engine uses."""
        per_engine = kv_cache_bytes + overhead_bytes
        if engines * per_engine > gpu.free_bytes - GIB:
            raise ValueError(f"{engines} engines of {per_engine / GIB:.1f} GiB do not fit in the "
                             f"{gpu.free_bytes / GIB:.0f} GiB free on {gpu.name}")
        return cls(kv_cache_bytes, max(0.02, round(per_engine / gpu.total_bytes + 0.005, 2)))


@dataclass(slots=True)
class Trial:
    """One engine of a round."""

    label: str
    profile: Profile
    candidate: Candidate | None = None
    reference: bool = False
    launcher: EngineLauncher | None = None
    """Its (first) engine; None until it serves."""
    more: list[EngineLauncher] = field(default_factory=list)
    """The further engines of a profile of several on the GPU (:attr:`Profile.engines_per_gpu`)."""
    start_s: float | None = None
    error: str | None = None

    @property
    def engines(self) -> int:
        """Engines this trial runs (its profile's count on the GPU)."""
        return max(1, self.profile.engines_per_gpu or 1)

    @property
    def launchers(self) -> list[EngineLauncher]:
        return [] if self.launcher is None else [self.launcher, *self.more]

    @property
    def endpoints(self) -> list[Endpoint]:
        """Where its load goes: every engine, the streams spread over them."""
        return [launcher.endpoint for launcher in self.launchers]

    async def stop(self) -> None:
        for launcher in self.launchers:
            with contextlib.suppress(Exception):
                await launcher.stop()
        self.launcher, self.more = None, []


@dataclass(slots=True)
class Measured:
    """What one engine measured for one workload."""

    trial: Trial
    results: list[BenchResult] = field(default_factory=list)
    error: str | None = None
    probes: list[dict[str, Any]] = field(default_factory=list)
    """What a :attr:`ScreeningTuner.run_probe` recorded around each run (none without one)."""

    @property
    def runs(self) -> list[float]:
        return [r.output_tok_s for r in self.results]

    @property
    def mean(self) -> float:
        return statistics.fmean(self.runs) if self.results else 0.0

    @property
    def ttft_p95_ms(self) -> float | None:
        return _mean([r.ttft.p95_ms for r in self.results])

    def summary(self) -> dict[str, Any]:
        t = self.trial
        return {"label": t.label, "args": list(t.profile.args), "env": dict(t.profile.env), "engines": t.engines,
                "output_tok_s": round(self.mean, 1) if self.results else None,
                "runs_tok_s": [round(x, 1) for x in self.runs], "cv_pct": round(cv_pct(self.runs), 2),
                "ttft_p95_ms": self.ttft_p95_ms, "ttft_p50_ms": _mean([r.ttft.p50_ms for r in self.results]),
                "tpot_p50_ms": _mean([r.tpot.p50_ms for r in self.results]),
                "total_tok_s": _mean([r.total_tok_s for r in self.results]),
                "prefix_cache_hit_rate": _mean([r.prefix_cache_hit_rate for r in self.results]),
                "spec_acceptance_rate": _mean([r.spec_acceptance_rate for r in self.results]),
                "start_s": None if t.start_s is None else round(t.start_s, 1), "error": self.error or t.error,
                **({"probes": self.probes} if self.probes else {})}


def _mean(values: Sequence[float | None]) -> float | None:
    got = [v for v in values if v is not None]
    return round(statistics.fmean(got), 2) if got else None


@dataclass(slots=True)
class Screening:
    """One workload's screening: the report and what decided it."""

    name: str
    workload: Workload
    shape: TrafficShape | None
    report: TuneReport
    measured: list[Measured]
    kept: list[tuple[Candidate, float]] = field(default_factory=list)
    outcome: dict[str, Any] = field(default_factory=dict)

    def gain_over(self, label_prefix: str) -> float | None:
        """The best's output tok/s over a reference's, as measured in the deciding round."""
        best = (self.outcome.get("best") or {}).get("output_tok_s")
        for ref in self.outcome.get("references", []):
            if ref["label"].startswith(label_prefix) and ref.get("output_tok_s") and best:
                return round(best / ref["output_tok_s"], 3)
        return None


class ScreeningTuner:
    """``await start()``, ``await screen(...)`` per workload, ``await confirm(...)``, ``await close()``;
    or ``await run()`` for all of it on one workload."""

    progress = Signal(str)

    def __init__(
        self, settings: Settings, engine: EngineInstall, model: ModelSpec, http: httpx.AsyncClient,
        baseline: Profile, *, traits: ModelTraits, help_flags: set[str] | None, candidates: Sequence[Candidate],
        side: SideBySide, references: Sequence[Profile] = (), repeats: int = 3, store: TuningStore | None = None,
        slo: Slo | None = None, log_dir: Path, env: dict[str, str] | None = None,
        ttft_guard_pct: float = TTFT_GUARD_PCT, start_stagger_s: float = 2.0,
        gpu_memory: Callable[[], list[GpuMemory]] | None = None, sessions: int | None = None,
        sequences_per_session: int = 1,
    ) -> None:
        """``sessions``: the concurrency the engines are sized for (the largest workload's, so
        the baseline's batch never caps a workload it is screened with), each with
        ``sequences_per_session`` in flight (the largest ``n`` of the workloads,
        :func:`~workstation.tuning.bench.sequences_per_stream`)."""
        self.settings, self.engine, self.model, self.http = settings, engine, model, http
        self.baseline, self.traits, self.help_flags = baseline, traits, help_flags
        self.candidates, self.references = list(candidates), list(references)
        self.side, self.repeats = side, max(3, repeats)
        self.store, self.slo, self.log_dir = store, slo, log_dir
        self.env = dict(env or {})
        self.ttft_guard_pct, self.start_stagger_s = ttft_guard_pct, start_stagger_s
        self._gpu_memory = gpu_memory or (lambda: [])
        self.sessions = sessions
        self.sequences_per_session = max(1, sequences_per_session)
        self.trials: list[Trial] = []
        self.not_applicable: list[tuple[Candidate, str]] = []
        self.run_probe: Callable[[Sequence[EngineLauncher]], RunObserver] | None = None
        """Made per run around its window, given the engines that serve it (a benchmark's hook:
        the GPU suite records each engine process's CPU there)."""
        self.agent_check: Callable[[Sequence[Endpoint]], Awaitable[AgentCheck]] | None = None
        """Real agent sessions against one engine (:mod:`workstation.tuning.agent_check`): a
        change that clears the noise is kept only if its sessions hold up against the
        baseline's. None: no such check (the services set it where the user asks for it)."""

    # ----- engines -----
    def _problem(self, profile: Profile) -> str | None:
        args, env = effective(profile, {profile.name: profile}, platform=self.engine.platform,
                              values=STAND_IN_VALUES)
        errors = [f.message for f in check_profile(
            args, env, platform=self.engine.platform, engine_version=self.engine.version,
            help_flags=self.help_flags, traits=self.traits, profile_platforms=profile.platforms,
            profile_name=profile.name, max_model_len=self.model.max_model_len,
        ) if f.severity.value == "error"]
        return "; ".join(errors) or None

    def trial_profile(self, candidate: Candidate) -> Profile:
        return candidate.applied_to(self.baseline, f"{self.baseline.name}+{safe_name(candidate.change)}"[:64])

    @property
    def base(self) -> Trial:
        return self.trials[0]

    async def _start_one(self, trial: Trial, delay_s: float) -> None:
        """The trial's engines, together: each has the round's fixed KV cache, so no start
        depends on what another took (:class:`SideBySide`); each of a trial of *k* engines is
        sized by the launcher for its share of the sessions (``engines_on_device``), as the
        app's own are."""
        await asyncio.sleep(delay_s)
        k = trial.engines
        make = Launchers(self.settings, self.engine, self.model, sequences_per_session=self.sequences_per_session)
        log_dir = self.log_dir / safe_name(trial.label)
        launchers: list[EngineLauncher] = []
        for i in range(k):
            # each engine of several gets its own endpoint name (the first's with `#place`, as
            # the app's replicas), so a fleet can spread real sessions over them (the agent check)
            launchers.append(make(trial.profile, self.env, log_dir=log_dir if k == 1 else log_dir / f"engine{i + 1}",
                                  extra_args=self.side.args(), gpu_memory=self._gpu_memory, sessions=self.sessions,
                                  **({"engines_on_device": k, "place": i + 1} if k > 1 else {}),
                                  **({"name": f"{getattr(launchers[0], 'name', 'managed')}#{i + 1}"} if i else {})))
        t0 = time.monotonic()

        def said(i: int) -> Callable[[str], None]:
            tag = trial.label if k == 1 else f"{trial.label} {i + 1}/{k}"
            return lambda m: self.progress.emit(f"  [{tag}] {m}")

        results = await asyncio.gather(*(launcher.start(said(i)) for i, launcher in enumerate(launchers)),
                                       return_exceptions=True)
        failed = next((r for r in results if isinstance(r, BaseException)), None)
        if failed is not None:
            if not isinstance(failed, Exception):
                raise failed
            trial.error = f"did not start: {str(failed).splitlines()[0][:200]}"
            self.progress.emit(f"  [{trial.label}] {trial.error}")
            for launcher in launchers:
                with contextlib.suppress(Exception):
                    await launcher.stop()
            return
        trial.launcher, trial.more, trial.start_s = launchers[0], launchers[1:], time.monotonic() - t0

    async def _start_all(self, trials: Sequence[Trial]) -> None:
        await asyncio.gather(*(self._start_one(t, i * self.start_stagger_s) for i, t in enumerate(trials)))

    async def start(self) -> None:
        """The round's engines: baseline, one per applicable candidate, the references."""
        trials = [Trial(f"baseline ({self.baseline.name})", self.baseline)]
        for cand in self.candidates:
            profile = self.trial_profile(cand)
            problem = self._problem(profile)
            if problem:
                self.not_applicable.append((cand, problem))
                continue
            trials.append(Trial(cand.change, profile, candidate=cand))
        trials += [Trial(f"reference ({p.name})", p, reference=True) for p in self.references]
        self.trials = trials
        self.progress.emit(f"starting {sum(t.engines for t in trials)} engines side by side for {len(trials)} trials "
                           f"(KV cache {self.side.kv_cache_bytes / GIB:.1f} GiB each)")
        await self._start_all(trials)
        if self.base.launcher is None:
            raise RuntimeError(f"the baseline {self.base.error}")

    async def close(self) -> None:
        for t in self.trials:
            await t.stop()

    async def _measure(self, trials: Sequence[Trial], workload: Workload, shape: TrafficShape | None) -> list[Measured]:
        """``repeats`` windows on every running engine, in turns.

        Every repeat replays the same requests in size, order and sharing, with fresh contents (the
        workload's seed plus the repeat's number): what a real fleet sends next is new to the
        engine, save what the shape says it shares. With the same contents in every repeat
        (2026-12-02 on an H200, agent shape) each engine's first repeat measured 66-94 % of its
        later ones, all five engines alike whatever their turn: from the second repeat on its
        prompts were in the prefix cache and its regexes, each request's own as an agent's are, in
        the grammar compiler's cache, so those repeats measured a replay of cached work, and the
        first-repeat drop made the noise bar 2 x 16.5 %. With fresh contents (2026-12-03, same
        machine kind and shape) no engine's first repeat was its lowest, and the noise was 5.6 %.
        (Before that, a new seed per repeat had been blamed for a spread that was the host's drift,
        every engine's second repeat low together; the turns below spread that drift over all
        engines.)

        The order turns with each repeat (repeat *r* starts at engine *r*): no engine always
        runs first after a pause or last in a round (in the evening's H200 rounds the reference
        ran last in every repeat, so a drift within a round would have landed on it alone)."""
        hardware = describe_hardware()
        out = [Measured(t) for t in trials]
        for i in range(self.repeats):
            w = replace(workload, seed=workload.seed + i)
            shift = i % len(out) if out else 0
            for m in out[shift:] + out[:shift]:
                t = m.trial
                if t.launcher is None:
                    continue
                context = BenchContext(profile=t.profile, engine=self.engine, model=self.model, hardware=hardware)
                probe = self.run_probe(t.launchers) if self.run_probe is not None else None
                if probe is not None:
                    probe.start()
                tokens = 0
                try:
                    target = t.endpoints if t.more else t.launcher.endpoint
                    result = await run_workload(self.http, target, w, context, shape=shape,
                                                slo=self.slo, store=self.store)
                    tokens = result.output_tokens
                except Exception as exc:  # noqa: BLE001 - recorded; the round goes on
                    m.error = f"measurement failed: {str(exc).splitlines()[0][:160]}"
                    continue
                finally:
                    if probe is not None:
                        m.probes.append(await asyncio.to_thread(probe.stop, tokens=tokens))
                m.results.append(result)
                self.progress.emit(f"  run {i + 1}/{self.repeats} {t.label}: {result.output_tok_s:,.1f} tok/s, "
                                   f"TTFT p95 {result.ttft.p95_ms or 0:.0f} ms")
        return out

    # ----- decisions -----
    def _verdict(self, base: Measured, m: Measured, noise: float) -> tuple[float, bool, str]:
        return verdict(RunsSummary.of(base.mean, base.results), RunsSummary.of(m.mean, m.results), noise,
                       ttft_guard_pct=self.ttft_guard_pct)

    @staticmethod
    def combine(baseline: Profile, kept: Sequence[tuple[Candidate, float]]) -> Profile:
        """The baseline with every kept change, the bigger gain winning a flag two of them set."""
        args, env, engines = list(baseline.args), dict(baseline.env), baseline.engines_per_gpu
        for cand, _gain in sorted(kept, key=lambda k: k[1]):
            args = apply_changes(args, list(cand.args))
            env.update(dict(cand.env))
            engines = cand.engines if cand.engines is not None else engines
        label = " + ".join(c.change for c, _ in kept)
        return Profile(name=f"tuned-{baseline.name}", description=f"screened: {label}", args=tuple(args),
                       env=tuple(sorted(env.items())), platforms=baseline.platforms, engines_per_gpu=engines)

    @staticmethod
    def _step(index: int, m: Measured, delta: float | None, kept: bool, note: str = "") -> TuneStep:
        last = m.results[-1] if m.results else None
        return TuneStep(step=index, change=m.trial.label, output_tok_s=m.mean if m.results else None,
                        delta_pct=delta, kept=kept, runs_tok_s=tuple(m.runs), cv_pct=cv_pct(m.runs),
                        note=note or (m.error or m.trial.error or ""),
                        total_tok_s=_mean([r.total_tok_s for r in m.results]),
                        ttft_p50_ms=last.ttft.p50_ms if last else None, tpot_p50_ms=last.tpot.p50_ms if last else None,
                        start_s=m.trial.start_s)

    # ----- the rounds -----
    async def screen(self, name: str, workload: Workload, shape: TrafficShape | None = None) -> Screening:
        """Round 1 for one workload on the running engines."""
        t0 = time.monotonic()
        report = TuneReport(workload=workload, shape=shape.name if shape else None, model=self.model.served_name,
                            engine=f"vLLM {self.engine.version} ({self.engine.platform})",
                            hardware=describe_hardware())
        self.progress.emit(f"screening for {name}: {workload.describe()}")
        measured = await self._measure(self.trials, workload, shape)
        base = measured[0]
        noise = pooled_noise_pct([m.runs for m in measured if len(m.runs) >= 2])
        report.noise_pct, report.baseline_tok_s = noise, base.mean
        report.steps.append(self._step(0, base, 0.0, True))
        kept: list[tuple[Candidate, float]] = []
        for index, m in enumerate(measured[1:], start=1):
            if m.trial.reference:
                continue
            if not m.results:
                report.steps.append(self._step(index, m, None, False))
                continue
            delta, ok, note = self._verdict(base, m, noise)
            report.steps.append(self._step(index, m, delta, ok, note))
            if ok and m.trial.candidate is not None:
                kept.append((m.trial.candidate, delta))
        checks: dict[str, Any] = {}
        if self.agent_check is not None and kept:
            kept = await self._check_agents(kept, measured, report, checks)
        for cand, problem in self.not_applicable:
            report.steps.append(TuneStep(len(report.steps), cand.change, None, None, False,
                                         note=f"not applicable: {problem}"))
        best = max((m for m in measured[1:] if m.trial.candidate in {c for c, _ in kept}), key=lambda m: m.mean,
                   default=base)
        report.best_profile, report.best_tok_s = best.trial.profile, best.mean
        report.elapsed_s = time.monotonic() - t0
        outcome = {"round": 1, "kept": [c.change for c, _ in kept], "baseline": base.summary(),
                   "best": best.summary(), "references": [m.summary() for m in measured if m.trial.reference],
                   "measured": [m.summary() for m in measured]}
        if checks:
            outcome["agent_check"] = checks
        return Screening(name, workload, shape, report, measured, kept, outcome)

    async def _check_agents(self, kept: list[tuple[Candidate, float]], measured: Sequence[Measured],
                            report: TuneReport, record: dict[str, Any]) -> list[tuple[Candidate, float]]:
        """The kept changes whose real agent sessions hold up against the baseline's; the
        others' steps say why they were refused. ``record`` gets every check's figures. A trial
        of several engines is checked on all of them, its sessions spread as the app spreads
        them, so the check's tok/s is the fleet's on that profile."""
        assert self.agent_check is not None
        base = measured[0].trial
        if base.launcher is None:
            return kept
        self.progress.emit(f"agent check: real sessions on {base.label}")
        base_check = await self.agent_check(base.endpoints)
        record[base.label] = base_check.to_json()
        trials = {m.trial.candidate: m.trial for m in measured if m.trial.candidate is not None}
        held: list[tuple[Candidate, float]] = []
        for cand, gain in kept:
            trial = trials.get(cand)
            if trial is None or trial.launcher is None:
                continue
            self.progress.emit(f"agent check: real sessions on {trial.label}")
            check = await self.agent_check(trial.endpoints)
            record[trial.label] = check.to_json()
            why = refusal(base_check, check)
            if why is None:
                held.append((cand, gain))
                continue
            self.progress.emit(f"  {why}")
            report.steps = [replace(s, kept=False, note=why) if s.change == trial.label else s
                            for s in report.steps]
        return held

    async def confirm(self, screening: Screening) -> None:
        """Round 2: the kept changes together against the baseline and the references."""
        if len(screening.kept) < 2:
            return
        t0 = time.monotonic()
        report = screening.report
        combo = Trial("combined: " + " + ".join(c.change for c, _ in screening.kept),
                      self.combine(self.baseline, screening.kept))
        self.progress.emit(f"confirming for {screening.name}: {combo.label}")
        await self._start_all([combo])
        self.trials.append(combo)
        if combo.launcher is None:
            report.steps.append(TuneStep(len(report.steps), combo.label, None, None, False, note=combo.error or ""))
            return
        refs = [t for t in self.trials if t.reference and t.launcher is not None]
        again, m_combo, *m_refs = await self._measure([self.base, combo, *refs], screening.workload, screening.shape)
        noise = max(report.noise_pct,
                    pooled_noise_pct([m.runs for m in (again, m_combo, *m_refs) if len(m.runs) >= 2]))
        delta, ok, note = self._verdict(again, m_combo, noise)
        first_base = (screening.outcome.get("baseline") or {}).get("output_tok_s") or 0.0
        first_best = (screening.outcome.get("best") or {}).get("output_tok_s") or 0.0
        single_gain = first_best / first_base if first_base else 0.0
        gain = m_combo.mean / again.mean if again.mean else 0.0
        if ok and gain <= single_gain:
            ok, note = False, f"the best single change gained more (x{single_gain:.3f} vs x{gain:.3f})"
        report.steps.append(self._step(len(report.steps), m_combo, delta, ok, note))
        if ok:
            report.best_profile, report.best_tok_s, report.baseline_tok_s = combo.profile, m_combo.mean, again.mean
            screening.outcome = {**screening.outcome, "round": 2, "baseline": again.summary(),
                                 "best": m_combo.summary(), "references": [m.summary() for m in m_refs]}
        else:
            screening.outcome = {**screening.outcome, "confirm": {"combined": m_combo.summary(),
                                                                 "baseline": again.summary(), "note": note}}
        report.elapsed_s += time.monotonic() - t0
        await combo.stop()

    async def run(self, workload: Workload, shape: TrafficShape | None = None, *, name: str = "workload") -> Screening:
        await self.start()
        try:
            screening = await self.screen(name, workload, shape)
            await self.confirm(screening)
            return screening
        finally:
            await self.close()
