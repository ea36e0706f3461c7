"""How faithfully the tuner's replay of a captured fleet shape stands in for the fleet.

1. A real agent fleet (``fleet_run``: its sessions, tasks and step limit) is recorded as a
   traffic shape, as ``workstation tune`` captures one; its prefix-cache hit rate is the
   engine's ``/metrics`` over the run.
2. The shape is replayed as the tuner replays it (closed loop, one stream per captured session,
   a measured window): the replay's hit rate, from the same counters.
3. The replay's structured-outputs constraints (every guided request carries a regex) on and off,
   in turns: output tok/s and the engine's CPU per generated token (its local processes; wall
   clock on a busy host swings far more than the grammar costs).

    python benchmarks/replay_fidelity.py --endpoint URL --api-key KEY --model NAME [--sessions 6]
    python benchmarks/replay_fidelity.py                # starts the managed engine (SmolLM2)

An engine shared with other clients mixes their requests into its counters: give it one of its
own for clean figures. Ends with one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import statistics
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from workstation.core.endpoints import Endpoint  # noqa: E402
from workstation.services import Services  # noqa: E402
from workstation.telemetry.host import process_tree  # noqa: E402
from benchmarks._endpoint import add_endpoint_args, on_endpoint  # noqa: E402
from workstation.tuning.capture import TrafficRecorder  # noqa: E402
from workstation.tuning.loadgen import LoadGenerator, workload_from_shape  # noqa: E402


def _fleet_run():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("fleet_run", Path(__file__).with_name("fleet_run.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Capture:
    """``fleet_run``'s observer: a recorder on the fleet's model requests."""

    def __init__(self, endpoint: Endpoint) -> None:
        self.endpoint = endpoint
        self.recorder: TrafficRecorder | None = None

    async def attach(self, fleet) -> None:  # type: ignore[no-untyped-def]
        self.recorder = TrafficRecorder("replay-fidelity", http=fleet.http, endpoint=self.endpoint)
        self.recorder.attach_fleet(fleet)
        await self.recorder.start()

    async def detach(self) -> None:
        assert self.recorder is not None
        await self.recorder.stop()


def engine_processes(endpoint: Endpoint) -> list[psutil.Process]:
    """The process listening on the endpoint's port, with its children (local engines only)."""
    port = urlparse(endpoint.base_url).port
    try:
        pids = {c.pid for c in psutil.net_connections("tcp") if c.laddr and c.laddr.port == port
                and c.status == psutil.CONN_LISTEN and c.pid}
    except (psutil.AccessDenied, OSError):
        return []
    return [p for pid in pids for p in process_tree(pid)]


def cpu_s(procs: list[psutil.Process]) -> float:
    total = 0.0
    for p in procs:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.Error:
            continue
    return total


async def run(args: argparse.Namespace, endpoint: Endpoint, services: Services) -> dict[str, Any]:
    capture = Capture(endpoint)
    fleet_args = argparse.Namespace(sessions=args.sessions, max_steps=args.max_steps, temperature=None,
                                    timeout_s=args.timeout_s, keep=False)
    fleet = await _fleet_run().run(fleet_args, endpoint, observe=capture)
    recorder = capture.recorder
    assert recorder is not None
    shape = recorder.shape()  # its common prefix estimated from what it recorded
    out: dict[str, Any] = {"fleet_hit_rate": fleet["prefix_hit_rate"], "fleet_tool_calls_mean": fleet["tool_calls_mean"],
                           "shape": shape.summary_line(), "requests": shape.requests,
                           "guided_fraction": round(shape.guided_fraction, 3)}
    procs = engine_processes(endpoint)
    http = services.http
    w = workload_from_shape(shape, concurrency=shape.sessions, duration_s=args.replay_s, warmup_s=5.0)
    replay = await LoadGenerator(http, endpoint, w, shape=shape).run()
    out["replay_hit_rate"] = None if replay.prefix_cache_hit_rate is None else round(replay.prefix_cache_hit_rate, 4)
    for pair in range(args.pairs):
        for constrained in ((True, False) if pair % 2 == 0 else (False, True)):
            w = workload_from_shape(shape, concurrency=shape.sessions, duration_s=args.timeout_s, warmup_s=0.0,
                                    max_requests=shape.requests, seed=pair, constrained=constrained)
            before = cpu_s(procs)
            result = await LoadGenerator(http, endpoint, w, shape=shape).run()
            spent = cpu_s(procs) - before
            key = "constrained" if constrained else "unconstrained"
            out.setdefault(f"{key}_tok_s", []).append(round(result.output_tok_s, 1))
            if procs and result.output_tokens:
                out.setdefault(f"{key}_cpu_ms_per_tok", []).append(round(1000 * spent / result.output_tokens, 3))
    for key in [k for k, v in out.items() if isinstance(v, list)]:
        out[f"{key}_median"] = statistics.median(out[key])
    return out


async def main(args: argparse.Namespace) -> dict[str, Any]:
    return await on_endpoint(args, lambda endpoint, services: run(args, endpoint, services))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=6)
    parser.add_argument("--max-steps", type=int, default=24, help="model turns per session")
    parser.add_argument("--timeout-s", type=float, default=900)
    parser.add_argument("--replay-s", type=float, default=60.0, help="the replay's measured window")
    parser.add_argument("--pairs", type=int, default=4, help="constrained / unconstrained pairs")
    add_endpoint_args(parser)
    result = asyncio.run(main(parser.parse_args()))
    width = max(len(k) for k in result)
    for key, value in result.items():
        print(f"{key:<{width}}  {value}")
    print(json.dumps(result))
