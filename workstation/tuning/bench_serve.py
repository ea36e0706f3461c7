"""Run vLLM's own ``vllm bench serve`` for a synthetic workload and read its saved JSON.

It fits the synthetic case (its ``random`` dataset: input/output lengths, a shared prefix,
concurrency, request rate, ``--ignore-eos``, goodput under ``--goodput``); a captured shape's
replay goes through :mod:`workstation.tuning.loadgen`. It runs in the engine's Python
(``EngineInstall.vllm_argv``), bounded by a request count and a wall-clock limit after which
its process group is killed. The API key travels in the environment (``OPENAI_API_KEY``),
never on the command line.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import tempfile
from pathlib import Path
from typing import Any

from workstation.core.endpoints import Endpoint
from workstation.core.errors import UserError
from workstation.engine.environment import EngineInstall
from workstation.tuning.results import BenchResult, LatencyStats, Slo, Workload


class BenchServeError(UserError):
    """``vllm bench serve`` failed or ran past its limit."""


def bench_serve_argv(engine: EngineInstall, endpoint: Endpoint, workload: Workload, *, tokenizer: str | None,
                     slo: Slo, result_dir: Path, num_prompts: int) -> list[str]:
    if workload.kind != "synthetic":
        raise BenchServeError("vllm bench serve runs synthetic workloads here; replays use the app's load generator")
    argv = [
        *engine.vllm_argv, "bench", "serve",
        "--backend", "vllm", "--base-url", endpoint.base_url.rstrip("/"), "--endpoint", "/v1/completions",
        "--model", endpoint.model,
        "--dataset-name", "random",
        "--random-input-len", str(workload.input_len), "--random-output-len", str(workload.output_len),
        "--random-prefix-len", str(workload.shared_prefix_len),
        "--num-prompts", str(num_prompts), "--max-concurrency", str(workload.concurrency),
        "--request-rate", "inf" if workload.request_rate_per_s is None else str(workload.request_rate_per_s),
        "--ignore-eos", "--disable-tqdm", "--seed", str(workload.seed),
        "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,95,99",
        "--save-result", "--result-dir", str(result_dir), "--result-filename", "result.json",
    ]
    goodput = []
    if slo.ttft_ms is not None:
        goodput.append(f"ttft:{slo.ttft_ms:g}")
    if slo.tpot_ms is not None:
        goodput.append(f"tpot:{slo.tpot_ms:g}")
    if goodput:
        argv += ["--goodput", *goodput]
    if tokenizer:
        argv += ["--tokenizer", tokenizer]
    return argv


def _latency(d: dict[str, Any], key: str) -> LatencyStats:
    return LatencyStats(p50_ms=d.get(f"p50_{key}_ms", d.get(f"median_{key}_ms")), p99_ms=d.get(f"p99_{key}_ms"),
                        mean_ms=d.get(f"mean_{key}_ms"), p95_ms=d.get(f"p95_{key}_ms"))


def result_from_bench_json(d: dict[str, Any], workload: Workload, endpoint: Endpoint, slo: Slo) -> BenchResult:
    completed = int(d.get("completed", 0))
    duration = float(d.get("duration", 0.0)) or 1e-9
    good = d.get("request_goodput")
    return BenchResult(
        tool="vllm-bench-serve", workload=workload, profile="?", profile_args=(), profile_env=(),
        engine_version="?", platform="?", model=endpoint.model, hardware={}, duration_s=duration,
        completed=completed, failed=int(d.get("failed", 0)), cut=0,
        output_tokens=int(d.get("total_output_tokens", 0)), prompt_tokens=int(d.get("total_input_tokens", 0)),
        output_tok_s=float(d.get("output_throughput", 0.0)), total_tok_s=float(d.get("total_token_throughput", 0.0)),
        requests_per_s=float(d.get("request_throughput", 0.0)),
        ttft=_latency(d, "ttft"), tpot=_latency(d, "tpot"), itl=_latency(d, "itl"), e2e=_latency(d, "e2el"),
        slo=slo, goodput_req_s=None if good is None else float(good),
        goodput_pct=None if good is None or not completed else 100.0 * float(good) * duration / completed,
        endpoint=endpoint.base_url, notes=("measured until the last request ended (vllm bench serve)",),
    )


async def run_bench_serve(engine: EngineInstall, endpoint: Endpoint, workload: Workload, *,
                          tokenizer: str | None, slo: Slo | None = None, timeout_s: float = 600.0,
                          tmp_root: Path | None = None) -> BenchResult:
    """Run it, bounded by ``workload.max_requests`` (default 4 per stream) and ``timeout_s``."""
    slo = slo or Slo()
    num_prompts = workload.max_requests or workload.concurrency * 4
    with tempfile.TemporaryDirectory(prefix="bench-", dir=tmp_root) as tmp:
        result_dir = Path(tmp)
        argv = bench_serve_argv(engine, endpoint, workload, tokenizer=tokenizer, slo=slo,
                                result_dir=result_dir, num_prompts=num_prompts)
        env = {k: v for k, v in os.environ.items() if not k.startswith("VLLM_")}
        env.update(OPENAI_API_KEY=endpoint.api_key or "none", HF_HUB_OFFLINE="1", TMPDIR=tmp,
                   VLLM_NO_USAGE_STATS="1", PYTHONUNBUFFERED="1")
        if engine.platform == "cpu":
            env["VLLM_TARGET_DEVICE"] = "cpu"
        proc = await asyncio.create_subprocess_exec(
            *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
            stdin=asyncio.subprocess.DEVNULL, env=env, start_new_session=True,
        )
        try:
            out, _ = await asyncio.wait_for(proc.communicate(), timeout=timeout_s)
        except (asyncio.TimeoutError, asyncio.CancelledError):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()
            raise BenchServeError(f"vllm bench serve ran past {timeout_s:.0f} s and was stopped",
                                  hint="lower the request count or raise the limit") from None
        text = out.decode("utf-8", "replace")
        path = result_dir / "result.json"
        if proc.returncode != 0 or not path.is_file():
            tail = "\n".join(text.strip().splitlines()[-8:])
            raise BenchServeError(f"vllm bench serve failed (exit {proc.returncode}):\n{tail}")
        data = json.loads(path.read_text())
    return result_from_bench_json(data, workload, endpoint, slo)
