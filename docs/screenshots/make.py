"""Screenshots of the main views, light and dark, at 1920x1080 offscreen.

    python docs/screenshots/make.py [--engine-url URL --engine-key KEY]

The panes are drawn by the real window through the real fleet bridge, fed with the
events a fleet of 32 agents emits (states, streamed text, tool calls, approvals). The
meter strip shows real telemetry of this machine (and of an engine's /metrics when a
URL is given); nothing is made up for it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from psygnal import Signal  # noqa: E402

from workstation.core import agent_events as ev  # noqa: E402
from workstation.core import fleet_events as fe  # noqa: E402
from workstation.core.session_state import SessionState as S  # noqa: E402

TASKS = [
    ("fix-flaky-test", "repo-a", "Fix the flaky test in tests/test_io.py"),
    ("add-cli-flag", "repo-b", "Add a --dry-run flag to the CLI"),
    ("speed-up-parser", "repo-c", "Make the config parser faster"),
    ("typing-cleanup", "repo-a", "Add type hints to utils/paths.py"),
    ("docs-quickstart", "repo-d", "Write a quickstart section in the README"),
    ("retry-http", "repo-b", "Retry HTTP 503 with backoff"),
    ("sqlite-wal", "repo-e", "Switch the cache to SQLite WAL mode"),
    ("dark-mode", "repo-f", "Follow the system dark mode"),
]

STATES = ([S.RUNNING] * 17 + [S.AWAITING_APPROVAL] * 5 + [S.DONE] * 4 + [S.QUEUED] * 3
          + [S.NEEDS_INPUT, S.FAILED, S.PAUSED])

ANSWER = (
    "The test races on the temp dir: two workers share /tmp/data.bin. A per-test directory fixes it.\n"
    "```python\ndef make_tmp(tmp_path_factory):\n    base = tmp_path_factory.mktemp(\"io\")\n"
    "    return base / \"data.bin\"\n```\n"
)
DIFF_FIX = "------- SEARCH\npath = \"/tmp/data.bin\"\n=======\npath = make_tmp(factory)\n+++++++ REPLACE"


class FakeFleet:
    """Just enough of the fleet's surface for the bridge: its two signals and queries."""

    changed = Signal(object)
    agent_event = Signal(object)

    def __init__(self) -> None:
        self.summaries: list[fe.SessionSummary] = []

    def sessions(self) -> list[fe.SessionSummary]:
        return list(self.summaries)

    async def transcript(self, session_id: str) -> list:
        return []

    def pending_approvals(self) -> list:
        return []


def script(fleet: FakeFleet, index: int, state: S) -> None:
    name, repo, task = TASKS[index % len(TASKS)]
    sid = f"s{index:02d}"
    name = f"{name}-{index + 1}" if index >= len(TASKS) else name
    summary = fe.SessionSummary(
        session_id=sid, name=name, state=S.QUEUED, task=task, repo_path=f"/home/dev/{repo}",
        worktree_path="", branch=f"ws/{name}", base_branch="main", mode="act", endpoint_name="managed:smollm2",
        prompt_tokens=900 + 37 * index, completion_tokens=200 + 53 * index,
    )
    fleet.summaries.append(summary)
    fleet.changed.emit(fe.SessionCreated(summary))
    seq = iter(range(1, 1000))

    def emit(event: object) -> None:
        fleet.agent_event.emit(fe.SessionAgentEvent(sid, next(seq), event))

    def tool(call: str, tool_name: str, args: dict, summary_text: str, status: str = "ok", result: str = "") -> None:
        emit(ev.ToolCallStarted(sid, call, tool_name, args, summary_text))
        emit(ev.ToolCallFinished(sid, call, tool_name, status, result or "ok"))

    if state is S.QUEUED:
        return
    fleet.changed.emit(fe.SessionStateChanged(sid, S.QUEUED, S.RUNNING))
    tool("c1", "read_file", {"path": "tests/test_io.py"}, "read_file tests/test_io.py", result="…")
    tool("c2", "search_files", {"path": ".", "regex": "tmp"}, "search_files /tmp/ in .")
    for piece in ANSWER[: 90 + 40 * (index % 5)].split(" "):
        emit(ev.TextStreamed(sid, 1, piece + " "))
    emit(ev.TurnFinished(sid, 1, "tool_calls", "", 1))
    tool("c3", "replace_in_file", {"path": "io.py", "diff": DIFF_FIX}, "replace_in_file io.py")
    if state in (S.RUNNING, S.PAUSED):
        tool("c4", "execute_command", {"command": "pytest -q tests/test_io.py"}, "$ pytest -q tests/test_io.py",
             result="4 passed in 0.31s")
        for piece in "All four tests pass now. Next I check the other callers of the old path".split(" "):
            emit(ev.TextStreamed(sid, 2, piece + " "))
    if state is S.AWAITING_APPROVAL:
        emit(ev.ApprovalRequested(sid, f"r{index}", "c5", "execute_command", "command",
                                  {"command": "pytest -q"}, "$ pytest -q", "command actions need approval"))
    if state is S.DONE:
        emit(ev.TaskCompleted(sid, "Per-test temp dirs; the race is gone."))
    if state is S.FAILED:
        emit(ev.ErrorOccurred(sid, "the engine answered HTTP 500 three times; giving up"))
    if state is S.NEEDS_INPUT:
        emit(ev.QuestionAsked(sid, "c6", "Should the flag also skip network calls?", ("yes", "no")))
    if state is not S.RUNNING:
        fleet.changed.emit(fe.SessionStateChanged(sid, S.RUNNING, state, ""))
    fleet.changed.emit(fe.SessionStatsChanged(sid, summary.prompt_tokens, summary.completion_tokens, 0,
                                              0.0 if state is not S.RUNNING else 35.0 + (index * 7) % 20))


async def shoot(theme_name: str, args: argparse.Namespace) -> None:
    from PySide6.QtWidgets import QApplication

    from workstation.config import load_settings
    from workstation.ui.bridge import FleetBridge
    from workstation.ui.main_window import MainWindow
    from workstation.ui.theme import apply_theme

    app = QApplication.instance()
    apply_theme(app, theme_name)
    settings = load_settings()
    window = MainWindow(settings)
    window.resize(1920, 1080)
    window.show()
    fleet = FakeFleet()
    bridge = FleetBridge(fleet, window)
    window.attach_bridge(bridge)
    await bridge.load_existing()
    meters = await start_meters(window, settings, args)
    if args.engine_url:
        from workstation.ui.backend import EngineView

        window.set_engine_view(EngineView(state="external", model="smollm2", managed=False,
                                          detail="an engine the app does not manage"))
    for i, state in enumerate(STATES):
        script(fleet, i, state)
    bridge.slots_changed.emit(18, 3, 32)
    await asyncio.sleep(3.5 if meters is not None else 0.3)
    window.flush()
    await asyncio.sleep(0.2)
    window.grab().save(str(HERE / f"grid-32-{theme_name}.png"))
    pane = window.panes["s21"]
    window.show_focus(pane)
    await asyncio.sleep(0.3)
    window.focus.transcript.toggle(next(l for l in pane.doc.lines if l.text.startswith("✎")))
    window.grab().save(str(HERE / f"focus-{theme_name}.png"))
    window.show_grid()
    if theme_name == "dark":
        window.engine_dock.set_log([f"INFO 12:0{i} [api_server.py] Route: /v1/chat/completions" for i in range(8)])
        window.engine_dock.show()
        if getattr(window, "meters_dock", None) is not None:
            window.meters_dock.show()
            window.meters_dock.redraw()
        await asyncio.sleep(0.3)
        window.grab().save(str(HERE / "docks-dark.png"))
        window.engine_dock.hide()
        if getattr(window, "meters_dock", None) is not None:
            window.meters_dock.hide()
        window.commands = bridge  # anything with endpoint_names / recent_repositories
        bridge.endpoint_names = lambda: ["managed:smollm2"]  # type: ignore[attr-defined]
        bridge.recent_repositories = lambda: ["/home/dev/repo-a", "/home/dev/repo-b"]  # type: ignore[attr-defined]
        window.open_new_session("/nonexistent/repo")
        dialog = window.new_session_dialog
        dialog.task.setPlainText("Fix the flaky test in tests/test_io.py")
        await asyncio.sleep(0.2)
        dialog.grab().save(str(HERE / "new-session-dark.png"))
        dialog.reject()
    if meters is not None:
        await meters.aclose()
    bridge.close()
    window.allow_close()
    window.close()


async def start_meters(window, settings, args):  # type: ignore[no-untyped-def]
    try:
        from workstation.telemetry.meters import Meters
    except ImportError:
        return None
    from workstation.core.endpoints import Endpoint
    from workstation.engine.http import make_http_client
    from workstation.ui.meters.install import install_meters

    endpoints = []
    if args.engine_url:
        endpoints = [Endpoint(args.engine_url, args.engine_key or "", "smollm2", name="engine")]
    meters = Meters.from_settings(settings, make_http_client(), endpoints=endpoints)
    install_meters(window, meters, None)
    await meters.start()
    return meters


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--engine-url")
    parser.add_argument("--engine-key")
    args = parser.parse_args()
    os.environ["WORKSTATION_DATA_DIR"] = tempfile.mkdtemp(prefix="ws-shots-")
    from PySide6.QtWidgets import QApplication

    from workstation.app import make_event_loop

    app = QApplication(sys.argv[:1])
    loop = make_event_loop(app)
    with loop:
        for theme_name in ("light", "dark"):
            loop.run_until_complete(shoot(theme_name, args))
    print("\n".join(sorted(str(p.relative_to(ROOT)) for p in HERE.glob("*.png"))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
