"""``workstation run``: a headless fleet run to completion, with a live summary table.

::

    workstation run --repo PATH --sessions 32 --task "Add type hints to utils.py"
    workstation run --tasks fleet.toml                      # tasks and repositories from TOML
    workstation run --resume                                # continue what a killed run left
    workstation run … --endpoint URL --api-key KEY --model NAME   # any OpenAI-compatible server
    workstation --data-dir DIR run …                        # an isolated store and worktrees

Without ``--endpoint`` it starts the managed engine for the run and stops it after. Sessions
are headless: nobody approves, so actions outside ``--auto-approve`` are refused back to the
model, and questions are answered "decide yourself". It ends with why each session ended, its
branch and what it changed, and what the exit status means: 0 when every session of the run
finished its task, 1 when any failed, stopped or gave up, 2 for a usage mistake.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import signal
import sys
import time
from pathlib import Path

import orjson

from workstation.core.errors import UserError
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
    agent.add_argument("--rules", action="append", default=[], metavar="FILE",
                       help="a further rules file every session follows (repeatable); each "
                            "repository's AGENTS.md, CLAUDE.md and .clinerules are read by themselves")
    agent.add_argument("--no-rules", action="store_true", help="do not read the repositories' rules files")
    agent.add_argument("--image", action="append", default=[], metavar="PATH",
                       help="an image that goes with --task (repeatable); only for a model that takes images")
    agent.add_argument("--adapter", metavar="NAME[=PATH]",
                       help="the LoRA adapter of every session (a task file's adapter = wins); =PATH loads "
                            "it from that folder at run time")
    agent.add_argument("--mcp-config", metavar="FILE",
                       help='MCP servers every session gets (the usual {"mcpServers": …} JSON); a task '
                            "file's own mcp_config / mcp_servers win by name")
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
    from workstation.agent.images import load_images
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
            images=tuple(str(Path(i).expanduser().resolve()) for i in args.image),
        )
        load_images(spec.images)  # checked before anything starts
        entries = [TaskEntry(spec, args.sessions)]
    extra_rules = []
    for name in args.rules:
        path = Path(name).expanduser()
        if not path.is_file():
            raise UserError(f"--rules {name}: no such file")
        extra_rules.append(str(path.resolve()))
    if args.adapter:
        from workstation.engine.lora import parse_adapter

        name, path = parse_adapter(args.adapter)
        entries = [TaskEntry(e.spec if e.spec.adapter else dataclasses.replace(e.spec, adapter=name, adapter_path=path),
                             e.count) for e in entries]
    if args.mcp_config:
        from workstation.agent.mcp_servers import load_servers, merge_servers, servers_from_json, servers_json

        common = load_servers(args.mcp_config)
        entries = [TaskEntry(dataclasses.replace(e.spec, mcp_servers=servers_json(merge_servers(
            common, servers_from_json(e.spec.mcp_servers)))), e.count) for e in entries]
    if extra_rules or args.no_rules:
        entries = [TaskEntry(dataclasses.replace(
            e.spec, rules=e.spec.rules and not args.no_rules,
            rules_files=(*e.spec.rules_files, *extra_rules)), e.count) for e in entries]
    if args.max_steps is not None or args.temperature is not None:
        entries = [TaskEntry(dataclasses.replace(
            e.spec, max_steps=args.max_steps or e.spec.max_steps,
            temperature=args.temperature if args.temperature is not None else e.spec.temperature),
            e.count) for e in entries]
    return entries


async def _external_endpoints(args: argparse.Namespace) -> list:  # type: ignore[type-arg]
    from workstation.engine.acquire import external_endpoint

    eps = []
    for i, url in enumerate(args.endpoint, 1):
        ep = await external_endpoint(url, args.api_key, args.model)
        name = "external" if len(args.endpoint) == 1 else f"external-{i}"
        eps.append(dataclasses.replace(ep, name=name))
    return eps


def _tokens_by_model(fleet, rows: list, endpoints: list) -> dict:  # type: ignore[no-untyped-def]
    """Tokens per model the sessions' requests named: each LoRA adapter apart from its base."""
    models = {e.name: e.model for e in endpoints}
    out: dict[str, dict[str, int]] = {}
    for row in rows:
        adapter = fleet.record(row.session_id).spec.adapter
        name = adapter or models.get(row.endpoint_name, row.endpoint_name)
        entry = out.setdefault(name, {"sessions": 0, "prompt_tokens": 0, "completion_tokens": 0})
        entry["sessions"] += 1
        entry["prompt_tokens"] += row.prompt_tokens
        entry["completion_tokens"] += row.completion_tokens
    return out


async def _check_images(entries: list, endpoints: list, http, settings) -> None:  # type: ignore[no-untyped-def]
    """Images go only to models that take them: refuse the run before any session is made."""
    if not any(e.spec.images for e in entries):
        return
    from workstation.agent.images import refusal
    from workstation.agent.model_info import model_takes_images

    for endpoint in endpoints:
        takes = await model_takes_images(http, endpoint, settings)
        if takes is not True:
            raise UserError(refusal(endpoint.model, takes))


async def _main(args: argparse.Namespace) -> int:
    from workstation.commands.run_report import EndReasons, exit_meaning, render_endings, session_details
    from workstation.config import load_settings
    from workstation.headless import LiveTable, run_summary
    from workstation.services import Services

    entries = _specs(args)  # usage mistakes before anything starts
    settings = load_settings()
    loop = asyncio.get_running_loop()
    main = asyncio.current_task()
    assert main is not None
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, main.cancel)
    t0 = time.monotonic()
    async with Services(settings) as services:  # closes the fleet, then the engine, then the client
        if args.endpoint:
            endpoints = await _external_endpoints(args)
        else:
            say = lambda msg: print(f"engine: {msg}", file=sys.stderr, flush=True)  # noqa: E731
            endpoints = [await (await services.engine(model=args.model)).start(progress=say)]
        await _check_images(entries, endpoints, services.http, settings)
        if args.endpoint:
            fleet = services.fleet(endpoints=endpoints, max_generating=args.max_generating,
                                   resume_on_start=args.resume)
        else:  # on the live engine, followed if it restarts
            fleet = services.fleet(max_generating=args.max_generating, resume_on_start=args.resume)
        await fleet.start()
        reasons = EndReasons(fleet)
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
                for sid in scope:  # a session whose setup failed waits (its pane says why)
                    if fleet.summary(sid).state is SessionState.READY:
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
        table.draw(final, wall, final_table=True, errors=False)
        details = await session_details(fleet, final, reasons)
        reasons.close()
        code = 0 if final and all(s.state is SessionState.DONE for s in final) else 1
        print("\n".join(["", *render_endings(details), exit_meaning(code, details)]))
        if args.json:
            summary = run_summary(final, wall)
            summary["tokens_by_model"] = _tokens_by_model(fleet, final, endpoints)
            summary["sessions_detail"] = details
            print(orjson.dumps(summary).decode())
        return code
