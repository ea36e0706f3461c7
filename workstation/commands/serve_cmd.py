"""``workstation serve SESSION``: a stored session's dev server, in the foreground.

::

    workstation serve fix-login            # its repository's `run` command, until Ctrl-C
    workstation serve fix-login --for-s 60 --json

The server runs as the pane's button runs it (``fleet/dev_server.py``): inside the sandbox,
on the session's own ports (``WORKSTATION_PORT`` …, ``PORT``), reached at the URL it prints.
Its output goes to standard output. Exit status 0 when it was stopped (Ctrl-C, ``--for-s``),
else the server's own (1 when it was killed), 2 for a usage mistake. With ``--json`` it ends
with one JSON line: ``session``, ``url``, ``ports``, ``sandboxed``, ``bridged``, ``exit_code``,
``stopped``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys

import orjson

from workstation.core.errors import UserError


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("serve", help="run a session's dev server in the foreground, on its own ports",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("session", metavar="SESSION", help="session name or id")
    p.add_argument("--for-s", type=float, default=None, metavar="S", help="stop it after this many seconds")
    p.add_argument("--json", action="store_true", help="end with one JSON line")
    p.set_defaults(func=lambda args: asyncio.run(_serve(args)))


async def _serve(args: argparse.Namespace) -> int:
    from pathlib import Path

    from workstation.agent.sandbox import SandboxPolicy
    from workstation.config import load_settings
    from workstation.fleet.bootstrap import BootstrapOptions
    from workstation.fleet.dev_server import DevServer
    from workstation.fleet.ports import PortBook
    from workstation.fleet.store import Store

    settings = load_settings()
    store = Store(settings.store_path)
    await store.start()
    try:
        rec = next((r for r in await store.load_sessions() if args.session in (r.name, r.session_id)), None)
        if rec is None:
            raise UserError(f"no session named {args.session}", hint=f"store: {settings.store_path}")
        command = (rec.spec.run_command or "").strip()
        if not command:
            raise UserError(f"{rec.name} has no dev server",
                            hint="set `run` for its repository (settings' repos, or run = \"…\" in the task file)")
        if not Path(rec.worktree_path).is_dir():
            raise UserError(f"the worktree of {rec.name} is gone ({rec.worktree_path})")
        book = PortBook(store, BootstrapOptions.from_settings(settings).port_range)
        await book.load()
        block = book.get(rec.session_id) or await book.allocate(
            rec.session_id, rec.spec.ports or settings.fleet.ports_per_session)
    finally:
        await store.aclose()

    def out(text: str) -> None:
        sys.stdout.write(text)
        sys.stdout.flush()

    server = await DevServer.launch(rec.session_id, command, rec.worktree_path, block,
                                    sandbox=SandboxPolicy.from_settings(settings), attended=True, on_output=out)
    st = server.status
    how = "bridged to its sandbox" if st.bridged else ("in the sandbox" if st.sandboxed else "unconfined")
    print(f"serving {rec.name} at {st.url} ({how}, ports {block.describe()}); Ctrl-C stops it",
          file=sys.stderr, flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    run = asyncio.create_task(server.run(), name=f"serve-{rec.name}")
    waiter = asyncio.create_task(stop.wait(), name="serve-stop")
    try:
        await asyncio.wait({run, waiter}, timeout=args.for_s, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopped = not run.done()
        if stopped:
            server.stopping = True
            await server.stop()
        waiter.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await waiter
        code = await run if not run.cancelled() else None
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
    print(f"dev server of {rec.name} " + ("stopped" if stopped else f"exited with status {code}"),
          file=sys.stderr, flush=True)
    if args.json:
        print(orjson.dumps({"session": rec.name, "url": st.url, "ports": list(block.ports), "sandboxed": st.sandboxed,
                            "bridged": st.bridged, "exit_code": code, "stopped": stopped}).decode(), flush=True)
    if stopped:
        return 0
    return 1 if code is None or code < 0 else code
