"""``workstation profiles|shape|bench|tune``: the tuning lab on the command line.

::

    workstation profiles                         # presets and yours, each as a diff against its parent
    workstation profiles check ladder-2-async    # against the installed engine, the model, the platform
    workstation profiles save fast --from default --args "--max-num-seqs 64"
    workstation shape capture --sessions 8 --duration-s 120 [--endpoint URL --api-key K --model M]
    workstation bench --start --profile default --input-len 512 --output-len 512 --concurrency 16
    workstation bench --endpoint URL --api-key K --shape fleet-8 --duration-s 30 --json
    workstation bench results                    # stored results, compared
    workstation tune --budget-s 600 --json       # ends with one JSON line: steps and noise_pct
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
import time
from dataclasses import replace
from pathlib import Path

import orjson

from workstation.core.errors import UserError


def register(subparsers: argparse._SubParsersAction) -> None:
    prof = subparsers.add_parser("profiles", help="tuning profiles: list, check, save, delete")
    pverbs = prof.add_subparsers(dest="profiles_verb", metavar="ACTION")
    prof.set_defaults(func=_profiles_list)
    pverbs.add_parser("list", help="presets and user profiles with their diffs").set_defaults(func=_profiles_list)
    chk = pverbs.add_parser("check", help="check a profile against the installed engine and the model")
    chk.add_argument("name")
    chk.add_argument("--model", help="model to check against (default: settings)")
    chk.add_argument("--json", action="store_true")
    chk.set_defaults(func=_profiles_check)
    save = pverbs.add_parser("save", help="save a user profile (TOML in the data dir)")
    save.add_argument("name")
    save.add_argument("--from", dest="parent", default="default", help="parent profile (default: default)")
    save.add_argument("--args", default="", help="flags this profile changes, as one string")
    save.add_argument("--env", action="append", default=[], metavar="NAME=VALUE")
    save.add_argument("--description", default="")
    save.set_defaults(func=_profiles_save)
    delete = pverbs.add_parser("delete", help="delete a user profile")
    delete.add_argument("name")
    delete.set_defaults(func=_profiles_delete)

    shape = subparsers.add_parser("shape", help="traffic shapes: capture from a fleet run, list, show")
    sverbs = shape.add_subparsers(dest="shape_verb", metavar="ACTION", required=True)
    cap = sverbs.add_parser("capture", help="run agent sessions headless and record their traffic shape")
    cap.add_argument("--name", help="shape name (default fleet-<sessions>-<time>)")
    cap.add_argument("--sessions", type=int, default=8)
    cap.add_argument("--duration-s", type=float, default=120.0)
    _endpoint_args(cap)
    cap.add_argument("--json", action="store_true")
    cap.set_defaults(func=_shape_capture)
    sverbs.add_parser("list", help="captured shapes").set_defaults(func=_shape_list)
    show = sverbs.add_parser("show", help="one shape's statistics")
    show.add_argument("name")
    show.add_argument("--json", action="store_true")
    show.set_defaults(func=_shape_show)

    bench = subparsers.add_parser("bench", help="load benchmark against an endpoint or a managed engine")
    bench.add_argument("what", nargs="?", choices=["run", "results"], default="run",
                       help="run a benchmark (default) or compare stored results")
    _workload_args(bench)
    _endpoint_args(bench)
    bench.add_argument("--start", action="store_true", help="start a managed engine with --profile for the run")
    bench.add_argument("--profile", default="default", help="profile of the engine started with --start")
    bench.add_argument("--tool", choices=["loadgen", "vllm"], default="loadgen",
                       help="the app's load generator (default) or vLLM's `vllm bench serve` (synthetic only)")
    bench.add_argument("--last", type=int, default=20, help="results to compare (with `results`)")
    bench.add_argument("--json", action="store_true", help="end with one JSON line")
    bench.set_defaults(func=_bench)

    tune = subparsers.add_parser("tune", help="autotune the engine for a traffic shape, one change at a time")
    tune.add_argument("--budget-s", type=float, default=600.0, help="stop after this long (default 600)")
    tune.add_argument("--profile", default="default", help="baseline profile (default: default)")
    tune.add_argument("--model", help="smollm2, tiny, a model directory (default: settings)")
    tune.add_argument("--repeats", type=int, default=3, help="runs per measurement (at least 3)")
    _workload_args(tune, duration=8.0, warmup=4.0)
    tune.add_argument("--kv-cache-gib", type=float, default=None, help="KV cache of the baseline (CPU; default 1)")
    tune.add_argument("--spare-gpu", action="store_true",
                      help="run the trial engines on a GPU nothing else uses (CUDA_VISIBLE_DEVICES)")
    tune.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                      help="environment for the trial engines (e.g. CUDA_VISIBLE_DEVICES=1)")
    tune.add_argument("--side-by-side", type=int, default=0, metavar="N",
                      help="a GPU with room for several engines: start the baseline and N candidate changes "
                           "together and measure them in turns (tuning/screening.py), instead of one after another")
    tune.add_argument("--reference", action="append", default=[], metavar="PROFILE",
                      help="with --side-by-side: also measure this profile alongside (e.g. vllm-defaults)")
    tune.add_argument("--no-agent-check", dest="agent_check", action="store_false",
                      help="with --side-by-side: keep a change on the benchmark alone, without real agent "
                           "sessions on it (8 sessions of 6 turns per kept change and the baseline)")
    tune.add_argument("--save", metavar="NAME", default=None,
                      help="save what was kept as this user profile (default: tuned-<baseline>)")
    tune.add_argument("--no-save", dest="save_profile", action="store_false",
                      help="keep the run's results only, save no profile")
    tune.add_argument("--json", action="store_true", help="end with one JSON line: steps and noise_pct")
    tune.set_defaults(func=_tune)


def _endpoint_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--endpoint", metavar="URL", help="an OpenAI-compatible vLLM endpoint that already runs")
    p.add_argument("--api-key", default="", help="API key for --endpoint")
    p.add_argument("--model", dest="model", help="model name at --endpoint / model of the managed engine")


def _workload_args(p: argparse.ArgumentParser, *, duration: float = 30.0, warmup: float = 5.0) -> None:
    g = p.add_argument_group("workload (a captured --shape, or synthetic lengths)")
    g.add_argument("--shape", help="replay a captured shape (name, or 'latest')")
    g.add_argument("--input-len", type=int, help="synthetic: prompt tokens per request")
    g.add_argument("--output-len", type=int, help="synthetic: output tokens per request")
    g.add_argument("--prefix-len", type=int, default=0, help="synthetic: shared prefix tokens")
    g.add_argument("--concurrency", type=int, help="streams (default: the shape's p90, or 8)")
    g.add_argument("--rate", type=float, help="requests per second (default: closed loop)")
    g.add_argument("--duration-s", type=float, default=duration, help=f"measured window (default {duration:g})")
    g.add_argument("--warmup-s", type=float, default=warmup, help=f"unmeasured warm-up (default {warmup:g})")
    g.add_argument("--max-requests", type=int, help="stop after this many requests")
    g.add_argument("--content", choices=("code", "random"),
                   help="prompts' fresh tokens: windows of real code or random ids "
                        "(default: code for a shape, random for synthetic lengths)")
    g.add_argument("--no-constraints", dest="constrained", action="store_false",
                   help="replay: send no structured-outputs constraints (by default the requests that "
                        "carried one when captured, as a guided agent's all do, carry one)")
    g.add_argument("--guided", choices=("auto", "yes", "no"), default="auto",
                   help="the built-in agent-like workload (no shape captured yet): as the guided protocol "
                        "sends it (a regex on every request, drafts drawn n at a time) or plain; auto (the "
                        "default): guided where the app's agents are guided for the model")
    g.add_argument("--slo-ttft-ms", type=float, default=2000.0, help="goodput SLO on TTFT (default 2000)")
    g.add_argument("--slo-tpot-ms", type=float, default=200.0, help="goodput SLO on TPOT (default 200)")


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _settings():  # type: ignore[no-untyped-def]
    from workstation.config import load_settings

    return load_settings()


def _store(settings):  # type: ignore[no-untyped-def]
    from workstation.tuning.store import TuningStore

    return TuningStore(settings.data_dir)


def _run(coro) -> int:  # type: ignore[no-untyped-def]
    """Run a coroutine with Ctrl-C/SIGTERM cancelling it (engines stop in their finally)."""
    async def main() -> int:
        task = asyncio.current_task()
        loop = asyncio.get_running_loop()
        assert task is not None
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, task.cancel)
        try:
            return await coro
        except asyncio.CancelledError:
            _say("workstation: interrupted; engines started here were stopped")
            return 130

    return asyncio.run(main())


# --------------------------------------------------------------------------- profiles
def _profiles_list(args: argparse.Namespace) -> int:
    from workstation.core.profiles import PRESETS, diff_against_parent

    store = _store(_settings())
    catalogue = store.catalogue()
    for profile in catalogue.values():
        parent = f" (from {profile.parent})" if profile.parent else ""
        where = "" if profile.name in PRESETS else "  [yours]"
        only = "" if profile.platforms == {"cpu", "cuda"} else f"  [{'/'.join(sorted(profile.platforms))} only]"
        print(f"{profile.name}{parent}: {profile.description}{where}{only}")
        for line in diff_against_parent(profile):
            print(f"    {line}")
    for problem in store.problems:
        print(f"skipped: {problem}", file=sys.stderr)
    return 0


def _profiles_check(args: argparse.Namespace) -> int:
    from workstation.engine.environment import require_engine
    from workstation.engine.models import resolve_model
    from workstation.tuning.checks import check_against_engine

    settings = _settings()
    store = _store(settings)
    catalogue = store.catalogue()
    if args.name not in catalogue:
        raise UserError(f"unknown profile '{args.name}'", hint=f"known: {', '.join(catalogue)}")
    engine = require_engine(settings)
    model = resolve_model(settings, args.model)
    report = check_against_engine(settings, engine, model, catalogue[args.name], catalogue)
    for line in report.lines():
        print(line)
    if args.json:
        print(orjson.dumps(report.to_dict()).decode())
    return 0 if report.ok else 1


def _profiles_save(args: argparse.Namespace) -> int:
    import shlex

    from workstation.core.profiles import Profile

    env = _env_pairs(args.env)
    store = _store(_settings())
    try:
        from workstation.core.profiles import profile_from_mapping

        profile = profile_from_mapping({"name": args.name, "description": args.description, "parent": args.parent,
                                        "args": shlex.split(args.args), "env": env})
    except ValueError as exc:
        raise UserError(str(exc)) from None
    assert isinstance(profile, Profile)
    path = store.save_profile(profile)
    print(f"saved {path}")
    return 0


def _profiles_delete(args: argparse.Namespace) -> int:
    if not _store(_settings()).delete_profile(args.name):
        raise UserError(f"no user profile '{args.name}'")
    print(f"deleted '{args.name}'")
    return 0


# --------------------------------------------------------------------------- shapes
def _shape_list(args: argparse.Namespace) -> int:
    store = _store(_settings())
    names = store.shapes()
    if not names:
        print("no captured traffic shapes yet (workstation shape capture)")
    for name in names:
        print(store.load_shape(name).summary_line())
    return 0


def _shape_show(args: argparse.Namespace) -> int:
    store = _store(_settings())
    shape = store.load_shape(_shape_name(store, args.name))
    print(shape.summary_line())
    for label, dist in (("prompt tokens", shape.prompt_tokens), ("output tokens", shape.completion_tokens)):
        bars = "  ".join(f"<={edge}:{n}" for edge, n in dist.histogram)
        print(f"  {label}: p10 {dist.p10:.0f}, p50 {dist.p50:.0f}, p90 {dist.p90:.0f}, p99 {dist.p99:.0f}, "
              f"max {dist.max:.0f}  [{bars}]")
    series = " ".join(f"{x:.1f}" for x in shape.concurrency_series[:60])
    print(f"  concurrency per {shape.bin_s:g} s: {series}{' …' if len(shape.concurrency_series) > 60 else ''}")
    for note in shape.notes:
        print(f"  note: {note}")
    if args.json:
        print(_shape_json(shape))
    return 0


def _shape_json(shape) -> str:  # type: ignore[no-untyped-def]
    """A shape's statistics as one JSON line: all but its trace (up to thousands of requests)."""
    data = shape.to_dict()
    data.pop("trace", None)
    return orjson.dumps(data).decode()


def _shape_name(store, name: str | None) -> str:  # type: ignore[no-untyped-def]
    if name in (None, "latest"):
        latest = store.latest_shape()
        if latest is None:
            raise UserError("no captured traffic shape yet", hint="run `workstation shape capture` first")
        return latest
    return name


async def _external(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    from workstation.engine.acquire import external_endpoint

    return await external_endpoint(args.endpoint, args.api_key, args.model)


def _shape_capture(args: argparse.Namespace) -> int:
    import tempfile

    from workstation.services import Services
    from workstation.tuning.fleet_capture import capture_fleet_shape

    settings = _settings()
    store = _store(settings)
    name = args.name or f"fleet-{args.sessions}-{time.strftime('%Y%m%d-%H%M%S')}"

    async def main() -> int:
        async with Services(settings) as services:  # closes the fleet, then the engine, then the client
            if args.endpoint:
                endpoint = await _external(args)
            else:
                engine = await services.engine(model=args.model)
                endpoint = await engine.start(progress=lambda m: _say(f"engine: {m}"))
            workdir = Path(tempfile.mkdtemp(prefix="capture-", dir=store.root if store.root.is_dir() else None))
            shape = await capture_fleet_shape(services.http, endpoint, name=name, sessions=args.sessions,
                                              duration_s=args.duration_s, workdir=workdir, say=_say,
                                              fleets=services.fleet)
        path = store.save_shape(shape)
        print(shape.summary_line())
        print(f"saved {path}")
        if args.json:
            print(_shape_json(shape))
        return 0

    store.root.mkdir(parents=True, exist_ok=True)
    return _run(main())


# --------------------------------------------------------------------------- bench
def _workload(args: argparse.Namespace, store, *, default_concurrency: int = 8,  # type: ignore[no-untyped-def]
              builtin_when_none: bool = False, settings=None, verb: str = "tuning for"):
    """The workload the arguments ask for. ``builtin_when_none``: with no shape captured and
    none asked for, the built-in agent-like workload instead of an error — as the app's agents
    send it to the model (``settings``: whose model, unless ``--model`` names one)."""
    from workstation.tuning.loadgen import builtin_workload, workload_from_shape
    from workstation.tuning.results import Slo, Workload

    slo = Slo(ttft_ms=args.slo_ttft_ms, tpot_ms=args.slo_tpot_ms)
    if args.input_len or args.output_len:
        if not (args.input_len and args.output_len):
            raise UserError("a synthetic workload needs both --input-len and --output-len")
        if args.shape:
            raise UserError("give either --shape or synthetic lengths, not both")
        w = Workload(kind="synthetic", concurrency=args.concurrency or default_concurrency,
                     input_len=args.input_len, output_len=args.output_len, request_rate_per_s=args.rate,
                     shared_prefix_len=args.prefix_len, duration_s=args.duration_s, warmup_s=args.warmup_s,
                     max_requests=args.max_requests, content=getattr(args, "content", None) or "random")
        return w, None, slo
    if builtin_when_none and args.shape is None and not store.shapes():
        mode = getattr(args, "guided", "auto")
        w, how = builtin_workload(settings, getattr(args, "model", None), guided={"yes": True, "no": False}.get(mode),
                                  concurrency=args.concurrency, duration_s=args.duration_s,
                                  warmup_s=args.warmup_s, max_requests=args.max_requests,
                                  content=getattr(args, "content", None) or "code")
        if mode != "auto":
            how += f" (--guided {mode})"
        _say(f"no traffic shape captured yet: {verb} the built-in agent-like workload, {how} ({w.describe()}); "
             "capture your own with `workstation shape capture`")
        return (replace(w, request_rate_per_s=args.rate) if args.rate else w), None, slo
    shape = store.load_shape(_shape_name(store, args.shape))
    w = workload_from_shape(shape, concurrency=args.concurrency, duration_s=args.duration_s,
                            warmup_s=args.warmup_s, max_requests=args.max_requests,
                            content=getattr(args, "content", None) or "code",
                            constrained=getattr(args, "constrained", True))
    if args.rate:
        w = replace(w, request_rate_per_s=args.rate)
    return w, shape, slo


def _bench(args: argparse.Namespace) -> int:
    settings = _settings()
    store = _store(settings)
    if args.what == "results":
        from workstation.tuning.results import comparison_table

        results = store.results(limit=args.last)
        for line in comparison_table(results):
            print(line)
        return 0
    workload, shape, slo = _workload(args, store, builtin_when_none=True, settings=settings,
                                     verb="benchmarking")
    if args.tool == "vllm" and workload.guided_choices:
        raise UserError("vllm bench serve cannot send the guided protocol's regex and n choices",
                        hint="use the app's load generator (leave --tool out) or --guided no")
    if args.start and args.endpoint:
        raise UserError("give --start (a managed engine) or --endpoint, not both")
    if not args.start and not args.endpoint:
        raise UserError("say what to benchmark: --start (a managed engine with --profile) or --endpoint URL")

    async def main() -> int:
        from workstation.engine.environment import find_engine, require_engine
        from workstation.engine.models import resolve_model
        from workstation.services import Services
        from workstation.tuning.bench import context_for, managed_engine, run_workload, tuning_settings

        async with Services(settings) as services:
            http = services.http
            if args.start:
                tsettings = tuning_settings(settings)
                engine = require_engine(tsettings)
                model = resolve_model(tsettings, args.model)
                profile, _ = store.resolve(args.profile, platform=engine.platform)
                async with managed_engine(tsettings, engine, model, profile, log_dir=store.runs_dir / "bench",
                                          say=_say) as launcher:
                    _say(f"benchmark: {workload.describe()}")
                    result = await run_workload(http, launcher.endpoint, workload, context_for(profile, engine, model),
                                                shape=shape, slo=slo, tool=args.tool, store=store)
            else:
                endpoint = await _external(args)
                engine = find_engine(settings)
                _say(f"benchmark of {endpoint.base_url}: {workload.describe()}")
                result = await run_workload(http, endpoint, workload, context_for(None, engine, None),
                                            shape=shape, slo=slo, tool=args.tool, store=store)
        print(f"{result.profile} on {result.model} ({result.engine_version}, {result.hardware_key}): {workload.describe()}")
        print(result.headline())
        if result.prefix_cache_hit_rate is not None:
            print(f"prefix cache hit rate {100 * result.prefix_cache_hit_rate:.0f}%, preemptions {result.preemptions:g}")
        print(f"stored as {result.result_id}")
        if args.json:
            print(orjson.dumps(result.to_dict()).decode())
        return 0

    return _run(main())


# --------------------------------------------------------------------------- tune
def _env_pairs(items: list[str]) -> dict[str, str]:
    env: dict[str, str] = {}
    for item in items:
        key, eq, value = item.partition("=")
        if not eq or not key:
            raise UserError(f"--env takes NAME=VALUE, not {item!r}")
        env[key] = value
    return env


async def _spare_gpu_env() -> dict[str, str]:
    """CUDA_VISIBLE_DEVICES of a GPU the live engine and nothing else uses (unverified: no GPU here)."""
    from workstation.tuning.placement import gpu_inventory, spare_gpu

    gpus = await asyncio.to_thread(gpu_inventory)
    if not gpus:
        raise UserError("--spare-gpu: no GPU found")
    # a GPU with a compute process on it (the live engine's included) is never spare
    index = spare_gpu(gpus, set())
    if index is None:
        raise UserError("--spare-gpu: every GPU is in use", hint="stop the fleet's engine or run without --spare-gpu")
    _say(f"trial engines run on spare GPU {index}")
    return {"CUDA_VISIBLE_DEVICES": str(index)}


async def _tune_side_by_side(args, store, settings, engine, model, baseline, traits, help_flags, cands,  # type: ignore[no-untyped-def]
                             workload, shape, slo, env: dict[str, str]) -> int:
    from workstation.engine.gpu_memory import read_gpu_memory
    from workstation.services import Services
    from workstation.tuning.bench import sequences_per_stream
    from workstation.tuning.screening import SideBySide

    gpus = await asyncio.to_thread(read_gpu_memory)
    if not gpus:
        raise UserError("--side-by-side needs a GPU (each engine takes its own share of it)",
                        hint="on this machine tune one change after another (leave --side-by-side out)")
    visible = env.get("CUDA_VISIBLE_DEVICES", "").strip()
    if visible:
        # the engines see one GPU of the machine's: size the round by that one's memory
        chosen = [g for g in gpus if str(g.index) == visible]
        if not chosen:
            raise UserError(f"CUDA_VISIBLE_DEVICES={visible}: side by side needs one GPU by its index, one of "
                            + ", ".join(str(g.index) for g in gpus))
        gpus = chosen
    references = [store.resolve(name, platform=engine.platform)[0] for name in args.reference]
    kv_gib = args.kv_cache_gib or 8.0
    try:
        side = SideBySide.for_round(1 + len(cands) + len(references), gpus[0], int(kv_gib * (1 << 30)))
    except ValueError as exc:
        raise UserError(str(exc), hint="fewer candidates (--side-by-side N) or a smaller --kv-cache-gib") from None
    run_name = f"tune-side-{time.strftime('%Y%m%d-%H%M%S')}"
    _say(f"side by side on {gpus[0].name}: baseline '{baseline.name}', {len(cands)} changes, references "
         f"{', '.join(args.reference) or 'none'}; {kv_gib:g} GiB KV cache each; {workload.describe()}")
    async with Services(settings) as services:
        tuner = services.screening_tuner(settings, engine, model, baseline, traits=traits, help_flags=help_flags,
                                         candidates=cands, side=side, references=references, repeats=args.repeats,
                                         store=store, slo=slo, log_dir=store.runs_dir / run_name,
                                         gpu_memory=lambda: gpus, sessions=workload.concurrency,
                                         sequences_per_session=sequences_per_stream(workload, shape), env=env,
                                         agent_check=getattr(args, "agent_check", True))
        tuner.progress.connect(_say)
        screening = await tuner.run(workload, shape, name=shape.name if shape else "workload")
    for line in screening.report.table():
        print(line)
    data = {**screening.report.to_json(), "outcome": screening.outcome}
    store.save_run(run_name, data)
    _save_tuned(args, store, screening.report, baseline.name, engine.platform,
                change=(screening.outcome.get("best") or {}).get("label"))
    if args.json:
        print(orjson.dumps(data).decode())
    return 0


def _save_tuned(args: argparse.Namespace, store, report, baseline: str, platform: str,  # type: ignore[no-untyped-def]
                change: str | None = None) -> None:
    """What the run kept, saved as the user's profile (``--save``, default ``tuned-<baseline>``),
    so the window's Tuning dock and ``engine.profile`` can run it; nothing when nothing was kept."""
    from workstation.tuning.autotune import save_tuned

    if not getattr(args, "save_profile", True):
        return
    saved = save_tuned(store, report, baseline=baseline, platform=platform, name=args.save, change=change)
    if saved is None:
        _say(f"nothing was kept: no profile saved ('{baseline}' stays the best measured)")
        return
    profile = saved.profile
    _say(f"{'replaced' if saved.replaced else 'saved'} profile '{profile.name}' ({saved.path}): {profile.description}")
    engines = f" ({profile.engines_per_gpu} engines on each GPU)" if (profile.engines_per_gpu or 1) > 1 else ""
    _say(f"run it{engines}: switch the live engine to it in the window's Tuning dock, or start the app with "
         f"WORKSTATION_ENGINE__PROFILE={profile.name}")


def _tune(args: argparse.Namespace) -> int:
    settings = _settings()
    store = _store(settings)
    workload, shape, slo = _workload(args, store, builtin_when_none=True, settings=settings)
    if args.repeats < 3:
        raise UserError("--repeats must be at least 3 (the noise must be known)")

    async def main() -> int:
        from workstation.services import Services
        from workstation.tuning.autotune import TABLE_HEAD
        from workstation.tuning.tune_plan import plan_tune

        plan = await plan_tune(settings, store, workload, model=args.model, profile=args.profile,
                               kv_cache_gib=args.kv_cache_gib, shape=shape)
        tsettings, engine, model, baseline = plan.trial_settings, plan.engine, plan.model, plan.baseline
        traits, help_flags, cands = plan.traits, plan.help_flags, plan.candidates
        env = _env_pairs(args.env)
        if args.spare_gpu:
            env.update(await _spare_gpu_env())
        if args.side_by_side:
            return await _tune_side_by_side(args, store, tsettings, engine, model, baseline, traits, help_flags,
                                            cands[: args.side_by_side], workload, shape, slo, env)
        run_name = f"tune-{time.strftime('%Y%m%d-%H%M%S')}"
        _say(plan.describe(workload, args.budget_s, args.repeats))
        _say(f"candidates: {', '.join(c.change for c in cands)}")
        async with Services(settings) as services:
            tuner = services.autotuner(tsettings, engine, model, baseline, workload, shape=shape, traits=traits,
                                       help_flags=help_flags, candidates=cands, budget_s=args.budget_s,
                                       repeats=args.repeats, store=store, slo=slo, log_dir=store.runs_dir / run_name,
                                       env=env)
            tuner.progress.connect(_say)
            tuner.step_done.connect(lambda step: _say(step.table_row()))
            _say(TABLE_HEAD)
            report = await tuner.run()
        for line in report.table():
            print(line)
        data = report.to_json()
        store.save_run(run_name, data)
        _save_tuned(args, store, report, baseline.name, engine.platform)
        if args.json:
            print(orjson.dumps(data).decode())
        return 0

    return _run(main())
