"""The live throughput meter against ``vllm bench serve`` on the same engine, same run.

The meter (``MetricsScraper``, as the app runs it) scrapes the engine's ``/metrics`` at
1 Hz; each reading is generated tok/s over the last interval, from counter deltas on
``time.monotonic()``. Meanwhile ``vllm bench serve`` runs against the same engine
through the engine's own Python. Its window starts when it prints "Starting main
benchmark run" and lasts its reported duration; the meter's readings are averaged over
that window (time-weighted by how much of each reading's interval falls inside it)
and compared with the bench's "Output token throughput".

    python benchmarks/meter_vs_bench.py            # starts the managed engine (settings' model), stops it after
    python benchmarks/meter_vs_bench.py --base-url http://127.0.0.1:8000 --api-key KEY --model smollm2

With no ``--base-url`` it uses the configured external endpoint or starts the managed engine
for the run, as every verb does (``services.Services.engine``); ``vllm bench serve`` runs
through the managed engine environment's Python (``--engine-python`` to use another) with the
served built-in model's directory as its tokenizer (``--tokenizer`` for any other model).

Other traffic on the engine during the run would inflate the meter (it counts all of the
engine's tokens); the JSON reports the engine's own token count over the window next to
the bench's so that shows. Ends with one JSON line: ``meter_output_tok_s``,
``bench_output_tok_s``, ``rel_error`` and details.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import httpx  # noqa: E402

from workstation.config import load_settings  # noqa: E402
from workstation.core.endpoints import Endpoint  # noqa: E402
from workstation.core.errors import UserError  # noqa: E402
from workstation.telemetry.scraper import MetricsScraper  # noqa: E402
from workstation.telemetry.vllm_metrics import EngineMetricsSample  # noqa: E402

START_MARK = "Starting main benchmark run"


@dataclass(frozen=True, slots=True)
class Reading:
    t: float
    interval_s: float | None
    tok_s: float | None
    total: float | None


def window_average(readings: list[Reading], start: float, end: float) -> tuple[float | None, float]:
    """Time-weighted mean of the readings over [start, end]; also the seconds covered."""
    weighted = 0.0
    covered = 0.0
    for r in readings:
        if r.tok_s is None or not r.interval_s:
            continue
        lo, hi = max(r.t - r.interval_s, start), min(r.t, end)
        if hi > lo:
            weighted += r.tok_s * (hi - lo)
            covered += hi - lo
    return (weighted / covered if covered > 0 else None), covered


def bench_command(args: argparse.Namespace, endpoint: Endpoint, engine_python: str, tokenizer: str,
                  result_dir: str) -> list[str]:
    entry = REPO / "workstation" / "engine" / "scripts" / "vllm_entry.py"
    return [
        engine_python, str(entry), "bench", "serve",
        "--backend", "openai-chat", "--endpoint", "/v1/chat/completions",
        "--base-url", endpoint.base_url, "--model", endpoint.model, "--tokenizer", tokenizer,
        "--dataset-name", "random", "--random-input-len", str(args.input_len),
        "--random-output-len", str(args.output_len), "--num-prompts", str(args.num_prompts),
        "--max-concurrency", str(args.concurrency), "--ignore-eos", "--disable-tqdm",
        "--seed", str(args.seed), "--save-result", "--result-dir", result_dir,
        "--result-filename", "bench.json",
    ]


def bench_tools(args: argparse.Namespace, settings: Any, model: str) -> tuple[str, str]:
    """The Python that runs ``vllm bench serve`` and the tokenizer directory for ``model``."""
    from workstation.engine.environment import require_engine
    from workstation.engine.models import resolve_model

    python = args.engine_python or str(require_engine(settings).python)
    tokenizer = args.tokenizer
    if not tokenizer:
        spec = resolve_model(settings, model)
        if spec.local_dir is None:
            raise UserError(f"no local directory for model '{model}'", hint="give --tokenizer DIR")
        tokenizer = str(spec.local_dir)
    return python, tokenizer


async def run_managed(args: argparse.Namespace) -> dict[str, Any]:
    from workstation.services import Services

    settings = load_settings()
    say = (lambda m: print(f"engine: {m}", file=sys.stderr, flush=True))
    async with Services(settings) as services:  # a managed engine started here stops at the end
        engine = await services.engine(url=args.base_url, api_key=args.api_key, model=args.model)
        endpoint = await engine.start(progress=say)
        python, tokenizer = bench_tools(args, settings, endpoint.model)
        return await run(args, endpoint, python, tokenizer)


async def run(args: argparse.Namespace, endpoint: Endpoint, engine_python: str, tokenizer: str) -> dict[str, Any]:
    readings: list[Reading] = []

    def on_sample(s: EngineMetricsSample) -> None:
        if s.up:
            readings.append(Reading(s.t_mono, s.interval_s, s.generation_tokens_per_s, s.generation_tokens_total))

    with tempfile.TemporaryDirectory(prefix="meter-vs-bench-") as result_dir:
        async with httpx.AsyncClient(timeout=10.0) as http:
            scraper = MetricsScraper(http, endpoint, interval_s=args.interval)
            first = await scraper.scrape_once()
            if not first.up:
                raise SystemExit(f"engine metrics not reachable: {first.error}")
            scraper.sampled.connect(on_sample)
            await scraper.start()
            await asyncio.sleep(2 * args.interval)
            env = {**os.environ, "OPENAI_API_KEY": endpoint.api_key, "PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1"}
            proc = await asyncio.create_subprocess_exec(
                *bench_command(args, endpoint, engine_python, tokenizer, result_dir), stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT, env=env, start_new_session=True,
            )
            t_start: float | None = None
            log: list[str] = []
            try:
                async with asyncio.timeout(args.timeout_s):
                    assert proc.stdout is not None
                    async for raw in proc.stdout:
                        line = raw.decode(errors="replace").rstrip()
                        log.append(line)
                        if t_start is None and START_MARK in line:
                            t_start = time.monotonic()
                    rc = await proc.wait()
            except TimeoutError:
                os.killpg(proc.pid, signal.SIGTERM)
                await proc.wait()
                raise SystemExit(f"vllm bench serve ran past {args.timeout_s} s; stopped it") from None
            t_exit = time.monotonic()
            await asyncio.sleep(2 * args.interval)
            await scraper.aclose()
        if rc != 0 or t_start is None:
            print("\n".join(log[-40:]), file=sys.stderr)
            raise SystemExit(f"vllm bench serve failed (exit {rc})")
        bench = json.loads((Path(result_dir) / "bench.json").read_text())

    duration = float(bench["duration"])
    t_end = t_start + duration
    meter, covered = window_average(readings, t_start, t_end)
    inside = [r.tok_s for r in readings if r.tok_s is not None and r.interval_s
              and r.t - r.interval_s >= t_start and r.t <= t_end]
    before = [r for r in readings if r.t <= t_start]
    after = [r for r in readings if r.t >= t_end]
    engine_tokens = (after[0].total - before[-1].total) if before and after and after[0].total is not None \
        and before[-1].total is not None else None
    bench_tok_s = float(bench["output_throughput"])
    print("\n".join(line for line in log if any(k in line for k in (
        "Benchmark duration", "Total generated tokens", "Output token throughput", "Successful requests",
        "Mean TTFT", "Mean ITL"))))
    return {
        "meter_output_tok_s": None if meter is None else round(meter, 2),
        "bench_output_tok_s": round(bench_tok_s, 2),
        "rel_error": None if meter is None else round((meter - bench_tok_s) / bench_tok_s, 4),
        "bench_duration_s": round(duration, 3),
        "window_covered_s": round(covered, 3),
        "meter_readings_in_window": len(inside),
        "meter_mean_of_inside_readings": round(statistics.fmean(inside), 2) if inside else None,
        "bench_total_output_tokens": bench.get("total_output_tokens"),
        "engine_generated_tokens_around_window": engine_tokens,
        "bench_completed": bench.get("completed"),
        "bench_exit_after_window_s": round(t_exit - t_end, 3),
        "interval_s": args.interval,
        "endpoint": endpoint.base_url, "model": endpoint.model,
        "workload": {"num_prompts": args.num_prompts, "concurrency": args.concurrency,
                     "input_len": args.input_len, "output_len": args.output_len},
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base-url", default=None,
                    help="an engine that already runs (default: the configured external one, or the managed "
                         "engine started for the run and stopped after)")
    ap.add_argument("--api-key", default="")
    ap.add_argument("--model", default=None, help="model to serve / ask for (default: settings, or the endpoint's)")
    ap.add_argument("--engine-python", default=None,
                    help="the Python that has vLLM installed (default: the managed engine environment's)")
    ap.add_argument("--tokenizer", default=None,
                    help="the served model's directory, for the random prompts (default: the built-in model's)")
    ap.add_argument("--num-prompts", type=int, default=64)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--input-len", type=int, default=128)
    ap.add_argument("--output-len", type=int, default=128)
    ap.add_argument("--interval", type=float, default=1.0, help="meter interval (s)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout-s", type=float, default=900.0)
    args = ap.parse_args()
    try:
        out = asyncio.run(run_managed(args))
    except UserError as exc:
        raise SystemExit(f"meter_vs_bench: {exc}") from None
    print(f"\nmeter {out['meter_output_tok_s']} tok/s (1 Hz readings over the bench window) vs bench "
          f"{out['bench_output_tok_s']} tok/s: {100 * (out['rel_error'] or 0):+.2f}%")
    print(f"engine counted {out['engine_generated_tokens_around_window']} generated tokens around the window; "
          f"the bench {out['bench_total_output_tokens']}")
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
