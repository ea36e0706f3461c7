"""Fixtures of the window tests: a qasync loop on the test's QApplication, and a window
driving a real fleet whose agents talk to the scripted vLLM-format server."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

try:
    import pytestqt  # noqa: F401 - pytest-qt drives every test here
except ImportError:  # a developer's bare venv skips the window tests; CI must not lose them
    from tests.helpers.prerequisites import in_ci

    if in_ci():
        raise
    pytest.skip("pytest-qt is not installed (pip install -e '.[dev]')", allow_module_level=True)

from tests.helpers.scripted_server import Reply, ScriptedServer, ToolCall  # noqa: E402

FIXED = "def add(a, b):\n    return a + b\n"


@pytest.fixture
def settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    monkeypatch.setenv("WORKSTATION_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("WORKSTATION_UI__THEME", "light")
    for key in [k for k in os.environ if k.startswith("WORKSTATION_ENGINE__")]:
        monkeypatch.delenv(key)
    from workstation.config import load_settings

    return load_settings()


@pytest.fixture(scope="session")
def session_loop(qapp):  # type: ignore[no-untyped-def]
    """One qasync loop for the whole session, as in the app (several qasync loops on one
    QApplication step each other's callbacks)."""
    from workstation.app import make_event_loop

    loop = make_event_loop(qapp)
    yield loop
    asyncio.set_event_loop(None)
    with contextlib.suppress(Exception):
        loop.close()


@pytest.fixture
def qloop(session_loop):  # type: ignore[no-untyped-def]
    """The session's loop, marked as running for this test: Qt runs the loop's timers
    whenever it processes events (a qtbot click, a teardown), and a task step there must
    find its loop, as it always does in the app where the loop runs throughout. Function
    scope, so session fixtures (a real engine) are set up before the mark."""
    asyncio.events._set_running_loop(session_loop)
    yield session_loop
    asyncio.events._set_running_loop(None)


async def wait_until(until: Callable[[], bool], timeout_s: float = 20.0) -> None:
    """Let the loop (and so Qt) run until ``until()`` holds; fail after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not until():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.02)


def run(loop: asyncio.AbstractEventLoop, coro: Any) -> Any:
    """Run a coroutine on the qasync loop. Tests run their whole body inside it, so a task
    a click starts never runs while the loop is not running."""
    asyncio.events._set_running_loop(None)
    try:
        return loop.run_until_complete(coro)
    finally:
        asyncio.events._set_running_loop(loop)


def agent_responder(body: dict[str, Any], n: int) -> Reply:
    """Per session, whatever the interleaving: explain and write the fix; after the tool's
    result, finish. A turn after a denial finishes too."""
    last = body["messages"][-1]
    if last.get("role") == "tool" or (last.get("role") == "user" and n and "denied" in str(last.get("content", ""))):
        return Reply(text="Done.", tool_calls=[ToolCall("attempt_completion", {"result": "add() adds now."})])
    if last.get("role") == "user" and "run the check" in str(last.get("content", "")).lower():
        return Reply(text="Checking.", tool_calls=[ToolCall("execute_command", {
            "command": "python3 -c \"import calc; print('add(2, 3) =', calc.add(2, 3)); raise SystemExit(calc.add(2, 3) != 5)\""})])
    if last.get("role") == "user" and "ask me" in str(last.get("content", "")).lower():
        return Reply(text="", tool_calls=[ToolCall("ask_followup_question", {
            "question": "Should add() also take floats?", "options": ["yes", "no"]})])
    if last.get("role") == "user" and "read it first" in str(last.get("content", "")).lower():
        return Reply(text="Let me look.", tool_calls=[ToolCall("read_file", {"path": "calc.py"})])
    if last.get("role") == "user" and "follow" in str(last.get("content", "")).lower():
        return Reply(text="On it.", tool_calls=[ToolCall("attempt_completion", {"result": "followed up"})])
    return Reply(
        text="The bug: add subtracts.\n```python\n" + FIXED + "```\n",
        tool_calls=[ToolCall("write_to_file", {"path": "calc.py", "content": FIXED})],
    )


@dataclass
class FleetUI:
    loop: asyncio.AbstractEventLoop
    window: Any
    fleet: Any
    bridge: Any
    commands: Any
    server: ScriptedServer
    repo: Path
    closed: bool = False

    async def wait(self, until: Callable[[], bool], timeout_s: float = 20.0) -> None:
        await wait_until(until, timeout_s)

    def play(self, body: Callable[[], Any]) -> Any:
        """Run the async test body on the loop, then close the services in the same run:
        no gap in which Qt could step a service's task with the loop not running."""

        async def whole() -> Any:
            try:
                return await body()
            finally:
                await self.close()

        return run(self.loop, whole())

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        await self.window.tasks.aclose()
        await asyncio.wait_for(self.fleet.aclose(), 30)
        self.bridge.close()

    async def create(self, count: int = 1, *, auto_approve: str = "ask", task: str = "Fix add() in calc.py"
                     ) -> list[str]:
        from workstation.ui.backend import NewSessionRequest

        before = set(self.window.panes)
        await self.commands.create_sessions(NewSessionRequest(
            task=task, repo_path=str(self.repo), auto_approve=auto_approve, copies=count))
        await self.wait(lambda: len(self.window.panes) >= len(before) + count)
        return [sid for sid in self.window.panes if sid not in before]

    def state(self, session_id: str) -> Any:
        return self.window.panes[session_id].info.state


@pytest.fixture
def calc_repo(tmp_path: Path) -> Path:
    from workstation.fleet.sample_repos import scratch_repository

    return scratch_repository(tmp_path / "calc", {"calc.py": "def add(a, b):\n    return a - b\n"})


@pytest.fixture
def fleet_options(settings) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    """More arguments of the window's fleet (a test module overrides this fixture)."""
    return {}


@pytest.fixture
def fleet_ui(qtbot, qloop, settings, calc_repo: Path, fleet_options: dict[str, Any]) -> Iterator[FleetUI]:  # type: ignore[no-untyped-def]
    from workstation.engine.http import make_http_client
    from workstation.fleet.agent_bridge import real_agent_factory
    from workstation.fleet.service import Fleet
    from workstation.ui.bridge import FleetBridge
    from workstation.ui.fleet_backend import FleetCommands
    from workstation.ui.main_window import MainWindow

    with ScriptedServer(responder=agent_responder).in_thread() as server:
        http = make_http_client()
        fleet = Fleet(data_dir=settings.data_dir, endpoints=[server.endpoint],
                      agent_factory=real_agent_factory(http, context_window_tokens=8192,
                                                       overrides={"retry_backoff_s": 0.01}),
                      http=http, max_generating=8, engine_poll_s=0.2, **fleet_options)
        window = MainWindow(settings)
        bridge = FleetBridge(fleet, window)
        window.attach_bridge(bridge)
        run(qloop, fleet.start())
        run(qloop, bridge.load_existing())
        commands = FleetCommands(fleet)
        window.commands = commands
        window.resize(1600, 900)
        window.show()
        ui = FleetUI(qloop, window, fleet, bridge, commands, server, calc_repo)
        try:
            yield ui
        finally:
            run(qloop, ui.close())
            run(qloop, http.aclose())
            window.allow_close()
            window.close()
            window.deleteLater()
