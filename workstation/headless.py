"""Headless runs (no visible window): what ``workstation demo --headless`` does, and the
terminal's live table of a fleet run (``workstation run`` draws it too).

Starts the engine (or uses ``--endpoint``), streams a real answer to the terminal and
prints a summary: time to first token and tokens per second.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import sys
import time
from typing import TextIO

from workstation.config import load_settings
from workstation.core.fleet_events import SessionSummary
from workstation.core.session_state import SessionState
from workstation.engine.chat_client import ChatClient
from workstation.services import Services


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


async def _stream_one(client: ChatClient, prompt: str, max_tokens: int, echo: bool) -> dict:
    t0 = time.monotonic()
    first: float | None = None
    pieces: list[str] = []
    usage = None
    # aclosing: a write that fails (a closed pipe) ends the request now, not when collected
    async with contextlib.aclosing(client.stream_chat(
        [{"role": "user", "content": prompt}], max_tokens=max_tokens, temperature=0.0
    )) as deltas:
        async for delta in deltas:
            if delta.content:
                if first is None:
                    first = time.monotonic() - t0
                pieces.append(delta.content)
                if echo:
                    sys.stdout.write(delta.content)
                    sys.stdout.flush()
            usage = delta.usage or usage
    elapsed = time.monotonic() - t0
    tokens = usage.completion_tokens if usage else len(pieces)
    gen_s = max(elapsed - (first or 0.0), 1e-9)
    return {
        "ttft_s": round(first or elapsed, 3),
        "tokens": tokens,
        "elapsed_s": round(elapsed, 3),
        "tok_s": round(tokens / gen_s, 1) if tokens > 1 else 0.0,
        "text": "".join(pieces),
    }


async def _demo(args: argparse.Namespace) -> int:
    settings = load_settings()
    loop = asyncio.get_running_loop()
    main_task = asyncio.current_task()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, main_task.cancel)
    async with Services(settings) as services:
        engine = await services.engine(url=args.endpoint, api_key=args.api_key, model=args.model)
        endpoint = await engine.start(progress=_say)
        client = services.chat_client(endpoint)
        n = 1
        _say(f"asking {endpoint.model} ({n} session{'s' if n > 1 else ''}): {args.prompt}")
        print("", flush=True)
        results = await asyncio.gather(
            *(_stream_one(client, args.prompt, args.max_tokens, echo=(i == 0)) for i in range(n))
        )
        print("\n", flush=True)
    total_tokens = sum(r["tokens"] for r in results)
    wall = max(r["elapsed_s"] for r in results)
    summary = {
        "model": endpoint.model,
        "sessions": len(results),
        "ttft_s": results[0]["ttft_s"],
        "tokens": total_tokens,
        "tok_s": results[0]["tok_s"],
        "aggregate_tok_s": round(total_tokens / wall, 1) if wall else 0.0,
    }
    _say(
        f"summary: {summary['sessions']} session(s), time to first token {summary['ttft_s']:.2f} s, "
        f"{summary['tokens']} tokens, {summary['tok_s']:.1f} tok/s per stream, "
        f"{summary['aggregate_tok_s']:.1f} tok/s aggregate"
    )
    print(json.dumps(summary), flush=True)
    return 0 if total_tokens > 0 else 1


async def _fleet_demo(args: argparse.Namespace) -> int:
    """The manifest demo in the terminal: N agent sessions on sample repositories, a live
    table, stopped after ``--duration`` seconds (sessions keep their state)."""
    import contextlib

    import orjson

    from workstation.fleet.demo_manifest import load_manifest, plan_sessions
    from workstation.fleet.demo_run import start_demo

    settings = load_settings()
    loop = asyncio.get_running_loop()
    main_task = asyncio.current_task()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, main_task.cancel)
    plan_sessions(load_manifest(args.manifest), args.sessions)  # a bad manifest fails before the engine starts
    t0 = time.monotonic()
    async with Services(settings) as services:  # closes the fleet, then the engine, then the client
        engine = await services.engine(url=args.endpoint, api_key=args.api_key, model=args.model)
        await engine.start(progress=_say)
        fleet = services.fleet(resume_on_start=False)
        await fleet.start()
        started = await start_demo(fleet, settings.data_dir, sessions=args.sessions, manifest=args.manifest,
                                   headless=True)
        plan = started.plan
        if started.notice():
            _say(started.notice())
        for kept in started.kept:
            _say(f"  {kept.name}: {'; '.join(kept.reasons)}")
        for folder in started.kept_folders:
            _say(f"  {folder.path}: {'; '.join(folder.reasons)}")
        _say(f"demo '{plan.manifest.name}': {len(plan.sessions)} sessions on "
             f"{len(plan.repos)} sample repositories in {plan.workdir}")
        scope = list(started.session_ids)
        table = LiveTable(sys.stdout, scope)
        drawer = asyncio.create_task(table.run(fleet, 1.0 if sys.stdout.isatty() else 10.0, t0),
                                     name="demo-table")
        try:
            async with asyncio.timeout(args.duration):
                await fleet.wait_settled()
        except TimeoutError:
            _say(f"demo duration of {args.duration:g} s reached; stopping the sessions")
            for sid in scope:
                await fleet.stop(sid)
        finally:
            drawer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await drawer
        final = [fleet.summary(sid) for sid in scope]
        wall = time.monotonic() - t0
        table.draw(final, wall, final_table=True)
        print(orjson.dumps(run_summary(final, wall)).decode(), flush=True)
    return 0 if any(s.completion_tokens for s in final) else 1


def run_summary(rows: list[SessionSummary], wall_s: float) -> dict:
    states: dict[str, int] = {}
    for r in rows:
        states[r.state.value] = states.get(r.state.value, 0) + 1
    generated = sum(r.completion_tokens for r in rows)
    return {
        "sessions": len(rows), "states": states, "wall_s": round(wall_s, 2),
        "prompt_tokens": sum(r.prompt_tokens for r in rows), "completion_tokens": generated,
        "cached_tokens": sum(r.cached_tokens for r in rows),
        "generated_tok_s": round(generated / wall_s, 1) if wall_s > 0 else 0.0,
    }


_COLOR = {
    SessionState.DONE: "32", SessionState.FAILED: "31", SessionState.RUNNING: "36",
    SessionState.AWAITING_APPROVAL: "33", SessionState.NEEDS_INPUT: "33",
    SessionState.ENGINE_WAIT: "35", SessionState.PAUSED: "2", SessionState.QUEUED: "2",
}


class LiveTable:
    """The summary table: state, tokens, tok/s per session, totals. Redrawn in place on a
    terminal; printed whole every refresh otherwise (logs stay readable)."""

    def __init__(self, out: TextIO, scope: list[str]) -> None:
        self.out = out
        self.scope = scope
        self.tty = out.isatty()
        self._lines = 0

    async def run(self, fleet, refresh_s: float, t0: float) -> None:  # type: ignore[no-untyped-def]
        ids = set(self.scope)
        while True:
            rows = [s for s in fleet.sessions() if s.session_id in ids]
            self.draw(rows, time.monotonic() - t0)
            await asyncio.sleep(refresh_s)

    def draw(self, rows: list[SessionSummary], elapsed_s: float, *, final_table: bool = False,
             errors: bool = True) -> None:
        lines = render_table(rows, elapsed_s, color=self.tty, final_table=final_table, errors=errors)
        if self.tty and self._lines:
            self.out.write(f"\x1b[{self._lines}F\x1b[J")
        self.out.write("\n".join(lines) + "\n")
        self.out.flush()
        self._lines = len(lines) if self.tty and not final_table else 0


def _fit(text: str, width: int) -> str:
    """Shorten in the middle, so names that differ only at the end (-1, -2 …) stay apart."""
    if len(text) <= width:
        return text
    tail = max(4, width // 3)
    return text[: width - tail - 1] + "…" + text[-tail:]


def render_table(rows: list[SessionSummary], elapsed_s: float, *, color: bool = False,
                 final_table: bool = False, max_rows: int = 64, errors: bool = True) -> list[str]:
    """The table; the final one ends with each failed session's error unless ``errors`` is
    False (``workstation run`` says why every session ended below it)."""
    name_w = min(max([7, *(len(r.name) for r in rows)]), 32)
    head = f"{'session':<{name_w}}  {'state':<17} {'prompt':>8} {'gen':>7} {'cached':>8} {'tok/s':>7}  endpoint"
    lines = [head, "-" * len(head)]
    shown = rows[:max_rows]
    for r in shown:
        rate = (r.completion_tokens / elapsed_s if elapsed_s > 0 else 0.0) if final_table else r.tokens_per_s
        state = f"{r.state.label:<17}"
        if color and r.state in _COLOR:
            state = f"\x1b[{_COLOR[r.state]}m{state}\x1b[0m"
        lines.append(f"{_fit(r.name, name_w):<{name_w}}  {state} {r.prompt_tokens:>8} {r.completion_tokens:>7} "
                     f"{r.cached_tokens:>8} {rate:>7.1f}  {r.endpoint_name}")
    if len(rows) > len(shown):
        lines.append(f"… and {len(rows) - len(shown)} more")
    counts: dict[str, int] = {}
    for r in rows:
        counts[r.state.label] = counts.get(r.state.label, 0) + 1
    live = sum(r.tokens_per_s for r in rows)
    gen = sum(r.completion_tokens for r in rows)
    avg = gen / elapsed_s if elapsed_s > 0 else 0.0
    lines.append("-" * len(head))
    lines.append(
        f"{len(rows)} sessions · " + " · ".join(f"{n} {k}" for k, n in sorted(counts.items()))
        + f" │ prompt {sum(r.prompt_tokens for r in rows)} · generated {gen} "
        + f"│ {('avg ' + format(avg, '.1f')) if final_table else format(live, '.1f')} tok/s │ {elapsed_s:.0f} s"
    )
    failed = [r for r in rows if r.state in (SessionState.FAILED, SessionState.ENGINE_WAIT) and r.error]
    if final_table and errors:
        for r in failed[:8]:
            lines.append(f"  {r.name}: {r.error}")
    return lines


def run_headless_demo(args: argparse.Namespace) -> int:
    """One streamed answer (the default), or the manifest's agent sessions with --sessions."""
    runner = _fleet_demo if (args.sessions or 1) > 1 or args.manifest else _demo
    try:
        return asyncio.run(runner(args))
    except asyncio.CancelledError:
        _say("interrupted; engine stopped")
        return 130
