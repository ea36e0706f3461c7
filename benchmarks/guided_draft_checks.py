"""How long the guided protocol's draft checks hold the app's event loop.

    .venv/bin/python benchmarks/guided_draft_checks.py [--repeats 5] [--sessions 32]

With a small model (SmolLM2-135M) a guided edit draws several drafts (vLLM's ``n``) and
checks each one: the file with it applied must parse, use no name the file as read did not
leave undefined (pyflakes), not be a neighbour's body copied (a new function), not repeat
the code as read or a draft tried before. Then the usable ones are ranked. This runs real
:class:`~workstation.agent.guided.turn.GuidedTurn` turns (``run()``, the session's own code
path) on files of this repository of about 50, 200 and 500 lines, copied into a scratch
worktree, each turn an edit of one function that draws 19 drafts (a greedy one and 6
sampled, none usable; 6 more, none usable; 6 more, some usable), a mix of drafts that do
not parse, use undefined names, copy a neighbour or the code as read, are cut off, or do.
Two kinds of edit per file: ``rewrite`` (an existing function) and ``add`` (a new function
the task asks for, appended to the file: the twin-body check runs).

The model is a stand-in that streams those drafts at once, a line per delta, so what is
timed is the app's side alone. A ticker task on the same loop sleeps 2 ms at a time and
records how late it wakes: the longest lateness is the longest the loop was blocked, which
the UI's flush tick (30 Hz) and every other session would feel; ``blocks_over_frame``
counts the blocks longer than a 60 Hz frame in a turn (median over the repeats). On a
shared machine the system's load makes the loop late too; the loop thread's CPU time between
two ticks (``max_loop_cpu_ms``) is the part of a block that is the loop's own work. The first row is
the run's first turn (cold: nothing cached, and where the checks run in processes of their
own, those start); each case then has one untimed turn before its timed ones. The last row
runs ``--sessions`` turns at once (the 200-line rewrite), as a fleet's would.

The checks' own CPU, ``check_cpu_ms_per_turn``: the CPU time (user + system) the check
pool's processes spent over a case's timed turns, over the turns. On a machine without a GPU
the engine runs on the same cores, so that is CPU the engine does not get.

Ends with one JSON line.
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import itertools
import json
import multiprocessing
import re
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from workstation.agent.config import AgentConfig  # noqa: E402
from workstation.agent.guided.actions import arguments_json  # noqa: E402
from workstation.agent.guided.drafts import GuidedMemory  # noqa: E402
from workstation.agent.guided.symbols import python_symbols  # noqa: E402
from workstation.agent.guided.texts import SYSTEM_PROMPT_GUIDED  # noqa: E402
from workstation.agent.guided.turn import GuidedTurn  # noqa: E402
from workstation.agent.guided.workspace import mentioned_paths  # noqa: E402
from workstation.engine.chat_client import ChatDelta, Usage  # noqa: E402
from benchmarks._loop_lag import LoopLag  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SIZES = (50, 200, 500)
TICK_S = 0.002
NEW_NAME = "draft_helper"
FRAME_MS = 16.7
_SERIALS = itertools.count(1)


# ----- inputs: files of this repository, chosen by size (deterministic for a commit) -----
@dataclass(frozen=True, slots=True)
class Source:
    path: str
    text: str
    lines: int
    function: ast.FunctionDef
    """A top-level function with a plain signature (the edit target, and the neighbour an
    ``add`` draft copies)."""


def rewrite_task(name: str, path: str) -> str:
    return f"Make {name} in {path} count its calls."


def _plain_functions(text: str, path: str) -> list[ast.FunctionDef]:
    """Top-level functions with a one-line plain header that the rewrite task names alone
    (no other symbol of the file is called like a word of the task: the turn then offers
    just the one edit, and asks the model nothing but the code)."""
    tree = ast.parse(text)
    lines = text.splitlines()
    names = [s.name.rsplit(".", 1)[-1] for s in python_symbols(text) or ()]
    out = []
    for n in tree.body:
        if not (isinstance(n, ast.FunctionDef) and len(n.body) >= 2 and not n.decorator_list
                and "(" not in ast.unparse(n.args) and len(ast.unparse(n.args)) <= 60
                and lines[n.lineno - 1].rstrip().endswith(":")):
            continue
        words = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", rewrite_task(n.name, path)))
        if [m for m in names if m in words] == [n.name]:
            out.append(n)
    return out


def pick_sources() -> list[Source]:
    """For each of :data:`SIZES`, the Python file of ``workstation/`` nearest that many lines
    that has a top-level function to edit and names no other file (a turn then offers just
    the one edit; path order breaks ties). The guided package itself
    is left out, so that changing it does not change the inputs."""
    candidates: list[tuple[int, str, str, ast.FunctionDef]] = []
    for path in sorted((REPO / "workstation").rglob("*.py")):
        rel = path.relative_to(REPO).as_posix()
        if rel.startswith("workstation/agent/guided/"):
            continue
        text = path.read_text(encoding="utf-8")
        functions = _plain_functions(text, rel)
        if functions and not mentioned_paths(text):  # a file that names others offers to create them
            candidates.append((len(text.splitlines()), rel, text, functions[0]))
    out = []
    for size in SIZES:
        lines, rel, text, function = min(candidates, key=lambda c: (abs(c[0] - size), c[1]))
        out.append(Source(rel, text, lines, function))
    return out


# ----- the drafts of one turn -----
def _fence(header: str, body: list[str]) -> str:
    return "```python\n" + header + "\n" + "".join(line + "\n" for line in body) + "```"


def drafts_of(source: Source, kind: str, serial: int) -> tuple[str, list[list[str]]]:
    """(the task, the drafts of the three draws: 7, 6 and 6). ``serial`` makes every turn's
    drafts new texts, as a model's are (nothing a check caches by text is found again)."""
    fn = source.function
    lines = source.text.splitlines()
    own = [line for line in lines[fn.lineno - 1: fn.end_lineno]]
    indent = fn.col_offset
    own = [line[indent:] for line in own]
    header, body = own[0], own[1:]
    args = ast.unparse(fn.args)
    if kind == "rewrite":
        task = rewrite_task(fn.name, source.path)

        def valid(i: int) -> str:
            return _fence(header, [f"    _calls_{i} = {serial}", *body])

        def undefined(i: int) -> str:
            return _fence(header, [f"    np_{i}.zeros({serial})", *body])

        def syntax(i: int) -> str:
            return _fence(header, [f"    _calls_{i} = ({serial}", *body])

        def copy(i: int) -> str:  # the code as read (a comment is not what it does)
            return _fence(header, [f"    # call {i} in turn {serial}", *body])
    else:
        task = f"Add a function {NEW_NAME}({args}) to {source.path} that returns a number."
        header = f"def {NEW_NAME}({args}):"

        def valid(i: int) -> str:
            return _fence(header, [f"    return {i} * {serial}"])

        def undefined(i: int) -> str:
            return _fence(header, [f"    return np.zeros({i} * {serial})"])

        def syntax(i: int) -> str:
            return _fence(header, [f"    return ({i} * {serial}"])

        def copy(i: int) -> str:  # the neighbour's body under the new name
            return _fence(header, [*body, f"    # turn {serial}"])

    def cut(i: int) -> str:
        return "```python\n" + header + "\n" + f"    x = {i} * {serial}\n"

    draws = [[syntax(1), undefined(2), copy(3), cut(4), syntax(5), undefined(6), copy(7)],
             [undefined(8), syntax(9), copy(10), syntax(11), undefined(12), cut(13)],
             [valid(14), syntax(15), valid(16), undefined(17), copy(18), valid(19)]]
    return task, draws


class ScriptedDrafts:
    """Stands in for :class:`ChatClient`: each request gets the next draw (the greedy one its
    first draft, at temperature 0), streamed a line per delta, the choices interleaved."""

    def __init__(self, draws: list[list[str]]) -> None:
        self.greedy = [draws[0][0]]
        self.sampled = [draws[0][1:], *draws[1:]]
        self.answered: list[tuple[str, str]] = []
        """(regex, text) of every draft sent: checked after the timing."""

    async def stream_chat(self, messages: Sequence[dict[str, Any]], *, max_tokens: int | None = None,
                          temperature: float | None = None, extra: dict[str, Any] | None = None,
                          **_: Any) -> AsyncIterator[ChatDelta]:
        extra = extra or {}
        texts = self.greedy.pop(0) if not temperature else self.sampled.pop(0)
        texts = [texts] if isinstance(texts, str) else list(texts)
        assert len(texts) == int(extra.get("n", 1)), (len(texts), extra.get("n"))
        self.answered += [(extra["structured_outputs"]["regex"], t) for t in texts]
        pieces = [t.splitlines(keepends=True) for t in texts]
        for row in range(max(len(p) for p in pieces)):
            for index, lines in enumerate(pieces):
                if row < len(lines):
                    yield ChatDelta(content=lines[row], index=index)
            await asyncio.sleep(0)
        yield ChatDelta(usage=Usage(900, sum(len(t) // 4 for t in texts)), events=0)


# ----- one turn, timed, with the loop's lateness watched -----
def check_cpu_s() -> float:
    """CPU seconds (user + system) the check pool's processes have used so far (they are
    this process's multiprocessing children and live as long as the pool)."""
    total = 0.0
    for child in multiprocessing.active_children():
        try:
            times = psutil.Process(child.pid).cpu_times()
        except (psutil.NoSuchProcess, psutil.AccessDenied, ValueError):
            continue
        total += times.user + times.system
    return total


def _history(source: Source, task: str) -> list[dict[str, Any]]:
    call = {"id": "call_read", "type": "function",
            "function": {"name": "read_file", "arguments": arguments_json({"path": source.path})}}
    return [{"role": "system", "content": SYSTEM_PROMPT_GUIDED}, {"role": "user", "content": task},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "call_read", "content": source.text}]


@dataclass(slots=True)
class TurnRun:
    wall_s: float
    drafts_shown: str
    client: ScriptedDrafts
    tool: str
    args: dict[str, Any]


async def one_turn(source: Source, kind: str, root: Path, session: str) -> TurnRun:
    task, draws = drafts_of(source, kind, next(_SERIALS))
    client = ScriptedDrafts(draws)
    shown: list[str] = []

    def emit(event: Any) -> None:
        text = getattr(event, "text", None)
        if isinstance(text, str) and text.startswith("\n["):
            shown.append(text.strip())

    turn = GuidedTurn(client, _history(source, task), root=root, task=task, config=AgentConfig(),  # type: ignore[arg-type]
                      session_id=session, turn=2, max_tokens=2048, emit=emit, memory=GuidedMemory())
    start = time.perf_counter()
    result = await turn.run()
    wall = time.perf_counter() - start
    assert result.reply.calls, (source.path, kind, result.content[:200])
    call = result.reply.calls[0]
    return TurnRun(wall, " ".join(shown), client, call.name, json.loads(call.arguments))


def _check(run: TurnRun, source: Source, kind: str) -> None:
    """The turn did what a session's would: every draft held to its regex, 19 drawn, 3
    usable, the best kept."""
    for regex, text in run.client.answered:
        if not text.endswith("```") or "    x = " in text:
            continue  # a cut-off draft: the token limit, not the regex, ended it
        assert re.fullmatch(regex, text), f"a draft the engine could not have written:\n{text}"
    assert run.drafts_shown == "[19 drafts, 3 usable; trying the best first]", run.drafts_shown
    expected = "    _calls_14 = " if kind == "rewrite" else "    return 14 * "
    edit = run.args.get("diff") or run.args.get("content") or ""
    assert expected in edit, (run.tool, edit[:300])


async def measure(sources: list[Source], repeats: int, sessions: int, root: Path) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    ticker = LoopLag(TICK_S)
    ticker.start()
    await asyncio.sleep(0.05)
    ticker.clear()

    async def timed(label: str, source: Source, kind: str, count: int) -> dict[str, Any]:
        walls: list[float] = []
        blocks: list[float] = []
        over: list[int] = []
        cpus: list[float] = []
        await one_turn(source, kind, root, "warm-up")  # caches, and the checks' processes where there are any
        cpu_before = check_cpu_s()
        for _ in range(repeats):
            await asyncio.sleep(0.02)
            ticker.clear()
            runs = await asyncio.gather(*(one_turn(source, kind, root, f"s{i}") for i in range(count)))
            await asyncio.sleep(TICK_S * 3)  # the tick that was due at the end
            late = sorted(ticker.late_s)
            for run in runs:
                _check(run, source, kind)
            walls.append(max(r.wall_s for r in runs))
            blocks.append(late[-1])
            over.append(sum(1 for x in late if x * 1000 > FRAME_MS))
            cpus.append(max(ticker.cpu_s))
        check_cpu = (check_cpu_s() - cpu_before) / (repeats * count)
        return {"case": label, "file": source.path, "lines": source.lines, "kind": kind, "sessions": count,
                "drafts_per_turn": 19, "turn_ms_median": round(1000 * statistics.median(walls), 1),
                "max_blocked_ms": round(1000 * max(blocks), 1),
                "max_blocked_ms_median": round(1000 * statistics.median(blocks), 1),
                "blocks_over_frame": statistics.median(over),
                "max_loop_cpu_ms_median": round(1000 * statistics.median(cpus), 1),
                "max_loop_cpu_ms": round(1000 * max(cpus), 1),
                "check_cpu_ms_per_turn": round(1000 * check_cpu, 1)}

    first = time.perf_counter()
    try:
        shutil.rmtree(root, ignore_errors=True)
        (root / sources[0].path).parent.mkdir(parents=True, exist_ok=True)
        (root / sources[0].path).write_text(sources[0].text, encoding="utf-8")
        cold_cpu = check_cpu_s()
        await one_turn(sources[0], "rewrite", root, "cold")
        rows.append({"case": "first turn (cold)", "file": sources[0].path, "lines": sources[0].lines,
                     "kind": "rewrite", "sessions": 1, "turn_ms_median": round(1000 * (time.perf_counter() - first), 1),
                     "max_blocked_ms": round(1000 * max(ticker.late_s, default=0.0), 1),
                     "max_blocked_ms_median": round(1000 * max(ticker.late_s, default=0.0), 1),
                     "blocks_over_frame": sum(1 for x in ticker.late_s if x * 1000 > FRAME_MS),
                     "max_loop_cpu_ms_median": round(1000 * max(ticker.cpu_s, default=0.0), 1),
                     "max_loop_cpu_ms": round(1000 * max(ticker.cpu_s, default=0.0), 1),
                     "check_cpu_ms_per_turn": round(1000 * (check_cpu_s() - cold_cpu), 1)})
        for source in sources:
            shutil.rmtree(root, ignore_errors=True)
            (root / source.path).parent.mkdir(parents=True, exist_ok=True)
            (root / source.path).write_text(source.text, encoding="utf-8")
            for kind in ("rewrite", "add"):
                rows.append(await timed(f"{source.lines} lines {kind}", source, kind, 1))
        middle = sources[1]
        shutil.rmtree(root, ignore_errors=True)
        (root / middle.path).parent.mkdir(parents=True, exist_ok=True)
        (root / middle.path).write_text(middle.text, encoding="utf-8")
        rows.append(await timed(f"{sessions} sessions, {middle.lines} lines rewrite", middle, "rewrite", sessions))
    finally:
        await ticker.stop()
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5, help="turns per case (the figures are over these)")
    parser.add_argument("--sessions", type=int, default=32, help="turns at once in the last case")
    args = parser.parse_args(argv)
    sources = pick_sources()
    scratch = Path(tempfile.mkdtemp(prefix="guided-checks-"))
    try:
        rows = asyncio.run(measure(sources, max(1, args.repeats), max(1, args.sessions), scratch / "repo"))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"{'case':<32} {'file':<32} {'turn ms':>8} {'blocked ms med/max':>19} {'loop CPU ms med/max':>20} "
          f"{'blocks > 16.7 ms':>17} {'check CPU ms/turn':>18}")
    for row in rows:
        blocked = f"{row['max_blocked_ms_median']} / {row['max_blocked_ms']}"
        cpu = f"{row['max_loop_cpu_ms_median']} / {row['max_loop_cpu_ms']}"
        print(f"{row['case']:<32} {row['file']:<32} {row['turn_ms_median']:>8} {blocked:>19} {cpu:>20} "
              f"{row['blocks_over_frame']:>17} {row['check_cpu_ms_per_turn']:>18}")
    worst = max(r["max_blocked_ms"] for r in rows if r["sessions"] == 1 and not r["case"].startswith("first"))
    print(json.dumps({"benchmark": "guided_draft_checks", "repeats": args.repeats, "tick_ms": TICK_S * 1000,
                      "frame_ms": FRAME_MS, "worst_blocked_one_session_ms": worst, "rows": rows}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
