"""``workstation run``: a headless fleet run to completion, with a live summary table.

::

    workstation run --repo PATH --sessions 32 --task "Add type hints to utils.py"
    workstation run --tasks fleet.toml                      # tasks and repositories from TOML
    workstation run --resume                                # continue what a killed run left
    workstation run … --endpoint URL --api-key KEY --model NAME   # any OpenAI-compatible server
    workstation --data-dir DIR run …                        # an isolated store and worktrees

Without ``--endpoint`` it starts the managed engine for the run and stops it after. Sessions
are headless: nobody approves, so actions outside ``--auto-approve`` are refused back to the
model, and questions are answered "decide yourself". Exit status 0 when every session of the
run finished its task, 1 when any failed, stopped or gave up, 2 for a usage mistake.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import signal
import sys
import time
from typing import TextIO

import orjson

from workstation.core.errors import UserError
from workstation.core.fleet_events import SessionSummary
from workstation.core.session_state import SessionState

DEFAULT_APPROVE = "read,edit"


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "run", help="run a fleet of agent sessions headless, to completion, with a live table",
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    src = p.add_argument_group("what to run")
    src.add_argument("--repo", metavar="PATH_OR_URL", help="repository for --task (a local folder; a URL with --clone)")
    src.add_argument("--task", help="what each session should do")
    src.add_argument("--sessions", type=int, default=1, metavar="N", help="run --task N times (default 1)")
    src.add_argument("--tasks", metavar="FILE.toml", help="tasks and repositories from a TOML file")
    src.add_argument("--resume", action="store_true",
                     help="continue the unfinished sessions in the store (after a crash or Ctrl-C)")
    src.add_argument("--base", metavar="BRANCH", help="branch to start from (default: the checked-out one)")
    src.add_argument("--name", metavar="NAME", help="session name (branch ws/NAME; -1, -2 … with --sessions)")
    src.add_argument("--clone", action="store_true", help="--repo is a URL or path to clone first")
    src.add_argument("--init", action="store_true", help="--repo may be a plain folder: git init it first")
    agent = p.add_argument_group("agents")
    agent.add_argument("--mode", choices=("act", "plan"), default="act")
    agent.add_argument("--auto-approve", default=DEFAULT_APPROVE, metavar="CATS",
                       help=f"categories run without asking: all | none | read,edit,command,other "
                            f"(default {DEFAULT_APPROVE}); the rest is refused (nobody can approve)")
    agent.add_argument("--max-steps", type=int, metavar="N", help="model turns per session run")
    agent.add_argument("--temperature", type=float)
    agent.add_argument("--max-generating", type=int, metavar="N",
                       help="sessions generating at once (default: settings, 32)")
    eng = p.add_argument_group("engine")
    eng.add_argument("--endpoint", action="append", metavar="URL",
                     help="OpenAI-compatible endpoint (repeat for several); default: the managed engine")
    eng.add_argument("--api-key", default="", help="API key for --endpoint")
    eng.add_argument("--model", help="model name at --endpoint (default: the first it serves), "
                                     "or the managed engine's model")
    out = p.add_argument_group("output")
    out.add_argument("--data-dir", metavar="DIR", default=argparse.SUPPRESS,
                     help="where the store and worktrees live (same as the global --data-dir)")
    out.add_argument("--refresh-s", type=float, default=None,
                     help="seconds between table redraws (default 1 on a terminal, 15 otherwise)")
    out.add_argument("--json", action="store_true", help="end with one JSON line summarising the run")
    out.add_argument("--timeout-s", type=float, default=None, help="give up (status 1) after this long")
    p.set_defaults(func=run_command)


def run_command(args: argparse.Namespace) -> int:
    if getattr(args, "data_dir", None):
        import os

        os.environ["WORKSTATION_DATA_DIR"] = os.path.abspath(os.path.expanduser(args.data_dir))
    return asyncio.run(_main(args))


def _specs(args: argparse.Namespace) -> list:  # list[TaskEntry]
    from workstation.core.approvals import ApprovalPolicy
    from workstation.fleet.session import SessionSpec
    from workstation.fleet.taskfile import TaskEntry, load_taskfile

    if args.resume:
        if args.task or args.tasks:
            raise UserError("--resume continues the stored sessions; it takes no --task or --tasks")
        return []
    if bool(args.task) == bool(args.tasks):
        raise UserError("say what to run: --task \"…\" with --repo, or --tasks FILE.toml (or --resume)")
    if args.tasks:
        entries = load_taskfile(args.tasks)
    else:
        if not args.repo:
            raise UserError("--task needs --repo PATH (the repository the sessions work in)")
        if args.sessions < 1:
            raise UserError("--sessions must be at least 1")
        try:
            ApprovalPolicy.parse(args.auto_approve)
        except ValueError as exc:
            raise UserError(str(exc)) from None
        spec = SessionSpec(
            task=args.task, repo=args.repo, name=args.name, base_branch=args.base, clone=args.clone,
            init_if_plain=args.init, mode=args.mode,
            auto_approve=tuple(a for a in args.auto_approve.replace(",", " ").split()),
            headless=True, max_steps=args.max_steps, temperature=args.temperature,
        )
        entries = [TaskEntry(spec, args.sessions)]
    if args.max_steps is not None or args.temperature is not None:
        entries = [TaskEntry(dataclasses.replace(
            e.spec, max_steps=args.max_steps or e.spec.max_steps,
            temperature=args.temperature if args.temperature is not None else e.spec.temperature),
            e.count) for e in entries]
    return entries


async def _endpoints(args: argparse.Namespace, stack: contextlib.AsyncExitStack, settings) -> list:  # type: ignore[no-untyped-def]
    from workstation.engine.acquire import engine_endpoint, external_endpoint

    if args.endpoint:
        eps = []
        for i, url in enumerate(args.endpoint, 1):
            ep = await external_endpoint(url, args.api_key, args.model)
            name = "external" if len(args.endpoint) == 1 else f"external-{i}"
            eps.append(dataclasses.replace(ep, name=name))
        return eps
    say = lambda msg: print(f"engine: {msg}", file=sys.stderr, flush=True)  # noqa: E731
    return [await stack.enter_async_context(engine_endpoint(settings, model=args.model, progress=say))]


async def _main(args: argparse.Namespace) -> int:
    from workstation.config import load_settings
    from workstation.engine.http import make_http_client
    from workstation.fleet import Fleet, real_agent_factory

    entries = _specs(args)  # usage mistakes before anything starts
    settings = load_settings()
    loop = asyncio.get_running_loop()
    main = asyncio.current_task()
    assert main is not None
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, main.cancel)
    t0 = time.monotonic()
    async with contextlib.AsyncExitStack() as stack:
        endpoints = await _endpoints(args, stack, settings)
        http = await stack.enter_async_context(make_http_client())
        fleet = Fleet(
            data_dir=settings.data_dir, endpoints=endpoints, agent_factory=real_agent_factory.from_settings(http, settings),
            http=http, max_generating=args.max_generating or settings.fleet.max_generating,
            resume_on_start=args.resume,
        )
        await fleet.start()
        stack.push_async_callback(fleet.aclose)
        scope: list[str] = []
        try:
            if args.resume:
                for s in fleet.sessions():
                    if s.state in (SessionState.PAUSED, SessionState.READY):
                        await fleet.start_session(s.session_id)
                scope = [s.session_id for s in fleet.sessions() if s.state.is_active]
                if not scope:
                    raise UserError("nothing to resume: every stored session has finished",
                                    hint=f"store: {settings.data_dir}")
            else:
                for entry in entries:
                    made = await fleet.create_sessions(entry.spec, entry.count)
                    scope += [s.session_id for s in made]
                for sid in scope:
                    await fleet.start_session(sid)
            refresh = args.refresh_s or (1.0 if sys.stdout.isatty() else 15.0)
            table = LiveTable(sys.stdout, scope)
            drawer = asyncio.create_task(table.run(fleet, refresh, t0), name="run-table")
            try:
                async with asyncio.timeout(args.timeout_s):
                    await fleet.wait_settled()
            except TimeoutError:
                print(f"workstation: run timed out after {args.timeout_s:g} s; sessions keep their "
                      "state (continue with --resume)", file=sys.stderr)
            finally:
                drawer.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await drawer
        except asyncio.CancelledError:
            print("\nworkstation: interrupted; sessions keep their state (continue with --resume)",
                  file=sys.stderr)
            return 130
        final = [fleet.summary(sid) for sid in scope if sid in {s.session_id for s in fleet.sessions()}]
        wall = time.monotonic() - t0
        table.draw(final, wall, final_table=True)
        if args.json:
            print(orjson.dumps(run_summary(final, wall)).decode())
        ok = final and all(s.state is SessionState.DONE for s in final)
        return 0 if ok else 1


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

    def draw(self, rows: list[SessionSummary], elapsed_s: float, *, final_table: bool = False) -> None:
        lines = render_table(rows, elapsed_s, color=self.tty, final_table=final_table)
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
                 final_table: bool = False, max_rows: int = 64) -> list[str]:
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
    if final_table:
        for r in failed[:8]:
            lines.append(f"  {r.name}: {r.error}")
    return lines
