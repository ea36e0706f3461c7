"""``workstation ready`` and ``workstation merge``: the merge queue from the command line.

::

    workstation ready NAME …            # commit its work, mark it ready (in the store)
    workstation ready --undo NAME …     # take the mark back
    workstation merge --into main --gate "pytest -q" [--rebase] [--json] [NAME …]

``merge`` takes the named sessions in that order (each must be marked ready), or every
ready session in the order they were marked. It merges each onto ``--into`` in a temporary
worktree, runs the gate there inside the sandbox, stops at the first conflict or red gate,
and moves ``--into`` only when every session merged and passed. With ``--json`` it ends
with one JSON line: ``merged``, ``stopped_at``, ``reason`` (and ``kind``, ``into``,
``commit``, ``passed``, ``skipped``, ``conflicts``, ``gate_exit``). Exit status 0 when all
landed, 1 when the queue stopped, 2 for a usage mistake. Both verbs work on the store of
``--data-dir`` beside a running window.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator
from typing import Any

import orjson

from workstation.core.errors import UserError


def register(subparsers: argparse._SubParsersAction) -> None:
    doc = __doc__.split("\n\n")[0]
    r = subparsers.add_parser("ready", help="mark sessions' work ready for the merge queue (commits it)",
                              description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    r.add_argument("sessions", nargs="+", metavar="SESSION", help="session name or id")
    r.add_argument("--undo", action="store_true", help="take the ready mark back")
    r.add_argument("--message", "-m", help="commit message for uncommitted work (default: name and task)")
    r.set_defaults(func=_ready)
    m = subparsers.add_parser("merge", help="merge ready sessions onto a branch, gated by the test command",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    m.add_argument("sessions", nargs="*", metavar="SESSION",
                   help="sessions in the order to merge (default: every ready one, in the order marked)")
    m.add_argument("--into", required=True, metavar="BRANCH", help="the target branch")
    m.add_argument("--gate", required=True, metavar="CMD", help="the repository's test command, run after each merge")
    m.add_argument("--rebase", action="store_true", help="replay each session's commits instead of a merge commit")
    m.add_argument("--gate-timeout-s", type=float, default=1800.0, metavar="S")
    m.add_argument("--quiet", "-q", action="store_true", help="do not echo the gate's output")
    m.add_argument("--json", action="store_true", help="end with one JSON line")
    m.set_defaults(func=_merge)


@contextlib.asynccontextmanager
async def _stored_fleet() -> AsyncIterator[tuple[Any, Any, Any]]:
    """``(settings, store, git)`` of the data dir: the stored sessions, without a fleet (a
    window may be running on the same store)."""
    from workstation.config import load_settings
    from workstation.fleet.gitproc import GitRunner
    from workstation.fleet.store import Store

    settings = load_settings()
    store = Store(settings.store_path)
    await store.start()
    git = GitRunner()
    try:
        yield settings, store, git
    finally:
        await git.aclose()
        await store.aclose()


def _ready(args: argparse.Namespace) -> int:
    return asyncio.run(_ready_main(args))


async def _ready_main(args: argparse.Namespace) -> int:
    import time

    from workstation.fleet.merge_queue import commit_for_ready

    async with _stored_fleet() as (settings, store, git):
        records = {r.name: r for r in await store.load_sessions()}
        records |= {r.session_id: r for r in records.values()}
        missing = [n for n in args.sessions if n not in records]
        if missing:
            raise UserError(f"no session named {', '.join(missing)}", hint=f"store: {settings.store_path}")
        for name in args.sessions:
            rec = records[name]
            if args.undo:
                await store.update_session(rec.session_id, ready_at=0.0)
                print(f"{rec.name}: not ready")
                continue
            if rec.state.is_active:
                raise UserError(f"{rec.name} is still working ({rec.state.label}); pause or stop it first")
            commit = await commit_for_ready(git, rec, args.message)
            await store.update_session(rec.session_id, ready_at=time.time())
            print(f"{rec.name}: ready" + (f" (committed {commit[:10]} on {rec.branch})" if commit else ""))
    return 0


def _merge(args: argparse.Namespace) -> int:
    return asyncio.run(_merge_main(args))


async def _merge_main(args: argparse.Namespace) -> int:
    from workstation.agent.sandbox import SandboxPolicy
    from workstation.fleet.merge_queue import QueueEvent, item_of, pick_ready, run_queue

    def show(e: QueueEvent) -> None:
        if e.kind == "output":
            if not args.quiet:
                sys.stderr.write(e.text)
                sys.stderr.flush()
            return
        if e.kind == "gate_done":
            return
        who = f"{e.session}: " if e.session else ""
        text = {"merged": f"merged as {e.text[:10]}", "gate": f"gate: {e.text}"}.get(e.kind, e.text)
        print(f"merge queue: {who}{text}", file=sys.stderr, flush=True)

    async with _stored_fleet() as (settings, store, git):
        chosen = pick_ready(await store.load_sessions(), args.sessions)
        report = await run_queue(
            git, [item_of(r) for r in chosen], into=args.into, gate=args.gate, data_dir=settings.data_dir,
            sandbox=SandboxPolicy.from_settings(settings), rebase=args.rebase, attended=True,
            gate_timeout_s=args.gate_timeout_s, on_event=show)
        by_name = {r.name: r for r in chosen}
        for name in report.merged:
            await store.update_session(by_name[name].session_id, ready_at=0.0)
    if report.ok:
        print(f"merged {len(report.merged)} session(s) into {report.into}: {', '.join(report.merged) or 'none'}"
              + (f" (skipped, nothing new: {', '.join(report.skipped)})" if report.skipped else ""))
    else:
        print(f"stopped{' at ' + report.stopped_at if report.stopped_at else ''}: {report.reason}; "
              f"{report.into} is unchanged" + (f" (passed before the stop: {', '.join(report.passed)})"
                                               if report.passed else ""))
        if report.gate_output.strip() and args.quiet:
            print(report.gate_output.rstrip()[-4000:])
    if args.json:
        print(orjson.dumps(report.to_json()).decode())
    return 0 if report.ok else 1
