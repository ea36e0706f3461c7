"""Attach N sessions (worktrees) to one generated repository of ~5,000 files.

Measures the time to attach them through the fleet (checks, one worktree and branch each),
the disk used per worktree, the memory an idle session costs, and the memory the fleet
keeps per 1,000 transcript events; then counts open files and child processes to show
that nothing leaks. Ends with one JSON line (``attach_s``, ``disk_mb_per_worktree``,
``sessions`` and the rest).

    python benchmarks/fleet_attach.py --sessions 32 [--files 5000] [--keep DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import random
import shutil
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from workstation.core import agent_events as ev  # noqa: E402
from workstation.core.endpoints import Endpoint  # noqa: E402
from workstation.config import load_settings  # noqa: E402
from workstation.fleet import SessionSpec  # noqa: E402
from workstation.fleet.sample_repos import scratch_repository  # noqa: E402
from workstation.fleet.worktrees import disk_usage_bytes  # noqa: E402
from workstation.services import Services  # noqa: E402



def make_repo(root: Path, files: int, seed: int = 7) -> tuple[int, int]:
    """A repository shaped like a mid-sized Python project: ``files`` files in nested
    packages, 0.3–6 KB each. Returns (files, bytes)."""
    rng = random.Random(seed)
    texts: dict[str, str] = {}
    total = 0
    for i in range(files):
        depth = rng.randint(1, 4)
        parts = [f"pkg{rng.randint(0, 19)}"] + [f"mod{rng.randint(0, 9)}" for _ in range(depth - 1)]
        lines = rng.randint(10, 150)
        body = "".join(f"def f{i}_{j}(x):\n    return x * {j} + {rng.randint(0, 999)}\n\n" for j in range(lines // 3))
        texts["/".join([*parts, f"file_{i}.py"])] = f'"""Module {i}."""\n\n{body}'
        total += len(body)
    scratch_repository(root, texts, message="generated")
    return files, total


def rss_bytes() -> int:
    gc.collect()
    return psutil.Process().memory_info().rss


def synthetic_events(sid: str, n: int) -> list[object]:
    """A realistic mix: per turn one state change, streamed pieces, usage, the assistant
    message, a tool call with its result message (sizes like a small coding session)."""
    out: list[object] = []
    turn = 0
    while len(out) < n:
        turn += 1
        out.append(ev.AgentStateChanged(sid, ev.AgentState.WAITING_SLOT, ev.AgentState.GENERATING))
        out.append(ev.TurnStarted(sid, turn))
        for _ in range(20):
            out.append(ev.TextStreamed(sid, turn, "tok "))
        out.append(ev.UsageReported(sid, turn, 1800, 60, 1500, 1860, 8192))
        out.append(ev.TurnFinished(sid, turn, "tool_calls", "x" * 80, 1))
        call = {"role": "assistant", "content": None, "tool_calls": [{"id": f"c{turn}", "type": "function",
                "function": {"name": "read_file", "arguments": '{"path": "pkg1/mod2/file_12.py"}'}}]}
        out.append(ev.MessageAppended(sid, 2 * turn, "assistant", json.dumps(call)))
        out.append(ev.ToolCallStarted(sid, f"c{turn}", "read_file", {"path": "pkg1/mod2/file_12.py"},
                                      "read_file pkg1/mod2/file_12.py"))
        result = "x" * 1200
        out.append(ev.ToolCallFinished(sid, f"c{turn}", "read_file", "ok", result))
        out.append(ev.MessageAppended(sid, 2 * turn + 1, "tool",
                                      json.dumps({"role": "tool", "tool_call_id": f"c{turn}", "content": result})))
    return out[:n]


RATE_WINDOW_S = 5.0


def traced() -> int:
    gc.collect()
    return tracemalloc.get_traced_memory()[0]


def never_called(setup):  # type: ignore[no-untyped-def]
    raise RuntimeError("this benchmark starts no agent")


async def main(args: argparse.Namespace) -> dict:
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="ws-attach-"))
    if args.keep and work.exists():
        shutil.rmtree(work)
    repo, data = work / "repo", work / "data"
    t = time.monotonic()
    files, size = make_repo(repo, args.files)
    gen_s = time.monotonic() - t
    proc = psutil.Process()
    endpoint = Endpoint(base_url="http://127.0.0.1:9", api_key="", model="none", name="bench")
    async with Services(load_settings()) as services:
        fleet = services.fleet(endpoints=[endpoint], data_dir=data, agent_factory=never_called,
                               max_generating=32)
        await fleet.start()
        fds0, rss0 = proc.num_fds(), rss_bytes()
        t = time.monotonic()
        made = await fleet.create_sessions(SessionSpec(task="benchmark attach", repo=str(repo)), args.sessions)
        attach_s = time.monotonic() - t
        rss_idle = rss_bytes()
        disks = [disk_usage_bytes(Path(s.worktree_path)) for s in made]
        # transcript events through the fleet's real path (store + live emission)
        sid = made[0].session_id
        events = synthetic_events(sid, args.events)
        tracemalloc.start()
        base = traced()
        t = time.monotonic()
        for e in events:
            fleet.sink.on_agent_event(sid, e)
        await fleet.store.flush()
        events_s = time.monotonic() - t
        during = traced()
        await asyncio.sleep(RATE_WINDOW_S + 0.5)  # the tok/s window forgets its marks
        fleet.tokens_per_s(sid)
        retained = traced()
        stored = await fleet.store.count_events(sid)
        loaded = await fleet.transcript(sid)
        with_loaded = traced()
        del loaded
        tracemalloc.stop()
        children = len(proc.children(recursive=True))
        fds1 = proc.num_fds()
        t = time.monotonic()
        await fleet.remove_many([s.session_id for s in made])
        remove_s = time.monotonic() - t
        await fleet.aclose()
    store_bytes = sum(p.stat().st_size for p in data.glob("store.sqlite3*"))
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return {
        "sessions": args.sessions,
        "attach_s": round(attach_s, 2),
        "attach_s_per_session": round(attach_s / args.sessions, 3),
        "disk_mb_per_worktree": round(sum(disks) / len(disks) / 1e6, 2),
        "repo_files": files,
        "repo_source_mb": round(size / 1e6, 1),
        "repo_generate_s": round(gen_s, 1),
        "mem_kb_per_idle_session": round((rss_idle - rss0) / args.sessions / 1024, 1),
        "rss_mb": round(rss_idle / 1e6, 1),
        "mem_kb_per_1000_events": round((retained - base) / args.events * 1000 / 1024, 1),
        "mem_kb_per_1000_events_peak": round((during - base) / args.events * 1000 / 1024, 1),
        "mem_kb_per_1000_stored_events_loaded": round((with_loaded - retained) / max(1, stored) * 1000 / 1024, 1),
        "events": args.events,
        "events_stored": stored,
        "event_us_each": round(events_s / args.events * 1e6, 1),
        "store_kb_per_1000_stored_events": round(store_bytes / max(1, stored) * 1000 / 1024, 1),
        "open_fds_added": fds1 - fds0,
        "child_processes": children,
        "remove_s": round(remove_s, 2),
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=32)
    parser.add_argument("--files", type=int, default=5000)
    parser.add_argument("--events", type=int, default=10_000, help="transcript events to feed (memory)")
    parser.add_argument("--keep", metavar="DIR", help="work in DIR and keep it (default: a temp dir, removed)")
    result = asyncio.run(main(parser.parse_args()))
    width = max(len(k) for k in result)
    for key, value in result.items():
        print(f"{key:<{width}}  {value}")
    print(json.dumps(result))
