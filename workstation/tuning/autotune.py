"""The autotuner: from a baseline, one change at a time, kept only when it clearly helps.

The report's method, as a loop: measure the baseline; for each candidate change, start an
engine with the current best profile plus that one change, measure it ``repeats`` times on
the same workload (a replay of a captured traffic shape), and keep the change only when its
gain in output tok/s exceeds twice the noise. The noise is the pooled run-to-run relative
standard deviation of every measurement so far (at least ``repeats`` >= 3 runs each), so
the bar rises on a noisy machine instead of crediting luck. It stops at a time budget: a
step whose estimated cost does not fit in what is left is skipped, and a step still running
at the deadline is cancelled (its engine is stopped).

Candidates come from the platform and the model (:func:`candidates_for`):

- CPU engine: prefill chunk (``--max-num-batched-tokens``), batch cap (``--max-num-seqs``),
  n-gram speculative decoding, KV cache size, streaming interval, compiled graphs;
- CUDA, hybrid Mamba model with an MTP head: the report's ladder (MTP 3 + OMP 1, async
  scheduling, FlashInfer Mamba kernels, MTP 3 -> 1, FP16 SSM state) then batch limits;
  other CUDA models: what cuts host work per token first (stream interval, API servers,
  n-gram drafts on the GPU), then prefill chunk, CUDA-graph sizes, fp8 KV cache, prefix hash,
  async scheduling, batch limits, performance mode. On a GPU with room for several engines
  :mod:`workstation.tuning.screening` measures them side by side instead of one after another.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import httpx
from psygnal import Signal

from workstation.config import Settings
from workstation.core.profiles import STAND_IN_VALUES, Profile, apply_changes, describe_change, effective, flatten, split_flags
from workstation.core.traffic import TrafficShape
from workstation.engine.environment import EngineInstall
from workstation.engine.models import ModelSpec
from workstation.tuning.bench import BenchContext, managed_engines, run_workload, sequences_per_stream
from workstation.tuning.checks import ModelTraits, check_profile
from workstation.tuning.results import BenchResult, Slo, Workload, describe_hardware, hardware_key
from workstation.tuning.store import TuningStore, safe_name

log = logging.getLogger(__name__)

GIB = 1 << 30
MIN_REPEATS = 3


@dataclass(frozen=True, slots=True)
class Candidate:
    change: str
    """What the table shows (``--max-num-seqs 16``)."""
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    slow_start: bool = False
    """Compiled graphs: the start takes several times longer (for the budget)."""
    engines: int | None = None
    """Engines of the model on each GPU (:attr:`Profile.engines_per_gpu`); None: as the base has."""

    @classmethod
    def of(cls, args: Sequence[str], env: Sequence[tuple[str, str]] = (), *, label: str | None = None,
           slow_start: bool = False, engines: int | None = None) -> Candidate:
        return cls(label or describe_change(list(args), dict(env), engines), tuple(args), tuple(env), slow_start,
                   engines)

    def applied_to(self, base: Profile, name: str) -> Profile:
        """``base`` with this one change: its flags over the base's, its env added, its engine count."""
        return Profile(name=name, description=self.change, args=tuple(apply_changes(list(base.args), list(self.args))),
                       env=tuple(sorted({**dict(base.env), **dict(self.env)}.items())), platforms=base.platforms,
                       engines_per_gpu=self.engines if self.engines is not None else base.engines_per_gpu)


def _spec(method: str, n: int, **extra: Any) -> str:
    return json.dumps({"method": method, "num_speculative_tokens": n, **extra}, separators=(",", ":"))


def _value(args: Sequence[str], flag: str) -> str | None:
    values = split_flags(list(args)).get(flag)
    return " ".join(values) if values else None


GUIDANCE = Candidate.of(["--structured-outputs-config", json.dumps({"backend": "guidance"}, separators=(",", ":"))],
                       label="structured outputs by llguidance")
"""Where the agents hold the model's replies to a grammar (the guided protocol: a regex per
request, compiled per request, applied at every step on the engine's host side), the grammar
backend is host work per token; vLLM's ``auto`` picks xgrammar, llguidance compiles lazily.
Checked on the CPU engine (vLLM 0.32, llguidance 1.7.6): 4 real guided sessions made 4.25 tool
calls each with no errors on it, as on xgrammar. vLLM 0.26's CUDA build carries llguidance."""

GUIDANCE_SYNC = Candidate.of([*GUIDANCE.args, "--no-async-scheduling"],
                             label="structured outputs by llguidance, no async scheduling")
"""llguidance as the CPU engine ran it. On an H200 (vLLM 0.26) real agents made 0.75 tool calls a
session on llguidance instead of 4.25, with async scheduling ("grammar rejected tokens [198]")
and without it ("token "Ċ" doesn't satisfy the grammar", 2026-12-03): token 198 is the newline,
which llguidance read as text because that machine's transformers 5.17 had converted SmolLM2's
tokenizer with a sentencepiece decoder chain (the conversion now writes a plain byte-level one:
``workstation/engine/scripts/byte_level.py``). Whether async scheduling is safe beside
llguidance once the tokenizer is right is not measured yet, so these candidates keep it off."""


def candidates_for(platform: str, traits: ModelTraits, *, concurrency: int, base_args: Sequence[str],
                   kv_cache_bytes: int | None = None) -> list[Candidate]:
    """The changes to try, in order (cheap and promising first), for this platform and model."""
    out: list[Candidate] = []
    eager = "--enforce-eager" in split_flags(list(base_args))
    if platform == "cpu":
        batched = int(_value(base_args, "--max-num-batched-tokens") or 2048)
        seqs = int(_value(base_args, "--max-num-seqs") or 128)
        out.append(Candidate.of(["--max-num-batched-tokens", str(batched * 2)]))
        cap = max(2, concurrency // 2)
        if cap < seqs:
            out.append(Candidate.of(["--max-num-seqs", str(cap)]))
        out.append(Candidate.of(["--speculative-config", _spec("ngram", 3, prompt_lookup_max=4, prompt_lookup_min=2)],
                                label="n-gram speculation, 3 tokens"))
        if kv_cache_bytes:
            out.append(Candidate.of(["--kv-cache-memory-bytes", str(kv_cache_bytes * 2)],
                                    label=f"KV cache {kv_cache_bytes / GIB:g} -> {2 * kv_cache_bytes / GIB:g} GiB"))
        out.append(Candidate.of(["--stream-interval", "4"]))
        if traits.structured_outputs:
            out.append(GUIDANCE)
        if eager:
            out.append(Candidate.of(["--no-enforce-eager"], label="compiled graphs (no --enforce-eager)",
                                    slow_start=True))
        return out
    if traits.hybrid_mamba and traits.mtp_layers:
        out += [
            Candidate.of(["--speculative-config", _spec("mtp", 3)], [("OMP_NUM_THREADS", "1")],
                         label="MTP 3 + OMP_NUM_THREADS=1"),
            Candidate.of(["--async-scheduling"]),
            Candidate.of(["--mamba-backend", "flashinfer"], label="Mamba backend FlashInfer"),
            Candidate.of(["--speculative-config", _spec("mtp", 1)], label="MTP 3 -> 1"),
            Candidate.of(["--mamba-ssm-cache-dtype", "float16", "--enable-mamba-cache-stochastic-rounding"],
                         label="SSM state FP16 + stochastic rounding"),
        ]
    else:
        # A small model on a big GPU is bound by host work per token and per step (measured on
        # an H200 with SmolLM2: ~85 us of CPU per generated token at 11k tok/s), so what cuts
        # host work comes first: fewer, larger stream events; more API server processes;
        # n-gram drafts (agents re-emit code they just read; several tokens per step); then
        # bigger prefill chunks for long agent prompts, CUDA graphs over mixed steps, the KV
        # cache in fp8, a faster prefix hash, and async scheduling named (on by default in
        # recent vLLM; explicit where an older one has it off).
        out += [
            # Measured on an H200 with the fleet's captured agent shape (2026-12-02): GPU busy
            # 11 % of the time while the engine-core process took 7.6-8.6 cores, 2.0-3.3 ms of
            # CPU per generated token, compiling each request's grammar (xgrammar) in its pool
            # of (cores + 1) // 2 threads and filling masks; with llguidance 1.2 cores. Two
            # engines on the GPU (half the memory and the sessions each), measured next: -20.9 %,
            # their two xgrammar pools taking 12.5-13.6 of the host's 16 cores (time per token
            # 15.1 -> 18.6 ms). With llguidance (no async scheduling, where it holds the agents'
            # grammar) one engine core took 1.2 cores (+2.9 %): its one step-loop thread is the
            # limit then, which a second engine doubles without the pools' contention. Measured
            # (2026-12-03, noise 5.6 %): 2 engines +56 %, 4 engines +94 % (1.92x vllm-defaults),
            # both refused by the agent check for the tokenizer fault GUIDANCE_SYNC tells of.
            # Four: the host's 16 cores hold four step loops, an API server each and the agents
            # with room; the GPU, busy 11 % of the time for one engine, holds four.
            *([Candidate.of(GUIDANCE_SYNC.args, engines=2, label="2 engines on each GPU, llguidance, no async scheduling"),
               Candidate.of(GUIDANCE_SYNC.args, engines=4, label="4 engines on each GPU, llguidance, no async scheduling")]
              if traits.structured_outputs else []),
            Candidate.of([], engines=2),
            Candidate.of([], engines=4),
            Candidate.of(["--stream-interval", "8"], label="stream interval 8"),
            Candidate.of(["--api-server-count", "4"], label="4 API server processes"),
            Candidate.of(["--speculative-config", _spec("ngram_gpu", 3, prompt_lookup_max=4, prompt_lookup_min=2)],
                         label="n-gram speculation (GPU), 3 tokens"),
            Candidate.of(["--max-num-batched-tokens", "16384"]),
            # more drafts per step where the output repeats what the context holds (measured on
            # an H200, agent shape: 3 drafts +14-19 %, below the noise bar of that round)
            Candidate.of(["--speculative-config", _spec("ngram_gpu", 5, prompt_lookup_max=5, prompt_lookup_min=2)],
                         label="n-gram speculation (GPU), 5 tokens"),
            # an agent copying a file it read copies far more than 5 tokens in a row
            Candidate.of(["--speculative-config", _spec("ngram_gpu", 8, prompt_lookup_max=5, prompt_lookup_min=2)],
                         label="n-gram speculation (GPU), 8 tokens"),
            # The two ways to n-gram drafts where the agents' replies are held to a grammar
            # (ngram_gpu beside it under async scheduling broke them on an H200: vLLM #49694):
            # the host-side proposer, for which vLLM turns async scheduling off itself and keeps
            # the grammar on its synchronous path, and the GPU proposer with async scheduling
            # off; whether either pays for the lost overlap is what the screening measures, and
            # whether the agents still work is what the agent check measures.
            Candidate.of(["--speculative-config", _spec("ngram", 8, prompt_lookup_max=5, prompt_lookup_min=2)],
                         label="n-gram speculation (host), 8 tokens"),
            Candidate.of(["--speculative-config", _spec("ngram_gpu", 8, prompt_lookup_max=5, prompt_lookup_min=2),
                          "--no-async-scheduling"],
                         label="n-gram speculation (GPU), 8 tokens, no async scheduling"),
            *([GUIDANCE, GUIDANCE_SYNC] if traits.structured_outputs else []),
            Candidate.of(["--max-cudagraph-capture-size", "1024"], label="CUDA graphs up to 1,024 tokens"),
            Candidate.of(["--kv-cache-dtype", "fp8"], label="fp8 KV cache"),
            Candidate.of(["--prefix-caching-hash-algo", "xxhash"], label="prefix hash xxhash"),
            Candidate.of(["--async-scheduling"]),
            # vLLM's own batch on a GPU of 70 GiB or more: the only flag of the `default`
            # profile that differs from vllm-defaults at batch 1, where `default` measured
            # 80-91 % of it on an H200
            Candidate.of(["--max-num-seqs", "1024"]),
        ]
    out += [
        Candidate.of(["--max-num-seqs", str(max(8, 2 ** math.ceil(math.log2(max(concurrency, 1)))))]),
        Candidate.of(["--max-num-batched-tokens", "16384"]),
        Candidate.of(["--performance-mode", "throughput"]),
    ]
    seen: set[tuple[Any, ...]] = set()
    out = [c for c in out if not ((key := (c.args, c.env, c.engines)) in seen or seen.add(key))]  # type: ignore[func-returns-value]
    if eager:
        out.insert(0, Candidate.of(["--no-enforce-eager"], label="CUDA graphs (no --enforce-eager)", slow_start=True))
    return out


# --------------------------------------------------------------------------- decisions
def cv_pct(values: Sequence[float]) -> float:
    """Relative standard deviation of repeated runs, in percent."""
    if len(values) < 2:
        return 0.0
    mean = statistics.fmean(values)
    return 100.0 * statistics.stdev(values) / mean if mean else 0.0


def pooled_noise_pct(groups: Sequence[Sequence[float]]) -> float:
    """Root mean square of each measurement's relative standard deviation."""
    cvs = [cv_pct(g) for g in groups if len(g) >= 2]
    return math.sqrt(sum(c * c for c in cvs) / len(cvs)) if cvs else 0.0


def decide(best_tok_s: float, candidate_tok_s: float, noise_pct: float) -> tuple[float, bool]:
    """Δ% against the current best, and whether it clears twice the noise."""
    delta = 100.0 * (candidate_tok_s - best_tok_s) / best_tok_s if best_tok_s else 0.0
    return delta, delta > 2.0 * noise_pct


TTFT_GUARD_PCT = 10.0
"""A change that clears the noise is still refused when its TTFT p95 is worse than this."""
EARLY_ENDING_SLACK = 0.01
"""Share of requests a change may end early beyond what the baseline's did."""


@dataclass(frozen=True, slots=True)
class RunsSummary:
    """What a verdict reads of one engine's runs on a workload."""

    tok_s: float
    ttft_p95_ms: float | None
    ended_early_share: float = 0.0

    @classmethod
    def of(cls, tok_s: float, results: Sequence[BenchResult]) -> RunsSummary:
        """``tok_s``: the runs' mean output tok/s; TTFT and early endings from ``results``."""
        p95s = [r.ttft.p95_ms for r in results if r.ttft.p95_ms is not None]
        done = sum(r.completed for r in results)
        return cls(tok_s, statistics.fmean(p95s) if p95s else None,
                   sum(r.ended_early for r in results) / done if done else 0.0)


def verdict(base: RunsSummary, candidate: RunsSummary, noise_pct: float, *,
            ttft_guard_pct: float = TTFT_GUARD_PCT) -> tuple[float, bool, str]:
    """Δ% against ``base``, whether the change is kept, and why not where it gains: it must
    clear twice the noise, keep TTFT p95 within the guard and end no more requests early
    than the baseline did (beyond :data:`EARLY_ENDING_SLACK`)."""
    delta, kept = decide(base.tok_s, candidate.tok_s, noise_pct)
    if candidate.ended_early_share > base.ended_early_share + EARLY_ENDING_SLACK:
        return delta, False, (f"refused: the engine ended {100 * candidate.ended_early_share:.0f}% of the requests "
                              f"before their length ({100 * base.ended_early_share:.0f}% on the baseline): "
                              "decoding breaks with this change")
    if kept and base.ttft_p95_ms and candidate.ttft_p95_ms \
            and candidate.ttft_p95_ms > base.ttft_p95_ms * (1 + ttft_guard_pct / 100):
        return delta, False, (f"refused: TTFT p95 {candidate.ttft_p95_ms:.0f} ms vs {base.ttft_p95_ms:.0f} ms "
                              f"(guard +{ttft_guard_pct:.0f}%)")
    return delta, kept, ""


@dataclass(frozen=True, slots=True)
class TuneStep:
    step: int
    change: str
    output_tok_s: float | None
    delta_pct: float | None
    kept: bool
    runs_tok_s: tuple[float, ...] = ()
    cv_pct: float | None = None
    note: str = ""
    total_tok_s: float | None = None
    ttft_p50_ms: float | None = None
    tpot_p50_ms: float | None = None
    start_s: float | None = None

    def table_row(self) -> str:
        tok = "-" if self.output_tok_s is None else f"{self.output_tok_s:,.1f}"
        delta = "-" if self.delta_pct is None else f"{self.delta_pct:+.1f}%"
        runs = ", ".join(f"{x:.0f}" for x in self.runs_tok_s)
        kept = "yes" if self.kept else "no"
        note = f"  {self.note}" if self.note else ""
        return f"{self.step:>4}  {self.change[:44]:<44} {tok:>10} {delta:>8}  {kept:<4} [{runs}]{note}"

    def to_json(self) -> dict[str, Any]:
        return {"change": self.change, "output_tok_s": None if self.output_tok_s is None else round(self.output_tok_s, 2),
                "delta_pct": None if self.delta_pct is None else round(self.delta_pct, 2), "kept": self.kept,
                "step": self.step, "runs_tok_s": [round(x, 2) for x in self.runs_tok_s],
                "cv_pct": None if self.cv_pct is None else round(self.cv_pct, 2), "note": self.note}


TABLE_HEAD = f"{'step':>4}  {'change':<44} {'tok/s':>10} {'Δ%':>8}  kept runs (tok/s)"


@dataclass(slots=True)
class TuneReport:
    steps: list[TuneStep] = field(default_factory=list)
    noise_pct: float = 0.0
    best_profile: Profile | None = None
    best_tok_s: float | None = None
    baseline_tok_s: float | None = None
    elapsed_s: float = 0.0
    budget_s: float = 0.0
    stopped_by_budget: bool = False
    workload: Workload | None = None
    shape: str | None = None
    model: str = ""
    engine: str = ""
    hardware: dict[str, Any] = field(default_factory=dict)

    @property
    def improved(self) -> bool:
        """Whether a change was kept (``best_profile`` is then that change, not the baseline)."""
        return any(s.kept and s.step > 0 for s in self.steps)

    def tuned_profile(self, name: str, *, platform: str, baseline: str, when: str,
                      change: str | None = None) -> Profile | None:
        """What was kept as a profile to run (None when nothing was): the best's whole flags
        with no parent, so a preset that changes later does not move what was measured; for the
        platform it was measured on; its description says what it gained, where and ``when``.
        ``change``: what the best is (default: the kept steps, stacked as one after another
        keeps them). Its sizing placeholders stay, so the engine is sized where it starts."""
        best = self.best_profile
        if best is None or not self.improved:
            return None
        what = change or " + ".join(s.change for s in self.steps if s.kept and s.step > 0)
        gain = (f"{100 * (self.best_tok_s / self.baseline_tok_s - 1):+.0f}% output tok/s over '{baseline}'"
                if self.best_tok_s and self.baseline_tok_s else f"kept over '{baseline}'")
        where = hardware_key(self.hardware) if self.hardware else platform
        shape = f", shape '{self.shape}'" if self.shape else ""
        return replace(best, name=name, parent=None, platforms=frozenset({platform}), platform_args=(),
                       description=f"tuned {when} on {where}{shape}: {what}, {gain}")

    def table(self) -> list[str]:
        lines = [TABLE_HEAD, "-" * len(TABLE_HEAD)]
        lines += [s.table_row() for s in self.steps]
        gain = ""
        if self.baseline_tok_s and self.best_tok_s:
            gain = f"; best {self.best_tok_s:,.1f} tok/s = {100 * (self.best_tok_s / self.baseline_tok_s - 1):+.1f}% over the baseline"
        lines.append(f"noise {self.noise_pct:.1f}% (a change is kept above {2 * self.noise_pct:.1f}%){gain}")
        return lines

    def to_json(self) -> dict[str, Any]:
        best_args: list[str] = list(self.best_profile.args) if self.best_profile else []
        measured = [s for s in self.steps if s.output_tok_s is not None]
        return {
            "steps": [s.to_json() for s in measured], "noise_pct": round(self.noise_pct, 2),
            "not_run": [{"step": s.step, "change": s.change, "note": s.note} for s in self.steps
                        if s.output_tok_s is None],
            "baseline_tok_s": self.baseline_tok_s and round(self.baseline_tok_s, 2),
            "best_tok_s": self.best_tok_s and round(self.best_tok_s, 2),
            "best_profile": self.best_profile.name if self.best_profile else None, "best_args": best_args,
            "best_env": dict(self.best_profile.env) if self.best_profile else {},
            "elapsed_s": round(self.elapsed_s, 1), "budget_s": self.budget_s,
            "stopped_by_budget": self.stopped_by_budget, "shape": self.shape,
            "workload": self.workload.describe() if self.workload else None, "model": self.model,
            "engine": self.engine, "hardware": self.hardware,
        }


@dataclass(frozen=True, slots=True)
class SavedTune:
    """A tune's kept change saved as the user's profile (:func:`save_tuned`)."""

    profile: Profile
    path: Path
    replaced: bool
    """A profile of that name was there before (a later tune replaces it)."""


def save_tuned(store: TuningStore, report: TuneReport, *, baseline: str, platform: str, name: str | None = None,
               change: str | None = None) -> SavedTune | None:
    """What ``report`` kept, saved as the user's profile ``name`` (default ``tuned-<baseline>``),
    dated today (:meth:`TuneReport.tuned_profile`); None when nothing was kept. Blocking (the
    profiles' files): the window's Tune job and ``workstation tune`` both save through here."""
    name = name or f"tuned-{baseline}"
    profile = report.tuned_profile(name, platform=platform, baseline=baseline, when=time.strftime("%Y-%m-%d"),
                                   change=change)
    if profile is None:
        return None
    replaced = name in store.user_profiles()
    return SavedTune(profile, store.save_profile(profile), replaced)


@dataclass(slots=True)
class _Measured:
    runs: list[float]
    results: list[BenchResult]
    start_s: float

    @property
    def mean(self) -> float:
        return statistics.fmean(self.runs)

    def summary(self) -> RunsSummary:
        return RunsSummary.of(self.mean, self.results)


class Autotuner:
    """Runs the loop; ``step_done(TuneStep)`` after each step, ``progress(str)`` for words."""

    step_done = Signal(object)
    progress = Signal(str)

    def __init__(
        self,
        settings: Settings,
        engine: EngineInstall,
        model: ModelSpec,
        http: httpx.AsyncClient,
        baseline: Profile,
        workload: Workload,
        *,
        shape: TrafficShape | None,
        traits: ModelTraits,
        help_flags: set[str] | None,
        candidates: Sequence[Candidate],
        budget_s: float,
        repeats: int = MIN_REPEATS,
        store: TuningStore | None = None,
        slo: Slo | None = None,
        log_dir: Path,
        env: dict[str, str] | None = None,
        measure: Callable[[Profile], Any] | None = None,
        ttft_guard_pct: float = TTFT_GUARD_PCT,
    ) -> None:
        self.settings = settings
        self.ttft_guard_pct = ttft_guard_pct
        self.engine = engine
        self.model = model
        self.http = http
        # trials are the baseline's flags plus one change: fold its platform's changes in first,
        # or a change to a flag the platform sets (--max-num-seqs on CUDA) would be undone
        self.baseline = flatten(baseline, {baseline.name: baseline}, platform=engine.platform) \
            if baseline.platform_args else baseline
        self.workload = workload
        self.shape = shape
        self.traits = traits
        self.help_flags = help_flags
        self.candidates = list(candidates)
        self.budget_s = budget_s
        self.repeats = max(MIN_REPEATS, repeats)
        self.store = store
        self.slo = slo
        self.log_dir = log_dir
        self.env = dict(env or {})
        self._measure_override = measure
        self._groups: list[list[float]] = []
        self._eager_start_s: float | None = None

    # ----- one measurement -----
    async def _measure(self, profile: Profile) -> _Measured:
        if self._measure_override is not None:
            return await self._measure_override(profile)
        t0 = time.monotonic()
        context = BenchContext(profile=profile, engine=self.engine, model=self.model, hardware=describe_hardware())
        runs: list[float] = []
        results: list[BenchResult] = []
        async with managed_engines(self.settings, self.engine, self.model, profile,
                                   log_dir=self.log_dir / profile.name, env=self.env,
                                   say=lambda m: self.progress.emit(f"  {m}"),
                                   sessions=max(self.settings.fleet.max_generating, self.workload.concurrency),
                                   sequences_per_session=sequences_per_stream(self.workload, self.shape)) as launchers:
            start_s = time.monotonic() - t0
            endpoints = [launcher.endpoint for launcher in launchers]
            for i in range(self.repeats):
                # the first window also warms up (caches, compiled kernels); later ones run straight on
                w = replace(self.workload, seed=self.workload.seed + i,
                            warmup_s=self.workload.warmup_s if i == 0 else 1.0)
                result = await run_workload(self.http, endpoints, w, context, shape=self.shape,
                                            slo=self.slo, store=self.store)
                runs.append(result.output_tok_s)
                results.append(result)
                self.progress.emit(f"  run {i + 1}/{self.repeats}: {result.output_tok_s:,.1f} output tok/s")
        return _Measured(runs, results, start_s)

    def _estimate_s(self, candidate: Candidate | None) -> float:
        start = self._eager_start_s or 60.0
        if candidate is not None and candidate.slow_start:
            start *= 2.5
        w = self.workload
        return start + w.warmup_s + self.repeats * (w.duration_s + 1.5) + 5.0

    def _checked(self, profile: Profile) -> str | None:
        """Why this profile cannot run here (None: it can)."""
        args, env = effective(profile, {profile.name: profile}, platform=self.engine.platform,
                              values=STAND_IN_VALUES)
        problems = [f.message for f in check_profile(
            args, env, platform=self.engine.platform, engine_version=self.engine.version,
            help_flags=self.help_flags, traits=self.traits, profile_platforms=profile.platforms,
            profile_name=profile.name, max_model_len=self.model.max_model_len,
        ) if f.severity.value == "error"]
        return "; ".join(problems) or None

    # ----- the loop -----
    async def run(self) -> TuneReport:
        t0 = time.monotonic()
        deadline = t0 + self.budget_s
        report = TuneReport(budget_s=self.budget_s, workload=self.workload, shape=self.shape.name if self.shape else None,
                            model=self.model.served_name, engine=f"vLLM {self.engine.version} ({self.engine.platform})",
                            hardware=describe_hardware())
        best = self.baseline
        self.progress.emit(f"step 0: baseline '{best.name}' ({describe_change(list(best.args), dict(best.env))})")
        try:
            measured = await asyncio.wait_for(self._measure(best), timeout=max(1.0, deadline - time.monotonic()))
        except asyncio.TimeoutError:
            report.stopped_by_budget = True
            report.steps.append(TuneStep(0, "baseline", None, None, False, note="the budget ended during the baseline"))
            report.elapsed_s = time.monotonic() - t0
            return report
        self._eager_start_s = measured.start_s
        self._groups.append(measured.runs)
        best_tok_s, best_runs = measured.mean, measured.summary()
        report.baseline_tok_s = best_tok_s
        base_step = self._step(0, f"baseline ({best.name})", measured, 0.0, True)
        report.steps.append(base_step)
        self.step_done.emit(base_step)
        for index, cand in enumerate(self.candidates, start=1):
            left = deadline - time.monotonic()
            if self._estimate_s(cand) > left:
                step = TuneStep(index, cand.change, None, None, False,
                                note=f"skipped: needs ~{self._estimate_s(cand):.0f} s, {max(0.0, left):.0f} s left")
                report.steps.append(step)
                report.stopped_by_budget = True
                self.step_done.emit(step)
                continue
            trial = cand.applied_to(best, f"{best.name}+{safe_name(cand.change)}"[:64])
            problem = self._checked(trial)
            if problem:
                step = TuneStep(index, cand.change, None, None, False, note=f"not applicable: {problem}")
                report.steps.append(step)
                self.step_done.emit(step)
                continue
            self.progress.emit(f"step {index}: {cand.change}")
            try:
                measured = await asyncio.wait_for(self._measure(trial), timeout=max(1.0, deadline - time.monotonic()))
            except asyncio.TimeoutError:
                step = TuneStep(index, cand.change, None, None, False, note="stopped at the time budget")
                report.steps.append(step)
                report.stopped_by_budget = True
                self.step_done.emit(step)
                break
            except Exception as exc:  # noqa: BLE001 - a change that breaks the engine is a result, not a crash
                step = TuneStep(index, cand.change, None, None, False, note=f"failed: {str(exc).splitlines()[0][:160]}")
                report.steps.append(step)
                self.step_done.emit(step)
                continue
            self._groups.append(measured.runs)
            noise = pooled_noise_pct(self._groups)
            delta, kept, note = verdict(best_runs, measured.summary(), noise, ttft_guard_pct=self.ttft_guard_pct)
            step = self._step(index, cand.change, measured, delta, kept, note)
            report.steps.append(step)
            self.step_done.emit(step)
            if kept:
                best, best_tok_s = replace(trial, name=f"tuned-{self.baseline.name}"), measured.mean
                best_runs = measured.summary()
        report.noise_pct = pooled_noise_pct(self._groups)
        report.best_profile = best
        report.best_tok_s = best_tok_s
        report.elapsed_s = time.monotonic() - t0
        return report

    def _step(self, index: int, change: str, m: _Measured, delta: float, kept: bool, note: str = "") -> TuneStep:
        last = m.results[-1] if m.results else None
        mean_total = statistics.fmean(r.total_tok_s for r in m.results) if m.results else None
        return TuneStep(
            step=index, change=change, output_tok_s=m.mean, delta_pct=delta, kept=kept, runs_tok_s=tuple(m.runs),
            cv_pct=cv_pct(m.runs), total_tok_s=mean_total,
            ttft_p50_ms=last.ttft.p50_ms if last else None, tpot_p50_ms=last.tpot.p50_ms if last else None,
            start_s=m.start_s, note=note,
        )
