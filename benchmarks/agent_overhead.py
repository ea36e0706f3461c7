"""App-side overhead of one agent tool round-trip, excluding the model.

    python benchmarks/agent_overhead.py [--steps 1000] [--agents 10] [--mix full|read]

A scripted OpenAI-compatible server (``tests/helpers/scripted_server.py``) runs in a
*separate process* and answers every model turn at once with a streamed tool call in
vLLM's chunk format (4 characters per chunk, like one token per event). Agents run one
after another in a temporary git repository, ``--steps`` tool round-trips in all: stream
parse + tool-call accumulation + argument checks + approval policy + the tool itself +
the result message + events + (after edits and commands) a checkpoint commit. The wall
time per step is what an agent adds to a model turn; the CPU time is this process's own
(the tool thread pool included); git and shell children are counted apart.

``--mix full`` cycles read_file, list_files, search_files, list_code_definition_names,
replace_in_file (+ checkpoint) and execute_command (+ checkpoint); ``--mix read`` only
the first four. Ends with one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import resource
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.helpers.scripted_server import Reply, ScriptedServer, ToolCall  # noqa: E402
from workstation.agent import Agent, AgentConfig  # noqa: E402
from workstation.core import agent_events as ev  # noqa: E402
from workstation.core.approvals import ApprovalPolicy  # noqa: E402
from workstation.core.endpoints import Endpoint  # noqa: E402
from workstation.engine.chat_client import ChatClient  # noqa: E402
from workstation.engine.http import make_http_client  # noqa: E402
from workstation.fleet.sample_repos import scratch_repository  # noqa: E402

READ_MIX = [
    ("read_file", {"path": "pkg/core.py"}),
    ("list_files", {"path": ".", "recursive": True}),
    ("search_files", {"path": ".", "regex": r"def \w+", "file_pattern": "*.py"}),
    ("list_code_definition_names", {"path": "pkg"}),
]
EDIT = "------- SEARCH\nVALUE = {old}\n=======\nVALUE = {new}\n+++++++ REPLACE"
FULL_MIX = [*READ_MIX, ("replace_in_file", None), ("execute_command", {"command": "echo ok"})]


def _responder_factory(mix_name: str, steps_per_agent: int):
    mix = FULL_MIX if mix_name == "full" else READ_MIX

    def respond(body: dict, _n: int) -> Reply:
        k = sum(1 for m in body["messages"] if m.get("role") == "assistant")
        if k >= steps_per_agent:
            return Reply(tool_calls=[ToolCall("attempt_completion", {"result": "done"})])
        name, args = mix[k % len(mix)]
        if name == "replace_in_file":
            round_ = k // len(mix)
            old, new = (0, 1) if round_ % 2 == 0 else (1, 0)
            args = {"path": "pkg/state.py", "diff": EDIT.format(old=old, new=new)}
        return Reply(tool_calls=[ToolCall(name, args)], prompt_tokens=1000 + 50 * k, completion_tokens=20)

    return respond


def _serve(conn, mix_name: str, steps_per_agent: int) -> None:  # runs in the server process
    async def main() -> None:
        server = ScriptedServer(responder=_responder_factory(mix_name, steps_per_agent), model="bench")
        await server.start()
        conn.send(server.port)
        await asyncio.get_running_loop().run_in_executor(None, conn.recv)  # until told to stop
        await server.aclose()

    asyncio.run(main())


def _make_repo() -> Path:
    files = {f"pkg/mod{i}.py": "".join(f"def func_{i}_{j}(x):\n    return x + {j}\n\n\n" for j in range(15))
             for i in range(20)}
    files.update({"pkg/core.py": "class Core:\n    def run(self):\n        return 1\n" * 40,
                  "pkg/state.py": "VALUE = 0\n", "README.md": "# bench\n"})
    return scratch_repository(Path(tempfile.mkdtemp(prefix="ws-overhead-")), files, message="init")


async def _bench(port: int, steps: int, agents: int) -> dict:
    repo = _make_repo()
    per_agent = steps // agents
    endpoint = Endpoint(f"http://127.0.0.1:{port}", "test-key", "bench", native_tools=True)
    tool_s: dict[str, list[float]] = defaultdict(list)
    turn_s: list[float] = []
    ckpt_s: list[float] = []
    marks: dict[str, float] = {}
    done_steps = 0

    def on_event(e: object) -> None:
        nonlocal done_steps
        now = time.perf_counter()
        if isinstance(e, ev.TurnStarted):
            marks["turn"] = now
        elif isinstance(e, ev.TurnFinished):
            turn_s.append(now - marks.pop("turn", now))
        elif isinstance(e, ev.ToolCallStarted):
            marks[e.call_id] = now
        elif isinstance(e, ev.ToolCallFinished):
            tool_s[e.tool].append(now - marks.pop(e.call_id, now))
            marks["after_tool"] = now
            if e.tool != "attempt_completion":
                done_steps += 1
        elif isinstance(e, ev.CheckpointCreated) and e.label != "session start":
            ckpt_s.append(now - marks.get("after_tool", now))

    config = AgentConfig(approval=ApprovalPolicy.parse("all"), context_window_tokens=1_000_000,
                         max_turns=per_agent + 5, retry_backoff_s=0.01)
    async with make_http_client() as http:
        client = ChatClient(http, endpoint)
        warm = Agent("warmup", repo, "warm up", client, config, on_event=lambda e: None)
        await warm.run()  # first connection, imports, caches
        done_steps = 0
        tool_s.clear(), turn_s.clear(), ckpt_s.clear()
        children0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu0, wall0 = time.process_time(), time.perf_counter()
        for i in range(agents):
            agent = Agent(f"bench-{i}", repo, f"benchmark task {i}", client, config, on_event=on_event)
            outcome = await agent.run()
            if not outcome.ok:
                raise SystemExit(f"agent {i} ended {outcome.status.value}: {outcome.message}")
        wall = time.perf_counter() - wall0
        cpu = time.process_time() - cpu0
        children1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    child_cpu = (children1.ru_utime + children1.ru_stime) - (children0.ru_utime + children0.ru_stime)
    model_turns = len(turn_s)
    return {
        "steps": done_steps, "agents": agents, "model_turns": model_turns, "wall_s": wall, "cpu_s": cpu,
        "child_cpu_s": child_cpu, "tool_s": dict(tool_s), "turn_s": turn_s, "checkpoint_s": ckpt_s,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--agents", type=int, default=10)
    parser.add_argument("--mix", choices=["full", "read"], default="full")
    args = parser.parse_args()
    ctx = multiprocessing.get_context("fork")
    parent, child = ctx.Pipe()
    server = ctx.Process(target=_serve, args=(child, args.mix, args.steps // args.agents), daemon=True)
    server.start()
    try:
        port = parent.recv()
        r = asyncio.run(_bench(port, args.steps, args.agents))
    finally:
        parent.send("stop")
        server.join(10)
        if server.is_alive():
            server.kill()
    steps = max(1, r["steps"])
    ms = lambda xs: 1000 * statistics.mean(xs) if xs else 0.0  # noqa: E731
    print(f"{r['steps']} tool round-trips in {r['agents']} agents, mix={args.mix}, "
          f"scripted server in another process\n")
    print(f"{'part':<30}{'count':>7}{'mean ms':>10}{'p95 ms':>10}")
    rows = [("model turn (stream + parse)", r["turn_s"])] + [(f"tool {k}", v) for k, v in r["tool_s"].items()]
    rows.append(("checkpoint commit", r["checkpoint_s"]))
    for name, xs in rows:
        p95 = 1000 * sorted(xs)[int(0.95 * (len(xs) - 1))] if xs else 0.0
        print(f"{name:<30}{len(xs):>7}{ms(xs):>10.2f}{p95:>10.2f}")
    result = {
        "overhead_ms_per_step": round(1000 * r["wall_s"] / steps, 3),
        "cpu_ms_per_step": round(1000 * r["cpu_s"] / steps, 3),
        "child_cpu_ms_per_step": round(1000 * r["child_cpu_s"] / steps, 3),
        "steps": r["steps"],
        "agents": r["agents"],
        "mix": args.mix,
        "turn_ms_mean": round(ms(r["turn_s"]), 3),
        "checkpoint_ms_mean": round(ms(r["checkpoint_s"]), 3),
    }
    print(f"\nper step: {result['overhead_ms_per_step']} ms wall, {result['cpu_ms_per_step']} ms CPU "
          f"(+ {result['child_cpu_ms_per_step']} ms in git/shell children)")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
