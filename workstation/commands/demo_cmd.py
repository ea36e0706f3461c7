"""``workstation demo``: the app's showcase on the embedded default.

With a display it opens the window; with ``--headless`` (or no display) it runs in
the terminal: starts the managed engine (or uses ``--endpoint``), streams a real
answer and prints a summary (time to first token, tokens/s).
"""

from __future__ import annotations

import argparse
import os

DEMO_PROMPT = "Write a short Python function is_palindrome(s) with a docstring, then one line explaining it."


def register(subparsers: argparse._SubParsersAction) -> None:
    demo = subparsers.add_parser("demo", help="run the showcase (window, or --headless in the terminal)")
    demo.add_argument("--headless", action="store_true", help="no visible window (default where there is no display)")
    demo.add_argument("--sessions", type=int, default=None,
                      help="agent sessions from the demo manifest (headless default: one streamed answer; "
                           "window default: the manifest's, 32)")
    demo.add_argument("--manifest", metavar="FILE.toml", help="demo manifest (default: the shipped one)")
    demo.add_argument("--prompt", default=DEMO_PROMPT, help="what the demo session asks")
    demo.add_argument("--max-tokens", type=int, default=200)
    demo.add_argument("--model", help="smollm2 (default), tiny, or a model directory")
    demo.add_argument("--endpoint", help="use a running OpenAI-compatible endpoint instead of the managed engine")
    demo.add_argument("--api-key", default="", help="API key for --endpoint")
    demo.add_argument("--record", metavar="OUT.mp4", help="record the window to a video file")
    demo.add_argument("--duration", type=float, default=None, help="stop after this many seconds")
    demo.add_argument("--size", default=None, help="recording size, e.g. 1280x720 (default: the manifest's)")
    demo.set_defaults(func=_demo)


def has_display() -> bool:
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def _demo(args: argparse.Namespace) -> int:
    headless = args.headless or not has_display()
    if headless and not args.record:
        from workstation.headless import run_headless_demo

        return run_headless_demo(args)
    if headless:
        # Recording needs the window: draw it offscreen (real pixels, no screen needed).
        os.environ["QT_QPA_PLATFORM"] = "offscreen"
        args.headless = True
        if args.duration is None:
            args.duration = 60.0
    from workstation.app import run_gui

    return run_gui(args)
