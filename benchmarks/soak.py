"""Soak: 32 sessions working for a set time on the scripted engine; does anything grow?

Each session is a real agent in a real fleet (own worktree, checkpoints, commands in the
sandbox, SQLite transcript), driven by a scripted OpenAI-compatible server that runs in a
child process (so its memory is not counted) and answers with a cycle of tool calls: read,
write, command, search, edit, then completion. A finished session gets a follow-up task
(its conversation grows and is condensed); after a few tasks it is removed and a new one
takes its place, so creation, worktrees and removal churn too.

Every ``--interval`` seconds it records the app's RSS, open file descriptors, threads,
asyncio tasks, child processes and the SQLite size (database + WAL); at the end it prints a
table (first, last, max and the growth per hour fitted over the run after a warm-up) and one
JSON line.

    python benchmarks/soak.py [--seconds 120] [--sessions 32] [--interval 5]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from workstation.core import agent_events as ev  # noqa: E402
from workstation.core.endpoints import Endpoint  # noqa: E402
from workstation.core.session_state import SessionState as S  # noqa: E402
from workstation.fleet.sample_repos import scratch_repository  # noqa: E402

TASKS_PER_SESSION = 4
METRICS = ("rss_mb", "open_fds", "threads", "asyncio_tasks", "child_processes", "sqlite_db_mb", "sqlite_wal_mb")


# ----------------------------------------------------------------------------- the engine (child)
def serve() -> None:
    """The scripted engine: a cycle of tool calls per task, answers to condensing requests."""
    from tests.helpers.scripted_server import Reply, ScriptedServer, ToolCall
    from workstation.agent.prompts import CONDENSE_REQUEST

    def call(name: str, **args: Any) -> Reply:
        return Reply(text="Next step.", tool_calls=[ToolCall(name, args)], chunk_chars=6, delay_s=0.002)

    def respond(body: dict[str, Any], n: int) -> Reply:
        messages = body.get("messages", [])
        if messages and messages[-1].get("content") == CONDENSE_REQUEST:
            return Reply(text="Summary: files were read, written and checked; tests ran.", chunk_chars=8)
        # the step within the current task: tool results since the last user message
        step = 0
        for m in reversed(messages):
            if m.get("role") == "user":
                break
            step += m.get("role") == "tool"
        k = n % 97
        cycle = [
            call("read_file", path="README.md"),
            call("write_to_file", path=f"notes/n{k}.txt", content=f"note {n}\n" * 20),
            call("execute_command", command=f"ls notes | wc -l; echo run {n}"),
            call("search_files", path=".", regex="note"),
            call("replace_in_file", path="README.md",
                 diff="------- SEARCH\n# soak\n=======\n# soak\n+++++++ REPLACE"),
        ]
        if step < len(cycle):
            return cycle[step]
        return call("attempt_completion", result=f"task done ({n})")

    async def main() -> None:
        async with ScriptedServer(responder=respond, max_model_len=8192) as server:
            print(json.dumps({"port": server.port, "api_key": server.api_key, "model": server.model}), flush=True)
            await asyncio.Event().wait()

    asyncio.run(main())


# ----------------------------------------------------------------------------- the app
def make_repo(root: Path) -> Path:
    return scratch_repository(root / "repo", {"README.md": "# soak\n\nA repository for the soak test.\n",
                                              "notes/keep.txt": "keep\n"})


def size_mb(path: Path) -> float:
    return round(path.stat().st_size / 1e6, 2) if path.exists() else 0.0


def sample(data: Path, t0: float, server_pid: int) -> dict[str, float]:
    """One row of the series; child processes do not count the engine stand-in."""
    me = psutil.Process()
    store = data / "store.sqlite3"
    return {
        "t_s": round(time.monotonic() - t0, 1),
        "rss_mb": round(me.memory_info().rss / 1e6, 1),
        "open_fds": me.num_fds(),
        "threads": me.num_threads(),
        "asyncio_tasks": len(asyncio.all_tasks()),
        "child_processes": sum(1 for c in me.children(recursive=True) if c.pid != server_pid),
        "sqlite_db_mb": size_mb(store),
        "sqlite_wal_mb": size_mb(Path(f"{store}-wal")),
    }


def per_hour(samples: list[dict[str, float]], key: str, warmup_s: float) -> float:
    """Least-squares slope of ``key`` over time after the warm-up, per hour."""
    pts = [(s["t_s"], s[key]) for s in samples if s["t_s"] >= warmup_s]
    if len(pts) < 3:
        pts = [(s["t_s"], s[key]) for s in samples]
    if len(pts) < 2:
        return 0.0
    n = len(pts)
    mt = sum(t for t, _ in pts) / n
    mv = sum(v for _, v in pts) / n
    den = sum((t - mt) ** 2 for t, _ in pts)
    return 0.0 if den == 0 else sum((t - mt) * (v - mv) for t, v in pts) / den * 3600


async def soak(args: argparse.Namespace) -> dict[str, Any]:
    from workstation.agent.sandbox import SandboxPolicy
    from workstation.agent.sandbox_status import sandbox_status
    from workstation.config import load_settings
    from workstation.engine.http import make_http_client
    from workstation.fleet import SessionSpec
    from workstation.services import Services

    root = Path(tempfile.mkdtemp(prefix="ws-soak-", dir="/var/tmp"))
    data = root / "data"
    server = subprocess.Popen([sys.executable, __file__, "--serve"], stdout=subprocess.PIPE, text=True,
                              start_new_session=True)
    counts = {"turns": 0, "tool_calls": 0, "commands": 0, "tasks_done": 0, "created": 0, "removed": 0,
              "condensed": 0, "errors": 0}
    samples: list[dict[str, float]] = []
    http = make_http_client(read_timeout_s=30.0)
    services = Services(load_settings(), http=http)
    try:
        assert server.stdout is not None
        info = json.loads(server.stdout.readline())
        endpoint = Endpoint(base_url=f"http://127.0.0.1:{info['port']}", api_key=info["api_key"],
                            model=info["model"], name="soak", native_tools=True)
        repo = make_repo(root)
        policy = SandboxPolicy(app_data_dirs=(str(data),))
        sandbox_line = (await sandbox_status(policy)).summary()
        factory = services.agent_factory(context_window_tokens=8192, overrides={
            "sandbox": policy, "retry_backoff_s": 0.1, "max_turns": 1000})
        fleet = services.fleet(endpoints=[endpoint], data_dir=data, agent_factory=factory,
                               max_generating=args.sessions)

        def on_agent(e: Any) -> None:
            event = e.event
            if isinstance(event, ev.TurnFinished) and event.finish_reason != "error":
                counts["turns"] += 1
            elif isinstance(event, ev.ToolCallFinished):
                counts["tool_calls"] += 1
                counts["commands"] += event.tool == "execute_command"
                counts["errors"] += event.status == "error"
            elif isinstance(event, ev.ContextCondensed):
                counts["condensed"] += 1

        fleet.agent_event.connect(on_agent)
        await fleet.start()
        spec = SessionSpec(task="Keep the notes folder tidy.", repo=str(repo), headless=True,
                           auto_approve=("all",))
        tasks_done: dict[str, int] = {}
        await fleet.create_sessions(spec, args.sessions, start=True)
        counts["created"] += args.sessions
        t0 = time.monotonic()
        next_sample = t0
        while time.monotonic() - t0 < args.seconds:
            now = time.monotonic()
            if now >= next_sample:
                samples.append(sample(data, t0, server.pid))
                next_sample += args.interval
            for s in fleet.sessions():
                if s.state is S.DONE:
                    counts["tasks_done"] += 1
                    done = tasks_done[s.session_id] = tasks_done.get(s.session_id, 0) + 1
                    if done >= TASKS_PER_SESSION:  # churn: a new session takes its place
                        tasks_done.pop(s.session_id, None)
                        await fleet.remove(s.session_id)
                        counts["removed"] += 1
                        await fleet.create_session(spec, start=True)
                        counts["created"] += 1
                    else:
                        await fleet.reply(s.session_id, f"Next task #{done}: tidy the notes again.")
                elif s.state is S.NEEDS_INPUT:
                    counts["errors"] += 1
                    await fleet.reply(s.session_id, "Please continue.")
                elif s.state in (S.FAILED, S.STOPPED):
                    counts["errors"] += 1
                    await fleet.start_session(s.session_id)
            await asyncio.sleep(0.2)
        samples.append(sample(data, t0, server.pid))
        states: dict[str, int] = {}
        for s in fleet.sessions():
            states[s.state.value] = states.get(s.state.value, 0) + 1
        await fleet.aclose()
    finally:
        await http.aclose()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.pid, 15)
        server.wait(10)
        shutil.rmtree(root, ignore_errors=True)
    warmup = min(30.0, args.seconds * 0.25)
    growth = {k: round(per_hour(samples, k, warmup), 2) for k in METRICS}
    return {"seconds": args.seconds, "sessions": args.sessions, "samples": samples, "growth_per_hour": growth,
            "counts": counts, "final_states": states, "sandbox": sandbox_line, "warmup_s": warmup}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--sessions", type=int, default=32)
    parser.add_argument("--interval", type=float, default=5.0)
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve()
        return 0
    result = asyncio.run(soak(args))
    samples = result["samples"]
    print(f"soak: {result['sessions']} sessions for {result['seconds']:.0f} s, {result['sandbox']}")
    c = result["counts"]
    print(f"work: {c['turns']} model turns, {c['tool_calls']} tool calls ({c['commands']} commands), "
          f"{c['tasks_done']} tasks done, {c['condensed']} condensings, {c['created']} sessions created, "
          f"{c['removed']} removed, {c['errors']} errors")
    print(f"{'metric':<16}{'first':>10}{'min':>10}{'max':>10}{'last':>10}{'growth/h':>12}")
    for key in METRICS:
        values = [s[key] for s in samples]
        print(f"{key:<16}{values[0]:>10}{min(values):>10}{max(values):>10}{values[-1]:>10}"
              f"{result['growth_per_hour'][key]:>12}")
    print(f"(growth per hour: least-squares slope after a {result['warmup_s']:.0f} s warm-up)")
    summary = {k: v for k, v in result.items() if k != "samples"}
    summary["series"] = {key: [s[key] for s in samples] for key in ("t_s", *METRICS)}
    print(json.dumps(summary, separators=(",", ":")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
