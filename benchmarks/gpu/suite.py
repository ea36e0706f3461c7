"""The GPU suite: the app's own code paths on a real GPU, one JSON file of results.

    benchmarks/gpu/remote.sh suite --part bench --out DIR     # engine_bench x2, meters, fleet
    benchmarks/gpu/remote.sh suite --part tune --out DIR      # the tuner, side by side
    python benchmarks/gpu/suite.py --part bench --dry-run     # here, on the CPU engine (a rehearsal)

Parts (each fits one device call of at most ten minutes; ``--budget-s`` bounds it):

- ``bench``: ``engine_bench`` streams (1 and 16 at a time, seven repeats, medians) for
  ``vllm-defaults`` and the app's ``default`` (``--batch-engine``: also ``default`` with vLLM's
  own batch of 1,024 sequences), each on an engine the app's launcher starts alone on the GPU, every run watched by
  a probe (GPU clock, each engine process's CPU per token, the cores it ran on); on the
  ``default`` engine also ``nvml_vs_smi`` with the engine under load as the GPU's user (its
  processes attributed through the process tree), ``meter_vs_bench`` (the app's throughput
  meter against ``vllm bench serve``), and ``fleet_run`` with 32 real agent sessions whose
  traffic shape is captured for the tuner.
- ``tune``: the screening tuner (``workstation/tuning/screening.py``) from the ``default``
  profile, ``vllm-defaults`` measured alongside, on the captured agent shape (replayed with
  code text) and on Cline's report's 512/512 x 256 (``--workloads``), each run probed; then
  each shape's kept changes confirmed together while the budget allows, and real fleets on
  the round's speculating engines for their drafts' acceptance on what agents write, and on
  its trials of several engines for a real fleet's tok/s there.
- ``confirm``: that confirmation alone, for a ``tune`` that ran out of time for it.

Results accumulate in ``<data dir>/gpu-results.json`` (the machine keeps it between calls) and
are copied to ``--out`` with the engines' log tails. ``--dry-run`` shrinks every size so the
whole path runs on the CPU engine here in a few minutes (no NVML part there).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # measures and run_probe beside this file

from measures import (  # noqa: E402
    GIB,
    _load,
    _nvml_reader,
    fleet_and_capture,
    fleets_on_trials,
    launcher_facts,
    machine_facts,
    nvml_under_engine,
    safe,
    say,
    stream_figures,
)

from workstation.config import load_settings  # noqa: E402
from workstation.core.profiles import PRESETS, effective, flatten  # noqa: E402
from workstation.engine.environment import require_engine  # noqa: E402
from workstation.engine.gpu_memory import read_gpu_memory  # noqa: E402
from workstation.engine.http import make_http_client  # noqa: E402
from workstation.engine.host import Launchers  # noqa: E402
from workstation.engine.models import resolve_model  # noqa: E402
from workstation.services import Services  # noqa: E402

CLINE = {"input_len": 512, "output_len": 512, "concurrency": 256}
PROBE_ENGINE = "default (max-num-seqs 1024)"


class Results:
    """The one JSON file, merged part by part."""

    def __init__(self, path: Path, mirror: Path | None = None) -> None:
        self.path = path
        self.mirror = mirror
        """A copy kept current in the device call's $OUT: a call stopped at its time limit still
        brings back every figure measured before."""
        self.data: dict[str, Any] = json.loads(path.read_text()) if path.is_file() else {}

    def put(self, key: str, value: Any) -> None:
        self.data[key] = value
        self.save()

    def save(self) -> None:
        for target in filter(None, (self.path, self.mirror)):
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = target.with_suffix(".tmp")
            tmp.write_text(json.dumps(self.data, indent=1, default=str) + "\n")
            os.replace(tmp, target)


# --------------------------------------------------------------------------- parts
async def part_bench(args: argparse.Namespace, results: Results, deadline: float) -> None:
    from workstation.tuning.store import TuningStore

    settings = load_settings()
    engine = require_engine(settings)
    model = resolve_model(settings, args.model)
    results.data.update(machine_facts(engine.version))
    results.save()
    store = TuningStore(settings.data_dir)
    mvb = _load("meter_vs_bench")
    from workstation.tuning.loadgen import agent_sequences_per_request

    per_session = agent_sequences_per_request(settings, model)
    # 1-stream runs of 256 tokens last 0.6 s on an H200: the first run's repeats spread 416-542
    # tok/s for one profile; 512 tokens and seven repeats
    tokens, repeats = (512, 7) if not args.dry_run else (32, 3)
    bench: dict[str, Any] = results.data.get("engine_bench", {})
    async with make_http_client() as http:
        # vllm-defaults first: in both H200 runs of 2026-12-01 `default` ran first on a fresh
        # machine and measured 80-91 % of vllm-defaults at 1 stream, with flags that differ at
        # batch 1 only in --max-num-seqs; the third engine (`default` with vllm's 1,024) tells
        # the order from that flag
        engines = [("vllm-defaults", "vllm-defaults", None), ("default", "default", None)]
        if args.only_fleet:
            engines = [("default", "default", None)]
        if args.batch_engine and not args.only_fleet:
            engines.append((PROBE_ENGINE, "default", ["--max-num-seqs", "1024"]))
        for name, profile, extra in engines:
            if name == PROBE_ENGINE and deadline - time.monotonic() < 200:
                say(f"no time left for '{name}'")
                continue
            # sized as the app sizes its own engine: for the guided agents' n=6 draws
            launcher = Launchers(settings, engine, model, sequences_per_session=per_session)(
                profile, log_dir=settings.logs_dir / f"gpu-{safe(name)}", **({"extra_args": extra} if extra else {}))
            say(f"starting the engine '{name}'")
            try:
                await launcher.start(lambda m: say(f"  {m}"))
                if args.only_fleet:
                    await fleet_part(args, results, http, launcher, store, deadline)
                    continue
                figures = {**(await stream_figures(http, {name: launcher}, tokens=tokens, repeats=repeats))[name],
                           **launcher_facts(launcher)}
                bench[name] = figures
                results.put("engine_bench", bench)
                say(f"  {name}: 1 stream {figures['stream1_tok_s']} tok/s, 16 streams {figures['stream16_tok_s']} tok/s")
                if name != "default":
                    continue
                if not args.dry_run:
                    say("nvml_vs_smi with the engine as the GPU's user")
                    results.put("nvml_vs_smi", await nvml_under_engine(http, launcher, 12.0))
                say("meter_vs_bench (the app's meter against vllm bench serve)")
                ns = argparse.Namespace(
                    base_url=launcher.endpoint.base_url, api_key=launcher.endpoint.api_key, model=model.served_name,
                    engine_python=str(engine.python), tokenizer=str(model.local_dir),
                    num_prompts=512 if not args.dry_run else 16, concurrency=64 if not args.dry_run else 4,
                    input_len=256 if not args.dry_run else 64, output_len=256 if not args.dry_run else 32,
                    interval=1.0, seed=0, timeout_s=240.0)
                results.put("meter_vs_bench", await mvb.run(ns, launcher.endpoint, str(engine.python), str(model.local_dir)))
                say(f"  meter vs bench: rel_error {results.data['meter_vs_bench'].get('rel_error')}")
                await fleet_part(args, results, http, launcher, store, deadline)
            finally:
                await launcher.stop()
        if args.only_fleet:
            return
        v = bench.get("vllm-defaults")
        for name, key in (("default", "default_vs_vllm_defaults"), (PROBE_ENGINE, "probe_vs_vllm_defaults")):
            d = bench.get(name)
            if d and v:
                bench[key] = {k: round(d[k] / v[k], 3) for k in ("stream1_tok_s", "stream16_tok_s")}
        results.put("engine_bench", bench)


FLEET_MIN_S = 90.0
"""The least time a fleet run is started with: on the first H200 run of 2026-12-02 the
engines' starts left the fleet a negative timeout, it was paused at once and its capture had
no finished request."""
FLEET_AFTER_S = 45.0
"""What the part keeps after the fleet: stopping the engine, the shape, the results. On
2026-12-04 that took 5 s (the fleet settled at 01:11:35, the call ended 01:11:40); the 150 s
kept before left a bench part of 480 s no time for its fleet."""


async def fleet_part(args: argparse.Namespace, results: Results, http, launcher, store,  # type: ignore[no-untyped-def]
                     deadline: float) -> None:
    """``fleet_run`` with 32 real agent sessions on the ``default`` engine, its traffic captured
    as the tuner's agent shape; skipped (and said) where the part's budget leaves too little."""
    fleet_s = min(240.0, deadline - time.monotonic() - FLEET_AFTER_S)
    if fleet_s < FLEET_MIN_S:
        say(f"fleet_run skipped: {fleet_s:.0f} s of the budget left for it, {FLEET_MIN_S:.0f} s needed "
            "(run `--part bench --only-fleet`)")
        return
    say(f"fleet_run: {args.sessions} agent sessions for at most {fleet_s:.0f} s, traffic shape captured")
    fleet = await fleet_and_capture(http, launcher.endpoint, sessions=args.sessions,
                                    max_steps=args.max_steps, timeout_s=fleet_s, store=store)
    results.put("fleet_run", fleet)
    say(f"  fleet: {fleet['generated_tok_s']} tok/s, prefix hits {fleet['prefix_hit_rate']}, "
        f"tool calls mean {fleet['tool_calls_mean']}, states {fleet['states']}")
    if fleet.get("why_not_done"):
        say(f"  not done: {fleet['why_not_done']}")
    if fleet.get("shape") is None:
        say(f"  no traffic shape: {fleet.get('shape_error')}")


@dataclass(frozen=True)
class TuneSetup:
    """What both tuning parts need: the engine, the model, the baseline and reference, the
    candidates (or none), the side-by-side share, and the workloads (result key, name,
    workload, shape)."""

    settings: Any
    engine: Any
    model: Any
    store: Any
    baseline: Any
    reference: Any
    traits: Any
    help_flags: set[str] | None
    candidates: list[Any]
    side: Any
    gpus: list[Any]
    workloads: tuple[tuple[str, str, Any, Any], ...]
    logs: Path
    repeats: int
    agent_check: bool = False


def best_changes(previous: dict[str, Any], key: str = "tune") -> list[str]:
    """What a second round on the same machine re-measures (``--changes @best``): the kept
    changes of the agent round already in the results, or its best-measured change when none
    was kept."""
    saved = previous.get(key) or {}
    kept = [k["change"] for k in saved.get("kept_changes", [])]
    if kept:
        return kept
    steps = [s for s in saved.get("steps", []) if s.get("step", 0) > 0 and s.get("output_tok_s")
             and not s["change"].startswith("combined")]
    if not steps:
        raise SystemExit(f"--changes @best: no round under '{key}' in the results yet")
    return [max(steps, key=lambda s: s["output_tok_s"])["change"]]


def tune_setup(args: argparse.Namespace, *, candidates: bool, previous: dict[str, Any] | None = None) -> TuneSetup:
    """The :class:`TuneSetup` the arguments ask for (``previous``: the results so far)."""
    from workstation.engine.environment import engine_help_text
    from workstation.engine.flags import known_flags
    from workstation.tuning.autotune import candidates_for
    from workstation.tuning.checks import agents_constrain_output, model_traits
    from workstation.tuning.loadgen import workload_from_shape
    from workstation.tuning.results import Workload
    from workstation.tuning.screening import SideBySide
    from workstation.tuning.store import TuningStore

    settings = load_settings()
    engine = require_engine(settings)
    model = resolve_model(settings, args.model)
    store = TuningStore(settings.data_dir)
    shape_name = args.shape or "gpu-fleet-32"
    shape = store.load_shape(shape_name)
    baseline = flatten(PRESETS["default"], PRESETS, platform=engine.platform)
    reference = flatten(PRESETS["vllm-defaults"], PRESETS, platform=engine.platform)
    traits = model_traits(model.served_name, model.config_json,
                          structured_outputs=agents_constrain_output(settings, model))
    help_flags = known_flags(engine_help_text(engine, settings.cache_dir))
    base_args, _ = effective(baseline, {}, platform=engine.platform)
    offered = candidates_for(engine.platform, traits, concurrency=32, base_args=base_args)
    if args.dry_run and engine.platform == "cpu":
        # the rehearsal exercises the GPU's engines-side-by-side path on the CPU engine too
        offered += [c for c in candidates_for("cuda", traits, concurrency=32, base_args=base_args) if c.engines]
    if args.changes:
        wanted = (best_changes(previous or {}) if args.changes == "@best"
                  else [c.strip() for c in args.changes.split(";") if c.strip()])
        by_label = {c.change: c for c in offered}
        unknown = [w for w in wanted if w not in by_label]
        if unknown:
            raise SystemExit(f"--changes: no such candidate {unknown}; the candidates are: "
                             + "; ".join(by_label))
        offered = [by_label[w] for w in wanted]
    cands = offered[: args.candidates] if candidates else []
    gpus = read_gpu_memory()
    engines = 2 + max(sum(c.engines or 1 for c in cands), 2)
    if gpus:
        side = SideBySide.for_round(engines, gpus[0], int(args.kv_gib * GIB))
    else:  # the CPU rehearsal: small engines side by side
        side = SideBySide(kv_cache_bytes=int(args.kv_gib * GIB), gpu_memory_utilization=0.1)
    agent = workload_from_shape(shape, concurrency=32 if not args.dry_run else 4,
                                duration_s=args.window_s, warmup_s=4.0)
    cline = Workload(kind="synthetic", concurrency=CLINE["concurrency"] if not args.dry_run else 8,
                     input_len=CLINE["input_len"] if not args.dry_run else 64,
                     output_len=CLINE["output_len"] if not args.dry_run else 32,
                     duration_s=args.window_s + 2, warmup_s=6.0)
    tune_settings = settings
    if engine.platform == "cpu":
        from workstation.tuning.bench import tuning_settings

        tune_settings = tuning_settings(settings, kv_cache_gib=args.kv_gib)
    sfx = args.suffix
    workloads = tuple(w for w in (("agent", f"tune{sfx}", f"captured agent shape '{shape_name}'", agent, shape),
                                  ("cline", f"tune_cline{sfx}", "Cline's 512/512 x 256", cline, None))
                      if w[0] in args.workloads.split(","))
    workloads = tuple(w[1:] for w in workloads)
    return TuneSetup(tune_settings, engine, model, store, baseline, reference, traits, help_flags, cands, side, gpus,
                     workloads, settings.logs_dir, args.repeats, agent_check=args.agent_check and not args.dry_run)


def make_tuner(services, setup: TuneSetup):  # type: ignore[no-untyped-def]
    from workstation.tuning.bench import sequences_per_stream

    su = setup
    tuner = services.screening_tuner(su.settings, su.engine, su.model, su.baseline, traits=su.traits,
                                     help_flags=su.help_flags, candidates=su.candidates, side=su.side,
                                     references=[su.reference], store=su.store, log_dir=su.logs / "gpu-tune",
                                     gpu_memory=lambda: su.gpus,
                                     sessions=max(32, max((w.concurrency for _k, _n, w, _s in su.workloads), default=32)),
                                     sequences_per_session=max((sequences_per_stream(w, s) for _k, _n, w, s in su.workloads),
                                                               default=1),
                                     repeats=su.repeats, agent_check=su.agent_check)
    tuner.progress.connect(say)
    from run_probe import RunProbe

    reader = _nvml_reader()
    tuner.run_probe = lambda launchers: RunProbe([launcher.pid for launcher in launchers], reader=reader)
    return tuner


async def part_tune(args: argparse.Namespace, results: Results, deadline: float) -> None:
    setup = await asyncio.to_thread(tune_setup, args, candidates=True, previous=results.data)
    cands, side, workloads = setup.candidates, setup.side, setup.workloads
    async with Services(setup.settings) as services:
        tuner = make_tuner(services, setup)
        say(f"candidates: {', '.join(c.change for c in cands)}")
        t0 = time.monotonic()
        try:
            try:
                await tuner.start()
            finally:
                results.put(f"tune_engines{args.suffix}", {
                    "count": len(tuner.trials), "start_wall_s": round(time.monotonic() - t0, 1),
                    "side_by_side": {"kv_cache_gib": args.kv_gib, "gpu_memory_utilization": side.gpu_memory_utilization},
                    "starts": {t.label: t.start_s for t in tuner.trials},
                    "errors": {t.label: t.error for t in tuner.trials if t.error}})
            if args.paired:
                await paired_bench(args, results, tuner)
            screenings = []
            for key, name, workload, wshape in workloads:
                if time.monotonic() + _round_s(tuner, workload) > deadline:
                    say(f"no time left for {name}")
                    continue
                screening = await tuner.screen(name, workload, wshape)
                screenings.append((key, screening))
                results.put(key, tune_json(screening, tuner))
                for line in screening.report.table():
                    say(line)
            for key, screening in screenings:
                if len(screening.kept) > 1 and time.monotonic() + 90 + _round_s(tuner, screening.workload, 3) < deadline:
                    await tuner.confirm(screening)
                    results.put(key, tune_json(screening, tuner))
            if args.fleets:
                await fleets_on_trials(args, results, tuner, services.fleet, deadline)
        finally:
            await tuner.close()


async def paired_bench(args: argparse.Namespace, results: Results, tuner) -> None:  # type: ignore[no-untyped-def]
    """engine_bench's streams on the round's baseline (the app's ``default``) and its reference
    (``vllm-defaults``), side by side and in turns: the same flags as when each runs alone
    except the memory share every engine of the round gets (the KV cache does not limit 1 or 16
    streams)."""
    base = tuner.base
    ref = next((t for t in tuner.trials if t.reference and t.launcher is not None), None)
    if base.launcher is None or ref is None:
        return
    engines = {"default": base.launcher, "vllm-defaults": ref.launcher}
    # the round's `--max-num-seqs 1024` engine, where it screens, is `default` with vLLM's batch
    batch = next((t for t in tuner.trials if t.label == "--max-num-seqs 1024" and t.launcher is not None), None)
    if batch is not None:
        engines[PROBE_ENGINE] = batch.launcher
    tokens, repeats = (512, 7) if not args.dry_run else (32, 3)
    say(f"engine_bench side by side: {', '.join(engines)} in turns")
    figures: dict[str, Any] = await stream_figures(tuner.http, engines, tokens=tokens, repeats=repeats)
    v = figures["vllm-defaults"]
    for name, key in (("default", "default_vs_vllm_defaults"), (PROBE_ENGINE, "probe_vs_vllm_defaults")):
        if name in figures:
            figures[key] = {k: round(figures[name][k] / v[k], 3) for k in ("stream1_tok_s", "stream16_tok_s")}
    figures["method"] = ("engines up at once with the round's memory share (KV cache "
                         f"{args.kv_gib:g} GiB each), runs in turns, the order turning each repeat")
    bench = results.data.get("engine_bench", {})
    bench["side_by_side"] = figures
    results.put("engine_bench", bench)
    say(f"  side by side: default/vllm-defaults 1 stream {figures['default_vs_vllm_defaults']['stream1_tok_s']}, "
        f"16 streams {figures['default_vs_vllm_defaults']['stream16_tok_s']}")


async def part_confirm(args: argparse.Namespace, results: Results, deadline: float) -> None:
    """Each shape's kept changes together, against the baseline and vllm-defaults (round 2 of a
    ``tune`` part that ran out of time for it)."""
    from workstation.tuning.autotune import Candidate, TuneReport
    from workstation.tuning.screening import Screening

    setup = await asyncio.to_thread(tune_setup, args, candidates=False)
    workloads = setup.workloads
    todo = [(key, name, w, shape) for key, name, w, shape in workloads
            if len((results.data.get(key) or {}).get("kept_changes", [])) > 1
            and (results.data[key].get("detail") or {}).get("round") == 1]
    if not todo:
        say("nothing to confirm: no shape kept two or more changes")
        return
    async with Services(setup.settings) as services:
        tuner = make_tuner(services, setup)
        try:
            await tuner.start()
            for key, name, workload, shape in todo:
                if time.monotonic() + 120 + _round_s(tuner, workload, 3) > deadline:
                    say(f"no time left to confirm {name}")
                    continue
                saved = results.data[key]
                kept = [(Candidate(k["change"], tuple(k["args"]), tuple(k["env"].items()), engines=k.get("engines")),
                         k["gain_pct"]) for k in saved["kept_changes"]]
                report = TuneReport(workload=workload, noise_pct=saved["noise_pct"],
                                    baseline_tok_s=saved["baseline"]["output_tok_s"],
                                    best_tok_s=saved["best"]["output_tok_s"])
                screening = Screening(name, workload, shape, report, [], kept, dict(saved["detail"]))
                await tuner.confirm(screening)
                confirmed = tune_json(screening, tuner)
                confirmed["steps"] = saved["steps"] + confirmed["steps"]
                results.put(key, confirmed)
                for line in screening.report.table():
                    say(line)
        finally:
            await tuner.close()


def _round_s(tuner, workload, engines: int | None = None) -> float:  # type: ignore[no-untyped-def]
    n = engines if engines is not None else sum(1 for t in tuner.trials if t.launcher is not None)
    return n * tuner.repeats * (workload.duration_s + workload.warmup_s + 2.5)


def tune_json(screening, tuner) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    report = screening.report
    out = report.to_json()
    outcome = screening.outcome
    base, best = outcome.get("baseline", {}), outcome.get("best", {})
    refs = outcome.get("references", [])
    vd = next((r for r in refs if "vllm-defaults" in r["label"]), {})
    return {
        "name": screening.name, "workload": screening.workload.describe(), "round": outcome.get("round"),
        "steps": out["steps"], "not_run": out["not_run"], "noise_pct": out["noise_pct"],
        "kept": outcome.get("kept", []),
        "kept_changes": [{"change": c.change, "args": list(c.args), "env": dict(c.env), "engines": c.engines,
                          "gain_pct": round(g, 2)} for c, g in screening.kept],
        "baseline": {"output_tok_s": base.get("output_tok_s"), "ttft_p95_ms": base.get("ttft_p95_ms"),
                     "profile": base.get("label")},
        "best": {"output_tok_s": best.get("output_tok_s"), "ttft_p95_ms": best.get("ttft_p95_ms"),
                 "profile": best.get("label"), "args": best.get("args"), "engines": best.get("engines", 1)},
        "vllm_defaults": {"output_tok_s": vd.get("output_tok_s"), "ttft_p95_ms": vd.get("ttft_p95_ms")},
        "best_vs_vllm_defaults": screening.gain_over("reference (vllm-defaults"),
        "detail": outcome,
        "repeats": tuner.repeats, "ttft_guard_pct": tuner.ttft_guard_pct,
    }


def copy_out(results: Results, out: Path | None, settings_logs: Path) -> None:
    if out is None:
        return
    out.mkdir(parents=True, exist_ok=True)
    results.save()
    # the engine's `vllm serve --help=all` as the tuner read it: the CUDA build's options, to
    # check the CUDA profiles against on a machine without that build
    from workstation.tuning.store import TuningStore

    settings = load_settings()
    for help_text in sorted(settings.cache_dir.glob("vllm-serve-help-*.txt")):
        (out / help_text.name).write_text(help_text.read_text())
    # the captured traffic shapes, whole: a later machine tunes against the same one
    # (`--shape path.json`) without re-running the fleet that captured it
    for shape in sorted(TuningStore(settings.data_dir).shapes_dir.glob("*.json")):
        (out / f"shape-{shape.name}").write_text(shape.read_text())
    tails = []
    for log in sorted(settings_logs.glob("gpu-*/**/engine.log")) + sorted(settings_logs.glob("gpu-*/engine.log")):
        lines = log.read_text(errors="replace").splitlines()[-60:]
        tails.append(f"===== {log.relative_to(settings_logs)}\n" + "\n".join(lines))
    (out / "engine-log-tails.txt").write_text("\n\n".join(tails)[-4_000_000:])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--part", choices=["bench", "tune", "confirm"], required=True)
    ap.add_argument("--out", type=Path, help="copy the results and log tails here (the device call's $OUT)")
    ap.add_argument("--budget-s", type=float, default=560.0, help="stop starting new work after this long")
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--sessions", type=int, default=32)
    # the demo's tasks take ~21 turns with SmolLM2; at 8 every session of the evening's H200 run
    # stopped at the limit (8 tool calls each) before it could finish
    ap.add_argument("--max-steps", type=int, default=24)
    ap.add_argument("--shape", help="captured shape to tune for (default: the bench part's)")
    ap.add_argument("--candidates", type=int, default=4, help="how many candidate changes (side by side)")
    ap.add_argument("--changes", help="the candidate changes to screen, by label, separated by ';' "
                                      "(default: the first --candidates the tuner offers; @best: the "
                                      "kept or best change of the agent round already measured here)")
    ap.add_argument("--kv-gib", type=float, default=8.0, help="KV cache of each side-by-side engine")
    ap.add_argument("--window-s", type=float, default=8.0, help="measurement window per run")
    ap.add_argument("--only-fleet", action="store_true",
                    help="bench: only the fleet run and its captured shape, on the default engine "
                         "(the streams and meters of an earlier call are kept)")
    ap.add_argument("--batch-engine", action="store_true",
                    help="bench: a third engine, default with vLLM's 1,024 sequences (tune: screen "
                         "'--max-num-seqs 1024' for the same, side by side)")
    ap.add_argument("--workloads", default="agent,cline", help="tune: which shapes, of agent,cline")
    ap.add_argument("--repeats", type=int, default=3, help="tune: runs per engine and shape (at least 3)")
    ap.add_argument("--suffix", default="", help="tune: appended to the result keys (a second round of a machine)")
    ap.add_argument("--no-agent-check", dest="agent_check", action="store_false",
                    help="tune: keep changes on the benchmark alone (default: 8 real agent sessions on "
                         "each kept change and the baseline must hold up; off in --dry-run)")
    ap.add_argument("--no-fleets", dest="fleets", action="store_false",
                    help="tune: skip the real fleets on the speculating and several-engine trials")
    ap.add_argument("--no-paired", dest="paired", action="store_false",
                    help="tune: skip engine_bench on the baseline and vllm-defaults side by side")
    ap.add_argument("--dry-run", action="store_true", help="a rehearsal on this machine's engine, sizes shrunk")
    args = ap.parse_args()
    if args.dry_run:
        args.sessions, args.max_steps, args.candidates = min(args.sessions, 4), min(args.max_steps, 3), min(args.candidates, 1)
        args.kv_gib, args.window_s = min(args.kv_gib, 0.5), min(args.window_s, 4.0)
    settings = load_settings()
    results = Results(settings.data_dir / "gpu-results.json", args.out / "gpu-results.json" if args.out else None)
    deadline = time.monotonic() + args.budget_s
    t0 = time.monotonic()
    part = {"bench": part_bench, "tune": part_tune, "confirm": part_confirm}[args.part]
    try:
        asyncio.run(part(args, results, deadline))
    finally:
        results.data.setdefault("timings_s", {})[args.part] = round(time.monotonic() - t0, 1)
        results.save()
        copy_out(results, args.out, settings.logs_dir)
    print(json.dumps({k: results.data.get(k) for k in ("gpu", "vllm", "timings_s")}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
