"""What the samplers cost: % of one CPU core at 1 Hz and at 10 Hz.

Each sampler runs alone in an asyncio loop for ``--seconds`` at each rate, as the app
runs it (its own thread for NVML and psutil; the scraper on the loop); the process's
CPU time (user + system, every thread) over the wall time is the cost. An idle loop
is measured first and subtracted.

    python benchmarks/sampler_cost.py [--seconds 10] [--base-url http://127.0.0.1:8000]

The GPU part needs NVML with a device (it says so otherwise); the engine-metrics part
needs ``--base-url``. Ends with one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from workstation.core.endpoints import Endpoint  # noqa: E402
from workstation.telemetry.nvml import GpuState, NvmlReader  # noqa: E402
from workstation.telemetry.sampler import GpuSampler, HostSampler  # noqa: E402
from workstation.telemetry.scraper import MetricsScraper  # noqa: E402


def cpu_s() -> float:
    return time.process_time()  # user + system CPU of every thread, ns resolution


async def measure(make: Any, hz: float, seconds: float) -> dict[str, float]:
    sampler = make(1.0 / hz)
    ticks: list[float] = []
    sampler.sampled.connect(lambda s: ticks.append(time.monotonic()))
    await sampler.start()
    await asyncio.sleep(0.5)  # start-up (NVML init, first psutil call) is not the steady cost
    c0, w0, n0 = cpu_s(), time.monotonic(), len(ticks)
    await asyncio.sleep(seconds)
    c1, w1, n1 = cpu_s(), time.monotonic(), len(ticks)
    await sampler.aclose()
    return {"pct_core": 100.0 * (c1 - c0) / (w1 - w0), "samples_per_s": (n1 - n0) / (w1 - w0)}


async def idle(seconds: float) -> float:
    c0, w0 = cpu_s(), time.monotonic()
    await asyncio.sleep(seconds)
    return 100.0 * (cpu_s() - c0) / (time.monotonic() - w0)


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {"seconds_per_rate": args.seconds}
    base = await idle(min(args.seconds, 5.0))
    out["idle_loop_pct_core"] = round(base, 3)
    rates = (1.0, 10.0)

    probe = NvmlReader()
    state = probe.open()
    gpus = probe.device_count
    if state is GpuState.OK:
        probe.read()
        read_ms = statistics.median(probe.read().read_s * 1e3 for _ in range(10))
    probe.close()
    if state is GpuState.OK:
        gpu: dict[str, Any] = {"gpus": gpus, "read_ms_p50": round(read_ms, 3)}
        for hz in rates:
            m = await measure(lambda iv: GpuSampler(interval_s=iv, engine_pid=lambda: os.getpid()), hz, args.seconds)
            gpu[f"{hz:g}hz_pct_core"] = round(m["pct_core"] - base, 3)
            gpu[f"{hz:g}hz_samples_per_s"] = round(m["samples_per_s"], 2)
        out["gpu"] = gpu
    else:
        out["gpu"] = {"state": state.value, "message": probe.message}

    host: dict[str, Any] = {}
    for hz in rates:
        m = await measure(lambda iv: HostSampler(interval_s=iv, engine_pid=lambda: os.getppid()), hz, args.seconds)
        host[f"{hz:g}hz_pct_core"] = round(m["pct_core"] - base, 3)
        host[f"{hz:g}hz_samples_per_s"] = round(m["samples_per_s"], 2)
    out["host"] = host

    if args.base_url:
        import httpx

        ep = Endpoint(base_url=args.base_url, api_key=args.api_key, model="", name="engine")
        metrics: dict[str, Any] = {}
        async with httpx.AsyncClient(timeout=10.0) as http:
            for hz in rates:
                m = await measure(lambda iv: MetricsScraper(http, ep, interval_s=iv), hz, args.seconds)
                metrics[f"{hz:g}hz_pct_core"] = round(m["pct_core"] - base, 3)
                metrics[f"{hz:g}hz_samples_per_s"] = round(m["samples_per_s"], 2)
        out["engine_metrics"] = metrics
    else:
        out["engine_metrics"] = {"state": "skipped", "message": "no --base-url"}
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=10.0, help="measured seconds per sampler and rate")
    ap.add_argument("--base-url", default=os.environ.get("WORKSTATION_TEST_ENGINE_URL"))
    ap.add_argument("--api-key", default=os.environ.get("WORKSTATION_TEST_ENGINE_KEY", ""))
    args = ap.parse_args()
    out = asyncio.run(main_async(args))
    print(f"{'sampler':16} {'1 Hz % core':>12} {'10 Hz % core':>13}")
    for name in ("gpu", "host", "engine_metrics"):
        part = out[name]
        if "1hz_pct_core" in part:
            print(f"{name:16} {part['1hz_pct_core']:12.2f} {part['10hz_pct_core']:13.2f}")
        else:
            print(f"{name:16} {part.get('message', '')}")
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
