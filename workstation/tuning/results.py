"""Benchmark results as data: what ran, where, and what it measured — comparable across runs.

A :class:`BenchResult` carries the workload, the profile (its effective flags), the engine
version, the model and the hardware next to the numbers, so two results can be compared
in a table (:func:`comparison_table`) and a chart without guessing what differed.
"""

from __future__ import annotations

import os
import platform as _platform
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

import psutil

from workstation.core.traffic import percentile
from workstation.engine.cpu_dtype import cpuinfo_field

RESULT_VERSION = 1


@dataclass(frozen=True, slots=True)
class LatencyStats:
    """Milliseconds."""

    p50_ms: float | None = None
    p99_ms: float | None = None
    mean_ms: float | None = None
    p95_ms: float | None = None
    """The tuner's latency guard reads this one (p99 of a 10-second window is a handful of requests)."""

    @classmethod
    def of_seconds(cls, values: Iterable[float]) -> LatencyStats:
        data = sorted(v * 1000.0 for v in values)
        if not data:
            return cls()
        return cls(percentile(data, 50), percentile(data, 99), sum(data) / len(data), percentile(data, 95))

    def short(self) -> str:
        if self.p50_ms is None:
            return "n/a"
        return f"{self.p50_ms:.0f}/{self.p99_ms:.0f}"


@dataclass(frozen=True, slots=True)
class Slo:
    """A latency objective per request; goodput counts requests that meet every part of it."""

    ttft_ms: float | None = 2000.0
    tpot_ms: float | None = 200.0

    def met(self, ttft_s: float | None, tpot_s: float | None) -> bool:
        if self.ttft_ms is not None and (ttft_s is None or ttft_s * 1000 > self.ttft_ms):
            return False
        return not (self.tpot_ms is not None and tpot_s is not None and tpot_s * 1000 > self.tpot_ms)

    def describe(self) -> str:
        parts = []
        if self.ttft_ms is not None:
            parts.append(f"TTFT <= {self.ttft_ms:.0f} ms")
        if self.tpot_ms is not None:
            parts.append(f"TPOT <= {self.tpot_ms:.0f} ms")
        return " and ".join(parts) or "none"


@dataclass(frozen=True, slots=True)
class Workload:
    """What the benchmark sent. ``kind``: ``synthetic`` or ``replay`` (of a captured shape)."""

    kind: str
    concurrency: int
    input_len: int | None = None
    output_len: int | None = None
    request_rate_per_s: float | None = None
    """None: closed loop (each stream sends its next request at once)."""
    shared_prefix_len: int = 0
    shape: str | None = None
    duration_s: float = 30.0
    warmup_s: float = 0.0
    max_requests: int | None = None
    seed: int = 0
    content: str = "random"
    """What the prompts' fresh tokens are: ``random`` ids or ``code`` (windows of real source
    code); see :mod:`workstation.tuning.workload`."""
    constrained: bool = True
    """Replay: send a structured-outputs constraint on the requests that carried one when
    captured (a guided agent's are all held to a regex). Synthetic workloads send none,
    unless ``guided_choices`` says so."""
    guided_choices: int = 0
    """Synthetic: 0 (the default, and what results stored before it load with) sends plain
    requests of the lengths above. 1 or more sends what the guided protocol sends instead
    (:func:`~workstation.tuning.workload.guided_session`): every request held to a regex, a
    function's drafts drawn ``guided_choices`` at a time (``n``); ``input_len`` is then a
    session's own view (task and file read), ``output_len`` each draft's length."""

    def describe(self) -> str:
        rate = "closed loop" if self.request_rate_per_s is None else f"{self.request_rate_per_s:g} req/s"
        if self.content != "random":
            rate += f", {self.content} text"
        if self.kind == "replay" and not self.constrained:
            rate += ", no constraints"
        if self.kind == "replay":
            return f"replay of '{self.shape}' x {self.concurrency} streams, {rate}, {self.duration_s:.0f} s"
        prefix = f" (+{self.shared_prefix_len} shared)" if self.shared_prefix_len else ""
        if self.guided_choices:
            return (f"guided agent turns of {self.input_len}{prefix} tokens, {self.output_len} per draft x "
                    f"{self.concurrency} streams, {rate}, {self.duration_s:.0f} s, guided: regex, "
                    f"n={self.guided_choices} draws")
        return (f"{self.input_len}{prefix}/{self.output_len} x {self.concurrency} streams, {rate}, "
                f"{self.duration_s:.0f} s")


def describe_hardware(gpus: Sequence[Mapping[str, Any]] | None = None) -> dict[str, Any]:
    """CPU model, cores, memory and GPUs (names, from NVML where there is one)."""
    cpu_model = cpuinfo_field("model name") or _platform.processor() or ""
    if gpus is None:
        from workstation.tuning.placement import gpu_inventory

        gpus = [{"name": g.name} for g in gpu_inventory()]
    return {
        "cpu": cpu_model or _platform.machine(),
        "cpu_count": os.cpu_count() or 0,
        "memory_gib": round(psutil.virtual_memory().total / (1 << 30), 1),
        "gpus": [str(g.get("name")) for g in gpus],
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "host": _platform.node(),
    }


def hardware_key(hw: Mapping[str, Any]) -> str:
    gpus = hw.get("gpus") or []
    if gpus:
        return f"{len(gpus)}x {gpus[0]}"
    return f"{hw.get('cpu', '?')} ({hw.get('cpu_count', '?')} cores)"


@dataclass(frozen=True, slots=True)
class BenchResult:
    tool: str
    """``loadgen`` (the app's own httpx generator) or ``vllm-bench-serve``."""
    workload: Workload
    profile: str
    profile_args: tuple[str, ...]
    profile_env: tuple[tuple[str, str], ...]
    engine_version: str
    platform: str
    model: str
    hardware: Mapping[str, Any]
    duration_s: float
    """Length of the measurement window."""
    completed: int
    failed: int
    cut: int
    """Requests still running when the time bound ended the window (their tokens count)."""
    output_tokens: int
    prompt_tokens: int
    output_tok_s: float
    total_tok_s: float
    requests_per_s: float
    ttft: LatencyStats
    tpot: LatencyStats
    itl: LatencyStats
    e2e: LatencyStats
    slo: Slo
    goodput_req_s: float | None
    goodput_pct: float | None
    prefix_cache_hit_rate: float | None = None
    preemptions: float | None = None
    spec_acceptance_rate: float | None = None
    endpoint: str = ""
    created_s: float = field(default_factory=time.time)
    ended_early: int = 0
    """Completed requests with fewer tokens than asked for. The load generator asks with
    ``ignore_eos``, so only the engine ends one early: a change that breaks decoding (a
    grammar rejecting draft tokens, vLLM issue #49694) shows here, not as a faster run."""
    notes: tuple[str, ...] = ()
    result_id: str = ""

    @property
    def hardware_key(self) -> str:
        return hardware_key(self.hardware)

    def headline(self) -> str:
        return (f"{self.output_tok_s:,.1f} output tok/s, {self.total_tok_s:,.1f} total tok/s, "
                f"TTFT p50/p99 {self.ttft.short()} ms, TPOT {self.tpot.short()} ms, ITL {self.itl.short()} ms, "
                f"goodput {self._goodput()} ({self.slo.describe()}); {self.completed} done, "
                f"{self.failed} failed, {self.cut} cut at the time bound")

    def _goodput(self) -> str:
        if self.goodput_req_s is None:
            return "n/a"
        pct = f" = {self.goodput_pct:.0f}%" if self.goodput_pct is not None else ""
        return f"{self.goodput_req_s:.2f} req/s{pct}"

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["version"] = RESULT_VERSION
        out["profile_args"] = list(self.profile_args)
        out["profile_env"] = dict(self.profile_env)
        out["hardware"] = dict(self.hardware)
        out["notes"] = list(self.notes)
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> BenchResult:
        if int(d.get("version", 0)) > RESULT_VERSION:
            raise ValueError("this result was written by a newer workstation")
        names = {f.name for f in fields(cls)}
        kw = {k: v for k, v in d.items() if k in names}
        kw["workload"] = Workload(**{k: v for k, v in d["workload"].items()
                                     if k in {f.name for f in fields(Workload)}})
        for key in ("ttft", "tpot", "itl", "e2e"):
            kw[key] = LatencyStats(**d[key])
        kw["slo"] = Slo(**d["slo"])
        kw["profile_args"] = tuple(d.get("profile_args", ()))
        kw["profile_env"] = tuple(sorted(dict(d.get("profile_env", {})).items()))
        kw["notes"] = tuple(d.get("notes", ()))
        return cls(**kw)


def comparison_table(results: Sequence[BenchResult], *, baseline: BenchResult | None = None) -> list[str]:
    """A plain-text table: one row per result, Δ% of output tok/s against the baseline (the
    first result by default). Rows on a different workload, model or hardware are marked."""
    if not results:
        return ["no results"]
    base = baseline or results[0]
    head = f"{'profile':<22} {'out tok/s':>10} {'Δ%':>7} {'total tok/s':>11} {'TTFT p50/p99':>13} " \
           f"{'TPOT p50/p99':>13} {'goodput':>8}  engine / model / hardware"
    lines = [head, "-" * len(head)]
    for r in results:
        delta = 100.0 * (r.output_tok_s - base.output_tok_s) / base.output_tok_s if base.output_tok_s else 0.0
        comparable = (_same_load(r.workload, base.workload) and r.model == base.model
                      and r.hardware_key == base.hardware_key)
        good = "n/a" if r.goodput_pct is None else f"{r.goodput_pct:.0f}%"
        mark = "" if comparable else "  (different workload/model/hardware)"
        lines.append(
            f"{r.profile[:22]:<22} {r.output_tok_s:>10.1f} {delta:>+7.1f} {r.total_tok_s:>11.1f} "
            f"{r.ttft.short():>13} {r.tpot.short():>13} {good:>8}  {r.engine_version} / {r.model} / "
            f"{r.hardware_key}{mark}"
        )
    return lines


def _same_load(a: Workload, b: Workload) -> bool:
    """Same workload up to its random seed and warm-up (repeats differ only in those)."""
    return replace(a, seed=0, warmup_s=0.0) == replace(b, seed=0, warmup_s=0.0)
