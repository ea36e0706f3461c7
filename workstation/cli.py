"""Command line: ``workstation [VERB] …``. Without a verb it opens the window.

Verbs live in ``workstation/commands/`` (one module per group, each with
``register(subparsers)``) and are discovered here, so adding a verb touches one file.
A :class:`UserError` ends a verb with its message and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import pkgutil
import sys
from collections.abc import Sequence

from workstation import __version__
from workstation.core.errors import UserError

log = logging.getLogger("workstation")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="workstation",
        description="A tuned local vLLM server and dozens of coding agents in tiled panes.",
    )
    parser.add_argument("--version", action="version", version=f"workstation {__version__}")
    parser.add_argument(
        "--data-dir",
        metavar="DIR",
        help="where everything the app writes lives (also WORKSTATION_DATA_DIR)",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug output to stderr")
    parser.set_defaults(func=None)
    subparsers = parser.add_subparsers(dest="command", metavar="VERB")
    import workstation.commands as commands

    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda i: i.name):
        module = importlib.import_module(f"workstation.commands.{info.name}")
        register = getattr(module, "register", None)
        if register is not None:
            register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.data_dir:
        os.environ["WORKSTATION_DATA_DIR"] = os.path.abspath(os.path.expanduser(args.data_dir))
    from workstation.logging_setup import setup_logging

    try:
        setup_logging(verbose=args.verbose)
        if args.func is None:
            from workstation.app import run_gui

            return run_gui(args)
        return int(args.func(args) or 0)
    except UserError as exc:
        print(f"workstation: error: {exc.describe()}", file=sys.stderr)
        log.error("%s", exc)
        return 2
    except KeyboardInterrupt:
        print("workstation: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
