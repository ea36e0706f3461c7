"""Screenshots of the main views from a real run: the demo manifest's agent sessions on the
real engine, drawn by the real window.

    python docs/screenshots/make.py [--sessions 32] [--seconds 90] [--endpoint URL --api-key KEY]

The app is built by its own composition root (``workstation.app.Application``, what
``workstation demo`` opens) in a fresh data folder — the prepared engine and models are linked
in, so no earlier session shows up — with the managed engine (or ``--endpoint``, a running
OpenAI-compatible server). The sessions work for ``--seconds`` after the engine serves; then
each view is grabbed at 1920x1080 (offscreen, the window's own pixels) in both themes, and
``captions.json`` records what the pictures show: the model, the engine's version, the machine,
the sessions' states and token totals at the moment of the grid shot. The README's captions
are written from that file.

Nothing is scripted: what the panes show is what the model did.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

MODEL_NAMES = {"smollm2": "SmolLM2-135M-Instruct (Q4_1 GGUF)", "tiny": "a tiny random-weight test model"}


def machine() -> str:
    """The machine in words: cores, CPU, memory, GPU (what a reader needs to weigh the figures)."""
    from workstation.tuning.results import describe_hardware

    hw = describe_hardware()
    return f"{hw['cpu_count']} cores ({hw['cpu']}), {hw['memory_gib']:.0f} GiB, {', '.join(hw['gpus']) or 'no GPU'}"


def fresh_data_dir(real_data_dir: Path, prefix: str) -> Path:
    """A new data folder with the prepared engine and models of ``real_data_dir`` linked in:
    no earlier session, setting or recording of the user's shows up (the recording's script
    uses it too)."""
    data = Path(tempfile.mkdtemp(prefix=prefix))
    for part in ("engine", "models"):
        if (real_data_dir / part).exists():
            (data / part).symlink_to(real_data_dir / part)
    return data


def fresh_settings(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    from workstation.config import load_settings

    real = load_settings()
    data = fresh_data_dir(real.data_dir, "workstation-shots-")
    engine = real.engine.model_copy(update={"model": args.model})
    if args.endpoint:
        engine = engine.model_copy(update={"external_url": args.endpoint, "external_api_key": args.api_key or "",
                                           "external_model": args.model})
    return real.model_copy(update={"data_dir": data, "engine": engine})


async def wait_for(condition, timeout_s: float, what: str, run=None) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not condition():
        if run is not None and run.done():
            raise SystemExit(f"make.py: the app stopped before {what}: {run.exception() or 'no error'}")
        if time.monotonic() > deadline:
            raise SystemExit(f"make.py: {what} did not happen within {timeout_s:.0f} s")
        await asyncio.sleep(0.5)


def grab(widget, name: str, out: Path) -> str:  # type: ignore[no-untyped-def]
    path = out / name
    widget.grab().save(str(path))
    return name


async def shoot(application, run, args: argparse.Namespace, out: Path) -> dict:  # type: ignore[no-untyped-def]
    from PySide6.QtWidgets import QApplication

    from workstation.core.session_state import SessionState as S
    from workstation.ui.theme import apply_theme

    await wait_for(lambda: application.window is not None and application.engine is not None, 120, "the window", run)
    window = application.window
    window.showNormal()  # it opens maximized over its screen (offscreen: 800×800); the shots are 1080p
    window.resize(1920, 1080)
    await wait_for(lambda: application.engine.view().state in ("ready", "external"), 600, "the engine serving", run)
    await application.ready.wait()
    await wait_for(lambda: len(window.panes) >= args.sessions, 300, f"{args.sessions} sessions in the grid", run)
    started = time.monotonic()
    print(f"make.py: {len(window.panes)} sessions working; shooting in {args.seconds:.0f} s", file=sys.stderr)
    await asyncio.sleep(args.seconds)
    app = QApplication.instance()
    window.set_per_page(32 if args.sessions > 16 else 16)
    shots: list[str] = []
    states = Counter(p.info.state.value for p in window.panes.values())
    tokens = sum(p.info.tokens for p in window.panes.values())
    for theme in ("light", "dark"):
        apply_theme(app, theme)
        window.flush()
        await asyncio.sleep(1.0)
        shots.append(grab(window, f"grid-32-{theme}.png", out))
    # The focus view on the session with most to show: an approval with its diff, else the longest.
    panes = list(window.panes.values())
    waiting = [p for p in panes if p.info.state is S.AWAITING_APPROVAL]
    pane = max(waiting or panes, key=lambda p: len(p.doc.lines))
    for theme in ("dark", "light"):
        apply_theme(app, theme)
        window.show_focus(pane)
        window.flush()
        await asyncio.sleep(1.0)
        shots.append(grab(window, f"focus-{theme}.png", out))
    window.show_grid()
    apply_theme(app, "dark")
    window.engine_dock.show()
    if window.meters_dock is not None:
        window.meters_dock.show()
    await asyncio.sleep(2.0)
    shots.append(grab(window, "docks-dark.png", out))
    window.engine_dock.hide()
    if window.meters_dock is not None:
        window.meters_dock.hide()
    window.tuning_dock.show()
    await asyncio.sleep(1.0)
    shots.append(grab(window, "tuning-dock.png", out))
    window.tuning_dock.hide()
    window.open_new_session("")
    dialog = window.new_session_dialog
    await asyncio.sleep(1.0)
    if dialog is not None:
        dialog.task.setPlainText("Fix the failing test in tests/test_calc.py")
        await asyncio.sleep(0.5)
        shots.append(grab(dialog, "new-session-dark.png", out))
        dialog.reject()
    view = application.engine.view()
    return {
        "shots": shots, "sessions": len(panes), "states": dict(states), "tokens": tokens,
        "seconds_working": round(time.monotonic() - started, 1), "focus_session": pane.info.name,
        "focus_state": pane.info.state.value,
        "model": MODEL_NAMES.get(args.model, args.model), "engine": f"{view.state}: {view.detail}".strip(": "),
        "endpoint": "external" if args.endpoint else "managed",
        "machine": machine(), "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=90.0, help="how long the sessions work before the shots")
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--endpoint", help="a running OpenAI-compatible engine instead of the managed one")
    parser.add_argument("--api-key")
    parser.add_argument("--out", type=Path, default=HERE)
    args = parser.parse_args(argv)

    from PySide6.QtWidgets import QApplication

    from workstation.app import Application, DemoRequest
    from workstation.ui.event_loop import make_event_loop
    from workstation.ui.theme import apply_theme

    from workstation.logging_setup import setup_logging

    settings = fresh_settings(args)
    setup_logging()
    app = QApplication.instance() or QApplication(sys.argv[:1])
    apply_theme(app, "dark")
    loop = make_event_loop(app)
    application = Application(settings, demo=DemoRequest(sessions=args.sessions))
    result: dict = {}

    async def both() -> int:
        run = asyncio.ensure_future(application.run())
        try:
            result.update(await shoot(application, run, args, args.out))
        finally:
            application.request_shutdown("(screenshots taken)")
        return await run

    with loop:
        code = loop.run_until_complete(both())
    (args.out / "captions.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result))
    return code


if __name__ == "__main__":
    raise SystemExit(main())
