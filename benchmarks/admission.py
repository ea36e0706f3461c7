"""Adaptive admission against fixed caps: N agent sessions on an engine that saturates.

    python benchmarks/admission.py [--sessions 64] [--json]                    # the simulated engine
    python benchmarks/admission.py --engine cpu [--endpoint URL --api-key K --model M]

Each configuration runs ``--sessions`` sessions in a real fleet (the service factory's, with
its worktrees, store, gate, admission and the shared ``/metrics`` scrapers) from a fresh
start: once under each fixed cap of ``--caps`` (``fleet.admission = "fixed"``,
``max_generating = cap``) and once under adaptive admission (``"adaptive"``, the ceiling
``max_generating = sessions``, the target ``--ttft-target-s``). The sessions' agents are
synthetic, with the real agent's traffic shape and nothing else: the real system prompt and
tool definitions shared by all, a task and context of their own, an append-only history
(each turn appends the reply and a tool result), tools that run without a slot (some long,
like a test run), ``--turns`` model turns each. Everything between them and the engine is
the app's: ``SessionRunner``, the gate, admission, the chat client.

Engines: ``sim`` (default) — ``tests/helpers/sim_engine.py`` in a child process, fresh for
each configuration: continuous batching over a paged KV cache with a prefix cache, sized so
that the sessions do not all fit (so it saturates the way a GPU engine does: KV full,
preemption, evicted prefixes). ``cpu`` — the real vLLM CPU engine (``--endpoint``, else the
test engine of ``WORKSTATION_TEST_ENGINE_URL``, else a managed one started here); there a
nonce in each task keeps one configuration's prefixes from serving the next.

Reported per configuration: ``tok_s`` (generated tokens / wall time), ``ttft_p50_ms`` /
``ttft_p95_ms`` (request sent → first token, as the chat client measures it: what the
engine's TTFT means), ``wait_p95_ms`` (time in the fleet's queue before the request is
sent), ``focused_turn_p95_ms`` (wait + first token of the turns of the one session the user
watches in the focus view: it goes first in the fleet's queue, not in the engine's),
``prefix_hit_rate`` (the engine's counters over the run), ``finished`` (sessions that
did all their turns within ``--time-limit-s``), the engine's preemptions and, for adaptive,
the limits it chose and the reasons sessions waited. ``fixed`` in the JSON is the fixed cap
with the highest throughput (all caps under ``fixed.sweep``). Every configuration runs with
the priorities a user gives (the last session watched in the focus view, every fourth one
marked background); one more adaptive run without them (``adaptive-fifo``, skipped with
``--no-fifo``) gives the prefix-cache hit rate and latencies before priorities, under
``adaptive.without_priorities``. Ends with one JSON line: ``{"fixed": {...}, "adaptive": {...}}``.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import random
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from workstation.core import agent_events as ev  # noqa: E402
from workstation.core.endpoints import Endpoint  # noqa: E402
from workstation.core.fleet_events import AdmissionChanged, SessionWaitChanged  # noqa: E402
from workstation.core.requests import RequestRecord  # noqa: E402
from workstation.fleet.sample_repos import scratch_repository  # noqa: E402
from workstation.telemetry.vllm_metrics import MetricsReading, parse_metrics  # noqa: E402

SIM_MODEL = {  # the simulated engine: 64k tokens of KV for 64 sessions whose contexts reach ~5k
    "kv_tokens": 65_536, "block_tokens": 16, "max_num_seqs": 256, "max_batched_tokens": 2048,
    "step_s": 0.004, "per_seq_s": 0.0004, "per_prefill_token_s": 0.00002, "per_context_token_s": 2e-8,
    "stream_interval": 2,
}


@dataclass(frozen=True)
class Workload:
    turns: int
    output_tokens: int
    task_chars: int
    result_chars: int
    tool_s: tuple[float, float]
    long_tool_s: float
    long_every: int
    ignore_eos: bool


SIM_WORKLOAD = Workload(turns=8, output_tokens=64, task_chars=2400, result_chars=1600, tool_s=(0.2, 1.2),
                        long_tool_s=4.0, long_every=4, ignore_eos=False)
CPU_WORKLOAD = Workload(turns=3, output_tokens=24, task_chars=800, result_chars=600, tool_s=(0.2, 0.8),
                        long_tool_s=2.0, long_every=3, ignore_eos=True)


# ----------------------------------------------------------------------------- the synthetic agent
@dataclass
class Log:
    records: list[RequestRecord] = field(default_factory=list)
    waits_s: list[float] = field(default_factory=list)
    focused: str = ""
    focused_turns_s: list[float] = field(default_factory=list)
    """Wait + time to first token of the focused session's turns."""
    finished: set[str] = field(default_factory=set)
    first_t: float | None = None
    last_t: float | None = None


class SyntheticAgent:
    """The agent's traffic, through the fleet's slot and the app's chat client."""

    def __init__(self, setup: Any, http: httpx.AsyncClient, work: Workload, log: Log, nonce: str) -> None:
        from workstation.agent.protocols import system_prompt
        from workstation.agent.tool_specs import OPENAI_TOOLS
        from workstation.core.agent_events import ToolProtocol
        from workstation.engine.chat_client import ChatClient

        self.s = setup
        self.work = work
        self.log = log
        self.tools = list(OPENAI_TOOLS)
        self.client = ChatClient(http, setup.endpoint, observers=[log.records.append], session_id=setup.session_id)
        rng = random.Random(setup.name)
        self.rng = rng
        words = " ".join(f"{setup.name}-{rng.randrange(10**6)}" for _ in range(work.task_chars // 14))
        self.messages: list[dict[str, Any]] = [
            {"role": "system", "content": system_prompt(ToolProtocol.NATIVE)},
            {"role": "user", "content": f"Task {nonce} for {setup.name}: {setup.task}\nContext: {words}"},
        ]

    def stop(self) -> None:
        pass

    async def run(self) -> ev.RunFinished:
        sid, work = self.s.session_id, self.work
        for turn in range(1, work.turns + 1):
            want = time.monotonic()
            self.log.first_t = self.log.first_t or want
            async with self.s.generation_slot():
                self.log.waits_s.append(time.monotonic() - want)
                self.s.on_event(ev.TurnStarted(sid, turn))
                parts: list[str] = []
                usage = None
                async for delta in self.client.stream_chat(
                        self.messages, tools=self.tools, tool_choice="auto", max_tokens=work.output_tokens,
                        temperature=0.0, extra={"ignore_eos": True} if work.ignore_eos else None):
                    if delta.content:
                        if not parts and sid == self.log.focused:
                            self.log.focused_turns_s.append(time.monotonic() - want)
                        parts.append(delta.content)
                        self.s.on_event(ev.TextStreamed(sid, turn, delta.content))
                    usage = delta.usage or usage
                if usage is not None:
                    self.s.on_event(ev.UsageReported(sid, turn, usage.prompt_tokens, usage.completion_tokens,
                                                     usage.cached_tokens, usage.total_tokens, 32768))
            self.s.on_event(ev.TurnFinished(sid, turn, "stop", "", 0))
            self.messages.append({"role": "assistant", "content": "".join(parts) or "(tool call)"})
            long = turn % work.long_every == 0
            await asyncio.sleep(work.long_tool_s if long else self.rng.uniform(*work.tool_s))
            body = f"result of step {turn}: " + "x" * work.result_chars
            self.messages.append({"role": "user", "content": body})
        self.log.finished.add(sid)
        self.log.last_t = time.monotonic()
        self.s.on_event(ev.RunFinished(sid, ev.RunStatus.COMPLETED, "done", work.turns))
        return ev.RunFinished(sid, ev.RunStatus.COMPLETED, "done", work.turns)


# ----------------------------------------------------------------------------- engines
async def engine_reading(http: httpx.AsyncClient, endpoint: Endpoint) -> MetricsReading:
    """One scrape of the engine's ``/metrics``, read as the meters read it."""
    response = await http.get(endpoint.base_url.rstrip("/") + "/metrics")
    response.raise_for_status()
    return parse_metrics(response.text)


def counter_delta(before: MetricsReading, after: MetricsReading, key: str) -> float:
    return (after.counter(key) or 0.0) - (before.counter(key) or 0.0)


def histogram_p95_ms(before: MetricsReading, after: MetricsReading, key: str = "ttft") -> float | None:
    """The p95 of what ``key``'s histogram observed between the two scrapes, in ms."""
    new, old = after.histograms.get(key), before.histograms.get(key)
    if new is None:
        return None
    q = (new if old is None else new.minus(old)).quantile(0.95)
    return None if q is None else round(q * 1000, 1)


class SimProcess:
    """The simulated engine in a child process of its own (its clock is not our CPU's)."""

    def __init__(self) -> None:
        args = [sys.executable, "-m", "tests.helpers.sim_engine"]
        for key, value in SIM_MODEL.items():
            args += ["--" + key.replace("_", "-"), str(value)]
        self.proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                     cwd=Path(__file__).resolve().parents[1], start_new_session=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().split()
        if not line or line[0] != "READY":
            raise SystemExit("the simulated engine did not start")
        self.endpoint = Endpoint(f"http://127.0.0.1:{line[1]}", "sim-key", "sim", name="sim", native_tools=True)

    def stop(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def make_repo(root: Path) -> Path:
    return scratch_repository(root / "repo", {"README.md": "# admission\n"}, message="init")


# ----------------------------------------------------------------------------- one configuration
def pct_ms(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000, 1)


async def run_config(label: str, *, cap: int, adaptive: bool, endpoint: Endpoint, args: argparse.Namespace,
                     work: Workload, root: Path, priorities: bool = True) -> dict[str, Any]:
    from workstation.config import load_settings
    from workstation.engine.http import make_http_client
    from workstation.fleet import SessionSpec
    from workstation.services import Services

    data = root / f"data-{label}"
    log = Log()
    nonce = secrets.token_hex(3)
    limits: list[int] = []
    reasons: collections.Counter[str] = collections.Counter()
    settings = load_settings(data_dir=data, fleet={"admission": "adaptive" if adaptive else "fixed",
                                                   "ttft_target_s": args.ttft_target_s, "max_generating": cap})
    http = make_http_client(max_connections=max(64, args.sessions * 2), read_timeout_s=300.0)
    services = Services(settings, http=http)
    try:
        fleet = services.fleet(endpoints=[endpoint], data_dir=data, max_generating=cap,
                               agent_factory=lambda setup: SyntheticAgent(setup, http, work, log, nonce))

        def on_change(event: object) -> None:
            if isinstance(event, AdmissionChanged):
                limits.append(event.limit)
            elif isinstance(event, SessionWaitChanged):
                reasons[event.reason.split(":")[0]] += 1

        fleet.changed.connect(on_change)
        await fleet.start()
        spec = SessionSpec(task="Fix the failing test and keep the change small.", repo=str(args.repo), name=label,
                           headless=True, auto_approve=("all",))
        made = await fleet.create_sessions(spec, args.sessions)
        log.focused = made[-1].session_id
        if priorities:  # the user watches the last one in the focus view; every fourth runs in the background
            fleet.scheduling.set_focus(log.focused)
            for s in made[::4]:
                await fleet.scheduling.set_background(s.session_id)
        before = await engine_reading(http, endpoint)
        t0 = time.monotonic()
        for s in made:
            await fleet.start_session(s.session_id)
        timed_out = False
        try:
            await asyncio.wait_for(fleet.wait_settled(), args.time_limit_s)
        except TimeoutError:
            timed_out = True
            await fleet.pause_all()
        end = time.monotonic() if timed_out or log.last_t is None else log.last_t  # not the last finish
        wall = end - (log.first_t or t0)
        after = await engine_reading(http, endpoint)
        peak = fleet.gate.peak_generating
    finally:
        await services.aclose()
        await http.aclose()
        shutil.rmtree(data, ignore_errors=True)
    ok = [r for r in log.records if r.ok]
    generated = sum(r.completion_tokens for r in ok)
    ttfts = [r.ttft_s for r in ok if r.ttft_s is not None]
    queries = counter_delta(before, after, "prefix_cache_queries")
    result: dict[str, Any] = {
        "cap": cap,
        "tok_s": round(generated / wall, 1) if wall > 0 else 0.0,
        "ttft_p50_ms": pct_ms(ttfts, 0.50),
        "ttft_p95_ms": pct_ms(ttfts, 0.95),
        "prefix_hit_rate": round(counter_delta(before, after, "prefix_cache_hits") / queries, 4) if queries else None,
        "finished": len(log.finished),
        "wait_p95_ms": pct_ms(log.waits_s, 0.95),
        "focused_turn_p95_ms": pct_ms(log.focused_turns_s, 0.95),
        "engine_ttft_p95_ms": histogram_p95_ms(before, after),
        "preemptions": int(counter_delta(before, after, "preemptions")),
        "requests": len(ok),
        "failed_requests": len(log.records) - len(ok),
        "peak_generating": peak,
        "wall_s": round(wall, 1),
        "timed_out": timed_out,
    }
    if adaptive:
        result["limit"] = {"min": min(limits, default=cap), "median": statistics.median(limits) if limits else cap,
                           "max": max(limits, default=cap), "changes": len(limits)}
        result["wait_reasons"] = dict(reasons.most_common(4))
    return result


# ----------------------------------------------------------------------------- main
async def bench(args: argparse.Namespace) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix="ws-admission-", dir="/var/tmp"))
    args.repo = make_repo(root)
    work = SIM_WORKLOAD if args.engine == "sim" else CPU_WORKLOAD
    if args.turns:
        work = Workload(**{**work.__dict__, "turns": args.turns})
    configs = [(f"fixed-{c}", c, False, True) for c in args.caps] + [("adaptive", args.sessions, True, True)]
    if not args.no_fifo:  # priorities off: the prefix-cache hit rate before priorities
        configs.append(("adaptive-fifo", args.sessions, True, False))
    results: dict[str, dict[str, Any]] = {}
    managed = None
    try:
        endpoint = None
        if args.engine == "cpu":
            endpoint, managed = await cpu_endpoint(args)
        for label, cap, adaptive, priorities in configs:
            sim = SimProcess() if args.engine == "sim" else None
            try:
                ep = sim.endpoint if sim is not None else endpoint
                assert ep is not None
                results[label] = await run_config(label, cap=cap, adaptive=adaptive, endpoint=ep, args=args,
                                                  work=work, root=root, priorities=priorities)
            finally:
                if sim is not None:
                    sim.stop()
            print(f"{label}: {results[label]}", file=sys.stderr, flush=True)
    finally:
        if managed is not None:
            await managed.stop()
        shutil.rmtree(root, ignore_errors=True)
    return results


async def cpu_endpoint(args: argparse.Namespace) -> tuple[Endpoint, Any]:
    url = args.endpoint or os.environ.get("WORKSTATION_TEST_ENGINE_URL")
    if url:
        key = args.api_key or os.environ.get("WORKSTATION_TEST_ENGINE_KEY", "")
        model = args.model or os.environ.get("WORKSTATION_TEST_ENGINE_MODEL", "smollm2")
        return Endpoint(url.rstrip("/").removesuffix("/v1"), key, model, name="cpu"), None
    from workstation.config import load_settings
    from workstation.engine.host import Launchers

    launcher = Launchers.from_settings(load_settings(), args.model)(log_dir=Path(tempfile.mkdtemp(prefix="ws-adm-engine-")))
    endpoint = await launcher.start(lambda m: print(m, file=sys.stderr, flush=True))
    return Endpoint(endpoint.base_url, endpoint.api_key, endpoint.model, name="cpu", native_tools=endpoint.native_tools), launcher


COLUMNS = ("tok_s", "ttft_p50_ms", "ttft_p95_ms", "wait_p95_ms", "focused_turn_p95_ms", "prefix_hit_rate",
           "finished", "preemptions")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=64)
    parser.add_argument("--engine", choices=("sim", "cpu"), default="sim")
    parser.add_argument("--caps", default=None, help="fixed caps to compare, comma-separated "
                        "(default: 8,16,24,32,64 on sim; 4,16,64 on cpu)")
    parser.add_argument("--turns", type=int, default=None, help="model turns per session")
    parser.add_argument("--ttft-target-s", type=float, default=2.0)
    parser.add_argument("--time-limit-s", type=float, default=300.0, help="per configuration")
    parser.add_argument("--endpoint", default=None)
    parser.add_argument("--api-key", default="")
    parser.add_argument("--model", default=None)
    parser.add_argument("--no-fifo", action="store_true",
                        help="skip the run of adaptive admission without priorities (no focus, no background)")
    parser.add_argument("--json", action="store_true", help="(the JSON line is always printed last)")
    args = parser.parse_args()
    default_caps = "8,16,24,32,64" if args.engine == "sim" else "4,16,64"
    args.caps = sorted({min(int(c), args.sessions) for c in (args.caps or default_caps).split(",")})
    results = asyncio.run(bench(args))
    fixed = {k: v for k, v in results.items() if k.startswith("fixed-")}
    best = max(fixed.values(), key=lambda r: r["tok_s"])
    adaptive = results["adaptive"]
    fifo = results.get("adaptive-fifo")
    print(f"\n{args.sessions} sessions on the {args.engine} engine, TTFT p95 target {args.ttft_target_s:g} s\n")
    widths = [max(10, len(c.removesuffix("_ms")) + 2) for c in COLUMNS]
    print(f"{'config':<14}" + "".join(f"{c.removesuffix('_ms'):>{w}}" for c, w in zip(COLUMNS, widths)) + "   (ms)")
    for label, r in results.items():
        print(f"{label:<14}" + "".join(f"{'-' if r.get(c) is None else r[c]!s:>{w}}" for c, w in zip(COLUMNS, widths)))
    if "limit" in adaptive:
        print(f"\nadaptive limit: {adaptive['limit']}; sessions waited for: {adaptive.get('wait_reasons')}")
    within = adaptive["ttft_p95_ms"] is not None and adaptive["ttft_p95_ms"] <= args.ttft_target_s * 1000
    print(f"adaptive TTFT p95 within the target: {within}; throughput {adaptive['tok_s']} vs the best fixed "
          f"cap's ({best['cap']}) {best['tok_s']} tok/s")
    context = {"engine": args.engine, "sessions": args.sessions, "ttft_target_ms": args.ttft_target_s * 1000}
    if fifo is not None:
        print(f"prefix-cache hit rate, adaptive without priorities → with them: {fifo['prefix_hit_rate']} → "
              f"{adaptive['prefix_hit_rate']}; TTFT p95 {fifo['ttft_p95_ms']} → {adaptive['ttft_p95_ms']} ms; "
              f"the watched session's turn p95 {fifo['focused_turn_p95_ms']} → {adaptive['focused_turn_p95_ms']} ms")
        adaptive["without_priorities"] = {k: fifo.get(k) for k in (*COLUMNS, "wall_s")}
    out = {"fixed": {**best, **context, "sweep": list(fixed.values())}, "adaptive": {**adaptive, **context}}
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
