"""``workstation agent``: one coding agent, headless, to completion, its events printed.

::

    workstation agent --repo PATH --task "Add a test for add()" [--mode plan|act]
                      [--auto-approve all|none|read,edit,command] [--interactive]
    workstation agent … --endpoint URL --api-key KEY --model NAME   # any OpenAI-compatible server

Without ``--endpoint`` it uses the configured external endpoint or starts the managed
engine for the run. Headless by default: nobody approves, so actions outside
``--auto-approve`` are refused back to the model, and questions are answered "decide
yourself" (``--interactive`` asks on the terminal instead). Exit status 0 when the agent
finished its task, 1 when it did not (the message says why), 2 for a usage mistake.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import enum
import signal
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from workstation.core.errors import UserError

if TYPE_CHECKING:
    from workstation.core.approvals import ApprovalDecision, ApprovalRequest

DEFAULT_APPROVE = "read,edit"


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "agent", help="run one coding agent on a repository, headless, and print what it does",
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--repo", required=True, metavar="PATH", help="the folder the agent works in (its jail)")
    p.add_argument("--task", required=True, help="what the agent should do")
    p.add_argument("--mode", choices=["plan", "act"], default="act", help="plan: read and search only (default act)")
    p.add_argument("--auto-approve", default=DEFAULT_APPROVE, metavar="WHAT",
                   help=f"categories that run without asking: all, none, or read,edit,command "
                        f"(default {DEFAULT_APPROVE}); deny-listed commands always ask")
    p.add_argument("--interactive", action="store_true",
                   help="ask approvals and questions on the terminal instead of refusing them")
    ctx = p.add_argument_group("context")
    ctx.add_argument("--rules", action="append", default=[], metavar="FILE",
                     help="a further rules file to follow (repeatable); the repository's AGENTS.md, "
                          "CLAUDE.md and .clinerules are read from its root down to --repo by themselves")
    ctx.add_argument("--no-rules", action="store_true", help="do not read the repository's rules files")
    ctx.add_argument("--image", action="append", default=[], metavar="PATH",
                     help="an image (PNG, JPEG, GIF, WebP) that goes with the task (repeatable); only "
                          "for a model that takes images, else refused with the reason")
    ctx.add_argument("--adapter", metavar="NAME[=PATH]",
                     help="a LoRA adapter the engine serves (requests name it as the model); with =PATH "
                          "it is loaded from that folder at run time where the engine does not serve it yet")
    ctx.add_argument("--mcp-config", metavar="FILE",
                     help='MCP servers whose tools the agent gets, as mcp__<server>__<tool>: the usual '
                          '{"mcpServers": {"NAME": {"command": …, "args": […], "env": {…}} | {"url": …}}} '
                          "JSON (besides settings agent.mcp_config); stdio servers run in the sandbox")
    eng = p.add_argument_group("endpoint (default: the managed engine)")
    eng.add_argument("--endpoint", metavar="URL", help="an OpenAI-compatible server, e.g. http://127.0.0.1:8000")
    eng.add_argument("--api-key", default="", metavar="KEY")
    eng.add_argument("--model", metavar="NAME", help="model to ask for (default: the endpoint's first)")
    tune = p.add_argument_group("limits")
    tune.add_argument("--protocol", choices=["auto", "native", "tool-only", "text"], default="auto",
                      help="tool-call protocol (default auto: chosen from the endpoint and model)")
    tune.add_argument("--max-turns", type=int, default=30, metavar="N", help="model turns before giving up (30)")
    tune.add_argument("--max-tokens", type=int, default=1536, metavar="N", help="tokens per model turn (1536)")
    tune.add_argument("--temperature", type=float, default=None, metavar="T")
    tune.add_argument("--context-window", type=int, default=None, metavar="TOKENS",
                      help="override the model's context length (default: what the server reports)")
    tune.add_argument("--command-timeout", type=float, default=120.0, metavar="S")
    tune.add_argument("--session", default=None, metavar="ID", help="session id (names the checkpoint ref)")
    p.add_argument("--json", action="store_true", help="print every event as a JSON line instead of text")
    p.set_defaults(func=_main)


def _jsonable(value: Any) -> Any:
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    return value


def event_json(event: Any) -> str:
    body = {f.name: _jsonable(getattr(event, f.name)) for f in dataclasses.fields(event)}
    return orjson.dumps({"event": type(event).__name__, **body}).decode()


class _Printer:
    """Prints events readably: streamed text inline, everything else one line each."""

    def __init__(self, as_json: bool) -> None:
        self.as_json = as_json
        self.mid_line = False

    def _end_stream(self) -> None:
        if self.mid_line:
            sys.stdout.write("\n")
            self.mid_line = False

    def __call__(self, event: Any) -> None:
        from workstation.agent.transcript import render_line
        from workstation.core import agent_events as ev

        if self.as_json:
            if not isinstance(event, (ev.MessageAppended, ev.HistoryReplaced)):
                print(event_json(event), flush=True)
            return
        if isinstance(event, ev.TextStreamed):
            sys.stdout.write(event.text)
            sys.stdout.flush()
            self.mid_line = not event.text.endswith("\n")
            return
        if isinstance(event, ev.CommandOutputStreamed):
            self._end_stream()
            sys.stdout.write("  │ " + event.text.rstrip("\n").replace("\n", "\n  │ ") + "\n")
            sys.stdout.flush()
            return
        if isinstance(event, ev.TurnStarted):
            self._end_stream()
            print(f"── turn {event.turn}", flush=True)
            return
        line = render_line(event)
        if line is not None:
            self._end_stream()
            print(line, flush=True)


async def _terminal_approver(request: ApprovalRequest) -> ApprovalDecision:
    from workstation.agent.tool_specs import SPECS_BY_NAME
    from workstation.core.approvals import ApprovalDecision

    loop = asyncio.get_running_loop()
    prompt = f"\napprove {request.summary}? ({request.reason}) [y]es / [n]o / [e]dit: "
    answer = (await loop.run_in_executor(None, input, prompt)).strip().lower()
    if answer.startswith("y"):
        return ApprovalDecision.approve()
    spec = SPECS_BY_NAME.get(request.tool)
    subject = spec.approval_subject if spec is not None else ""  # what the rules read: a command line
    if answer.startswith("e") and subject:
        value = await loop.run_in_executor(None, input, f"{subject}: ")
        return ApprovalDecision.edit({**request.arguments, subject: value})
    feedback = await loop.run_in_executor(None, input, "why not (told to the agent): ")
    return ApprovalDecision.deny(feedback.strip())


async def _run(args: argparse.Namespace) -> int:
    from workstation.agent import Agent, AgentConfig, ProtocolChoice
    from workstation.agent.images import load_images
    from workstation.agent.images import refusal as images_refusal
    from workstation.agent.model_info import fetch_context_window, model_takes_images
    from workstation.agent.sandbox_status import sandbox_status
    from workstation.config import load_settings
    from workstation.core.agent_events import AgentMode, RunStatus
    from workstation.core.approvals import ApprovalPolicy
    from workstation.engine.lora import ensure_adapter, parse_adapter
    from workstation.services import Services

    repo = Path(args.repo).expanduser()
    if not repo.is_dir():
        raise UserError(f"--repo {args.repo} is not a folder")
    if not args.task.strip():
        raise UserError("--task is empty")
    try:
        policy = ApprovalPolicy.parse(args.auto_approve)
    except ValueError as exc:
        raise UserError(f"--auto-approve: {exc}") from None
    interactive = bool(args.interactive)
    if interactive and not sys.stdin.isatty():
        raise UserError("--interactive needs a terminal on standard input")
    rules_files = []
    for name in args.rules:
        path = Path(name).expanduser()
        if not path.is_file():
            raise UserError(f"--rules {name}: no such file")
        rules_files.append(str(path.resolve()))
    settings = load_settings()
    mcp_servers = session_mcp_servers(settings, args.mcp_config)
    images = load_images(args.image)
    adapter, adapter_path = parse_adapter(args.adapter)
    say = (lambda m: print(m, file=sys.stderr, flush=True))
    printer = _Printer(args.json)
    async with Services(settings) as services:
        engine = await services.engine(url=args.endpoint, api_key=args.api_key, model=args.model)
        endpoint = await engine.start(progress=say)
        http = services.http
        if adapter:
            await ensure_adapter(http, endpoint, adapter, adapter_path)
        window = args.context_window or await fetch_context_window(http, endpoint) or 8192
        takes_images = await model_takes_images(http, endpoint, settings)
        if images and takes_images is not True:
            raise UserError(images_refusal(endpoint.model, takes_images))
        config = AgentConfig(
            mode=AgentMode(args.mode), protocol=ProtocolChoice(args.protocol.replace("-", "_")),
            approval=policy, user_present=interactive, temperature=args.temperature,
            max_tokens_per_turn=min(args.max_tokens, max(256, window // 2)), context_window_tokens=window,
            max_turns=args.max_turns, command_timeout_s=args.command_timeout,
            sandbox=services.sandbox_policy(), rules=settings.agent.rules and not args.no_rules,
            rules_files=tuple(rules_files), rules_root=str(worktree_root(repo)), mcp_servers=mcp_servers,
            rules_max_chars=settings.agent.rules_max_chars, takes_images=takes_images,
        )
        session = args.session or f"cli-{time.strftime('%Y%m%d-%H%M%S')}"
        agent = Agent(session, repo, args.task, services.chat_client(endpoint, model=adapter), config,
                      on_event=printer, approver=_terminal_approver if interactive else None, task_images=images)
        sandbox = await sandbox_status(config.sandbox)
        if not sandbox.confined:
            say(f"note: {sandbox.summary()}" + (f"; to confine them: {sandbox.fix}" if sandbox.fix else ""))
        if not args.json:
            say(f"agent {session} on {endpoint.model}{f' with the adapter {adapter}' if adapter else ''} at "
                f"{endpoint.base_url} in {agent.root} "
                f"({args.mode} mode, {policy.describe()}, context {window:,} tokens)")
            if agent.checkpoints is not None and not await agent.checkpoints.available():
                say("note: not a git repository, so no checkpoints")
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, agent.stop)
        try:
            outcome = await agent.run()
            while interactive and outcome.status is RunStatus.NEEDS_INPUT:
                text = await loop.run_in_executor(None, input, "\nyour answer: ")
                agent.reply(text)
                outcome = await agent.run()
        finally:
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)
    printer._end_stream()
    if outcome.status is RunStatus.COMPLETED:
        return 0
    detail = outcome.question and f" (question: {outcome.question})"
    print(f"workstation: the agent did not finish: {outcome.status.value}: {outcome.message}{detail or ''}",
          file=sys.stderr, flush=True)
    return 130 if outcome.status is RunStatus.STOPPED else 1


def session_mcp_servers(settings: Any, path: str | None) -> tuple:
    """The app's MCP servers (settings) with those of ``--mcp-config`` over them."""
    from workstation.agent.mcp_servers import load_servers, merge_servers

    app = load_servers(settings.agent.mcp_config) if settings.agent.mcp_config else ()
    return merge_servers(app, load_servers(path) if path else ())


def worktree_root(folder: Path) -> Path:
    """The root of the git worktree ``folder`` lies in (where rules files are looked for
    from), or ``folder`` itself outside git."""
    import subprocess

    try:
        out = subprocess.run(["git", "-C", str(folder), "rev-parse", "--show-toplevel"], capture_output=True,
                             text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return folder.resolve()
    top = out.stdout.strip()
    return Path(top).resolve() if out.returncode == 0 and top else folder.resolve()


def _main(args: argparse.Namespace) -> int:
    return asyncio.run(_run(args))
