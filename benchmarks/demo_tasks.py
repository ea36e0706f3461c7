"""The demo's tasks, run for real: how many end with the repository's tests passing.

Every task of the demo manifest (``resources/demo/default.toml``) is a small fix: it starts
on a branch of a sample repository where one test fails. This runs them through the app's
own fleet and agent (real worktrees, the real agent loop and tools, commands in the
sandbox the settings ask for, the protocol the agent picks for the served model) and then
runs the repository's tests in each session's worktree. Per task: finished (the agent
called attempt_completion), tests pass after, turns, tokens. Ends with one JSON line:
``tasks``, ``finished``, ``tests_pass``, ``completion_rate`` (tests_pass / tasks), ``model``.

    python benchmarks/demo_tasks.py --json                 # starts the managed engine (SmolLM2)
    python benchmarks/demo_tasks.py --endpoint URL --api-key KEY --model NAME [--tasks 8]

``--tasks N`` takes the first N tasks one repository after another (8 covers every sample
once); the default is all 32. On 2 shared CPU cores all 32 take several minutes.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from workstation.core import agent_events as ev  # noqa: E402
from workstation.core.session_state import SessionState  # noqa: E402
from workstation.fleet.demo_run import demo_specs, prepare_demo  # noqa: E402
from workstation.services import Services  # noqa: E402
from benchmarks._endpoint import add_endpoint_args, on_endpoint  # noqa: E402

TEST_TIMEOUT_S = 120.0


@dataclass
class Row:
    name: str
    session_id: str
    state: str = ""
    finished: bool = False
    tests_pass: bool = False
    turns: int = 0
    tokens: int = 0
    protocol: str = ""
    calls: dict[str, int] = field(default_factory=dict)
    note: str = ""
    log: list[str] = field(default_factory=list)


def run_tests(worktree: str) -> tuple[bool, str]:
    """The repository's own tests in the session's worktree (outside the agent)."""
    try:
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"], cwd=worktree,
                              capture_output=True, text=True, timeout=TEST_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        return False, "tests timed out"
    lines = (done.stdout or done.stderr).strip().splitlines()
    return done.returncode == 0, lines[-1] if lines else f"exit {done.returncode}"


async def run(args: argparse.Namespace, endpoint, services: Services) -> dict:  # type: ignore[no-untyped-def]
    work = Path(tempfile.mkdtemp(prefix="ws-demo-tasks-"))
    plan = await asyncio.to_thread(prepare_demo, work / "data", sessions=args.tasks, manifest=args.manifest,
                                   workdir=work / "repos")
    rows: dict[str, Row] = {}

    def on_agent(item) -> None:  # type: ignore[no-untyped-def]
        row = rows.get(item.session_id)
        event = item.event
        if row is None:
            return
        if isinstance(event, ev.TurnFinished) and event.finish_reason != "error":
            row.turns += 1
            if event.text:
                row.log.append(f"  turn {event.turn}: {event.text.strip()[:400]}")
        elif isinstance(event, ev.ProtocolSelected):
            row.protocol = event.protocol.value
        elif isinstance(event, ev.ToolCallStarted):
            row.calls[event.tool] = row.calls.get(event.tool, 0) + 1
            row.log.append(f"  > {event.summary}")
        elif isinstance(event, ev.ToolCallFinished):
            row.log.append(f"  < {event.status}: {event.result.strip()[:160]!r}")
        elif isinstance(event, ev.TaskCompleted):
            row.finished = True

    t0 = time.monotonic()
    timed_out = False
    fleet = services.fleet(endpoints=[endpoint], data_dir=work / "data", max_generating=args.concurrency,
                           resume_on_start=False)
    fleet.agent_event.connect(on_agent)
    await fleet.start()
    try:
        for spec, planned in zip(demo_specs(plan, headless=True), plan.sessions, strict=True):
            if args.only and planned.name not in args.only.split(","):
                continue
            spec = type(spec)(**{**spec.to_json(), "max_steps": args.max_steps,
                                 "auto_approve": ("all",), "shared_links": ()})
            made = await fleet.create_session(spec)
            rows[made.session_id] = Row(planned.name, made.session_id)
        for sid in rows:
            await fleet.start_session(sid)
        try:
            async with asyncio.timeout(args.timeout_s):
                await fleet.wait_settled()
        except TimeoutError:
            timed_out = True
            for sid in rows:
                await fleet.stop(sid)
        wall = time.monotonic() - t0
        summaries = {sid: fleet.summary(sid) for sid in rows}
    finally:
        await fleet.aclose()
    for sid, row in rows.items():
        summary = summaries[sid]
        row.state = summary.state.value
        row.tokens = summary.prompt_tokens + summary.completion_tokens
        row.finished = row.finished and summary.state is SessionState.DONE
        row.tests_pass, row.note = await asyncio.to_thread(run_tests, summary.worktree_path)
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    ordered = list(rows.values())
    passing = sum(r.tests_pass for r in ordered)
    return {
        "tasks": len(ordered),
        "finished": sum(r.finished for r in ordered),
        "tests_pass": passing,
        "completion_rate": round(passing / len(ordered), 3) if ordered else 0.0,
        "model": endpoint.model,
        "protocols": sorted({r.protocol for r in ordered if r.protocol}),
        "wall_s": round(wall, 1),
        "timed_out": timed_out,
        "turns_mean": round(sum(r.turns for r in ordered) / max(1, len(ordered)), 1),
        "tokens": sum(r.tokens for r in ordered),
        "per_task": [{"name": r.name, "finished": r.finished, "tests_pass": r.tests_pass, "turns": r.turns,
                      "tokens": r.tokens, "state": r.state} for r in ordered],
        "_rows": ordered,
    }


def table(result: dict) -> str:
    lines = [f"{'task':<22} {'state':<16} {'finished':<9} {'tests':<6} {'turns':>5} {'tokens':>7}  calls / tests"]
    for r in result["_rows"]:
        calls = " ".join(f"{k.split('_')[0]}×{v}" for k, v in sorted(r.calls.items()))
        lines.append(f"{r.name:<22} {r.state:<16} {'yes' if r.finished else 'no':<9} "
                     f"{'pass' if r.tests_pass else 'FAIL':<6} {r.turns:>5} {r.tokens:>7}  {calls} / {r.note}")
    lines.append(f"{result['tests_pass']}/{result['tasks']} tasks end with the tests passing "
                 f"({result['completion_rate']:.0%}), {result['finished']} finished, in {result['wall_s']} s "
                 f"with {result['model']} ({', '.join(result['protocols']) or '?'} protocol)")
    return "\n".join(lines)


async def main(args: argparse.Namespace) -> dict:
    return await on_endpoint(args, lambda endpoint, services: run(args, endpoint, services))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=None, help="first N tasks of the manifest (default: all)")
    parser.add_argument("--only", help="comma-separated task names to run (of the first --tasks)")
    parser.add_argument("--manifest", help="a demo manifest (default: the shipped one)")
    parser.add_argument("--max-steps", type=int, default=30, help="turns per task (steps the task's state decides count too)")
    parser.add_argument("--concurrency", type=int, default=8, help="sessions generating at once")
    parser.add_argument("--timeout-s", type=float, default=1800)
    add_endpoint_args(parser)
    parser.add_argument("--keep", action="store_true", help="keep the work folder")
    parser.add_argument("--json", action="store_true", help="end with the JSON line only after the table")
    parser.add_argument("--transcripts", action="store_true", help="print each task's calls and code (stderr)")
    parsed = parser.parse_args()
    outcome = asyncio.run(main(parsed))
    if parsed.transcripts:
        for row in outcome["_rows"]:
            print(f"== {row.name}: {'pass' if row.tests_pass else 'FAIL'}", *row.log, sep="\n", file=sys.stderr)
    print(table(outcome), file=sys.stderr if parsed.json else sys.stdout)
    outcome.pop("_rows")
    print(json.dumps(outcome))
    with contextlib.suppress(Exception):
        sys.stdout.flush()
