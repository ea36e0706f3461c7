"""A fleet of coding agents on a real engine: aggregate generated tok/s and prefix-cache hits.

N sessions (default 32), each in its own worktree of one small repository, each with its own
small task, run to the end at once through the fleet (cap: all generate together). Reports
the tokens generated per second of wall time (from the streams' usage and from the engine's
``vllm:generation_tokens_total``), the prefix-cache hit rate over the run (deltas of
``vllm:prefix_cache_hits_total / vllm:prefix_cache_queries_total``), tool calls per session,
and the app's memory. Ends with one JSON line.

    python benchmarks/fleet_run.py --endpoint URL --api-key KEY --model NAME [--sessions 32]
    python benchmarks/fleet_run.py                      # starts the managed engine (SmolLM2)

On a shared engine other clients' traffic lands in the same counters: the run reports the
engine's running requests before it starts so a busy engine shows.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from workstation.config import load_settings  # noqa: E402
from workstation.core import agent_events as ev  # noqa: E402
from workstation.core.endpoints import Endpoint  # noqa: E402
from workstation.core.session_state import SessionState  # noqa: E402
from workstation.fleet import SessionSpec  # noqa: E402
from workstation.services import Services  # noqa: E402
from benchmarks._endpoint import add_endpoint_args, on_endpoint  # noqa: E402
from workstation.fleet.sample_repos import scratch_repository  # noqa: E402
from workstation.tuning.agent_check import FILES, TASKS  # noqa: E402  (the agent check's repository)
from workstation.tuning.loadgen import counter_delta  # noqa: E402
from workstation.tuning.loadgen import read_metrics  # noqa: E402

async def run(args: argparse.Namespace, endpoint: Endpoint, observe=None) -> dict:  # type: ignore[no-untyped-def]
    """``observe``: an object with ``async attach(fleet)`` / ``async detach()`` (the GPU suite
    records the fleet's traffic shape with it)."""
    work = Path(tempfile.mkdtemp(prefix="ws-fleet-run-"))
    repo, data = work / "repo", work / "data"
    scratch_repository(repo, FILES)
    tool_calls: dict[str, int] = {}

    def on_agent(e) -> None:  # type: ignore[no-untyped-def]
        if isinstance(e.event, ev.ToolCallStarted):
            tool_calls[e.session_id] = tool_calls.get(e.session_id, 0) + 1

    proc = psutil.Process()
    fds0 = proc.num_fds()
    # services of its own, not the served endpoint's: what the run leaves open is counted once
    # they are closed (the HTTP client's pooled connections apart)
    async with Services(load_settings()) as services:
        http = services.http
        before = await read_metrics(http, endpoint)
        busy = before.gauges.get("running", 0.0) if before else None
        fleet = services.fleet(endpoints=[endpoint], data_dir=data, max_generating=args.sessions)
        fleet.agent_event.connect(on_agent)
        await fleet.start()
        if observe is not None:
            await observe.attach(fleet)
        gc.collect()
        rss0 = proc.memory_info().rss
        made = []
        for i in range(args.sessions):
            spec = SessionSpec(task=TASKS[i % len(TASKS)], repo=str(repo), name=f"s{i + 1:02d}",
                               auto_approve=("read", "edit"), headless=True, max_steps=args.max_steps,
                               temperature=args.temperature)
            made += await fleet.create_sessions(spec, 1)
        gc.collect()
        rss_ready = proc.memory_info().rss
        t0 = time.monotonic()
        for s in made:
            await fleet.start_session(s.session_id)
        timed_out = False
        try:
            async with asyncio.timeout(args.timeout_s):
                await fleet.wait_settled()
        except TimeoutError:
            timed_out = True
            await fleet.pause_all()
        wall = time.monotonic() - t0
        gc.collect()
        rss_end = proc.memory_info().rss
        after = await read_metrics(http, endpoint)
        rows = fleet.sessions()
        events = [await fleet.store.count_events(s.session_id) for s in rows]
        fds_pooled = proc.num_fds() - fds0
        children = len(proc.children(recursive=True))
        peak = fleet.gate.peak_generating
        if observe is not None:
            await observe.detach()
        await fleet.aclose()
    fds_added = proc.num_fds() - fds0  # after the fleet and the HTTP client are closed
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    generated = sum(r.completion_tokens for r in rows)
    hits = counter_delta(before, after, "prefix_cache_hits")
    queries = counter_delta(before, after, "prefix_cache_queries")
    engine_gen = counter_delta(before, after, "generation_tokens")
    states: dict[str, int] = {}
    for r in rows:
        states[r.state.value] = states.get(r.state.value, 0) + 1
    calls = [tool_calls.get(r.session_id, 0) for r in rows]
    reasons: dict[str, int] = {}
    for r in rows:
        if r.state is not SessionState.DONE and r.error:
            key = f"{r.state.value}: {r.error[:90]}"
            reasons[key] = reasons.get(key, 0) + 1
    return {
        "sessions": len(rows),
        "wall_s": round(wall, 1),
        "generated_tokens": generated,
        "generated_tok_s": round(generated / wall, 1),
        "engine_generated_tok_s": round(engine_gen / wall, 1) if engine_gen is not None else None,
        "prompt_tokens": sum(r.prompt_tokens for r in rows),
        "prefix_hit_rate": round(hits / queries, 4) if hits is not None and queries else None,
        "tool_calls_min": min(calls),
        "tool_calls_mean": round(sum(calls) / len(calls), 1),
        "sessions_with_3_tool_calls": sum(1 for c in calls if c >= 3),
        "states": states,
        "why_not_done": reasons,
        "done": sum(1 for r in rows if r.state is SessionState.DONE),
        "peak_generating": peak,
        "engine_running_before": busy,
        "timed_out": timed_out,
        "rss_mb_end": round(rss_end / 1e6, 1),
        "mem_kb_per_idle_session": round((rss_ready - rss0) / len(rows) / 1024, 1),
        "mem_kb_per_session_after_run": round((rss_end - rss0) / len(rows) / 1024, 1),
        "events_stored_per_session": round(sum(events) / len(events), 1),
        "open_fds_added": fds_added,
        "pooled_http_connections": fds_pooled,
        "child_processes_left": children,
        "model": endpoint.model,
    }


async def main(args: argparse.Namespace) -> dict:
    return await on_endpoint(args, lambda endpoint, _services: run(args, endpoint))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=32)
    parser.add_argument("--max-steps", type=int, default=8, help="model turns per session")
    parser.add_argument("--temperature", type=float, default=None)
    parser.add_argument("--timeout-s", type=float, default=1800)
    add_endpoint_args(parser)
    parser.add_argument("--keep", action="store_true", help="keep the work folder")
    result = asyncio.run(main(parser.parse_args()))
    width = max(len(k) for k in result)
    for key, value in result.items():
        print(f"{key:<{width}}  {value}")
    print(json.dumps(result))
    with contextlib.suppress(Exception):
        sys.stdout.flush()
