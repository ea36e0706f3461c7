"""The window while agents' commands are not confined: a banner says so, every command asks
(auto-approve or not), and the settings dialog names the risk of ``sandbox.mode = off``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PySide6.QtCore import Qt

from tests.helpers.scripted_server import Reply, ScriptedServer, ToolCall
from tests.ui.conftest import run, wait_until
from workstation.agent import sandbox as sb
from workstation.agent.sandbox import SandboxMode, SandboxPolicy
from workstation.agent.sandbox_status import sandbox_status
from workstation.core.session_state import SessionState as S

pytestmark = pytest.mark.gui


@pytest.fixture
def window(qtbot, settings):  # type: ignore[no-untyped-def]
    from workstation.ui.main_window import MainWindow

    win = MainWindow(settings)
    win.resize(1600, 900)
    win.show()
    qtbot.waitExposed(win)
    yield win
    win.allow_close()
    win.close()


@pytest.fixture
def no_bwrap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """Settings whose bubblewrap cannot run (``sandbox.bwrap`` names no program)."""
    monkeypatch.setenv("WORKSTATION_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("WORKSTATION_SANDBOX__BWRAP", str(tmp_path / "not-installed" / "bwrap"))
    from workstation.config import load_settings

    sb.forget_probes()
    return load_settings()


def test_the_banner_says_what_is_not_confined(qtbot, window, qloop, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    banner = window.sandbox_banner
    assert not banner.isVisible()  # until the app has asked
    missing = run(qloop, sandbox_status(SandboxPolicy(bwrap=str(tmp_path / "none"))))
    banner.show_status(missing)
    assert banner.isVisible() and "each one waits for your approval" in banner.label.text()
    assert "not an executable file" in banner.label.text()
    off = run(qloop, sandbox_status(SandboxPolicy(mode=SandboxMode.OFF)))
    banner.show_status(off)
    assert banner.isVisible() and "sandbox is off in settings" in banner.label.text()
    assert "~/.ssh included" in banner.label.text()


def test_banner_button_opens_the_sandbox_tab_with_the_risk_named(qtbot, window, settings) -> None:  # type: ignore[no-untyped-def]
    window.sandbox_banner.show()
    qtbot.mouseClick(window.sandbox_banner.settings_button, Qt.MouseButton.LeftButton)
    dialog = window.settings_dialog
    assert dialog is not None and dialog.isVisible()
    assert dialog.tabs.tabText(dialog.tabs.currentIndex()) == "Sandbox"
    risk = dialog.sandbox_risk
    assert "mode = off is a RISK" in risk.text() and "~/.ssh" in risk.text() and risk.isVisible()
    assert risk.styleSheet() == ""
    mode = dialog.fields["sandbox"]["mode"].widget
    mode.setCurrentText("off")
    assert "font-weight: bold" in risk.styleSheet()
    dialog.buttons.accepted.emit()
    assert json.loads(settings.settings_file.read_text())["sandbox"]["mode"] == "off"


def test_the_app_shows_the_banner_where_bubblewrap_cannot_run(qtbot, qloop, no_bwrap) -> None:  # type: ignore[no-untyped-def]
    from workstation.app import Application
    from workstation.ui.main_window import MainWindow

    app = Application(no_bwrap)
    app.window = MainWindow(no_bwrap)
    try:
        app.window.show()
        run(qloop, app._show_sandbox())
        assert app.window.sandbox_banner.isVisible()
        assert "each one waits for your approval" in app.window.sandbox_banner.label.text()
    finally:
        app.window.allow_close()
        app.window.close()
        sb.forget_probes()


def _command_then_done(body: dict, n: int) -> Reply:
    last = body["messages"][-1]
    if last.get("role") == "tool":
        return Reply(tool_calls=[ToolCall("attempt_completion", {"result": "ran it"})])
    return Reply(tool_calls=[ToolCall("execute_command", {"command": "touch ran.txt"})])


def test_without_bubblewrap_the_window_asks_for_an_auto_approved_command(  # type: ignore[no-untyped-def]
        qtbot, qloop, no_bwrap, calc_repo: Path) -> None:
    """The fleet's agents are built as the app builds them (``from_settings``): a session
    that auto-approves everything still waits for a person before each command."""
    from workstation.engine.http import make_http_client
    from workstation.fleet.agent_bridge import real_agent_factory
    from workstation.fleet.service import Fleet
    from workstation.ui.backend import NewSessionRequest
    from workstation.ui.bridge import FleetBridge
    from workstation.ui.fleet_backend import FleetCommands
    from workstation.ui.main_window import MainWindow

    with ScriptedServer(responder=_command_then_done).in_thread() as server:
        http = make_http_client()
        fleet = Fleet(data_dir=no_bwrap.data_dir, endpoints=[server.endpoint],
                      agent_factory=real_agent_factory.from_settings(
                          http, no_bwrap, context_window_tokens=8192, overrides={"retry_backoff_s": 0.01}),
                      http=http, max_generating=2, engine_poll_s=0.2)
        window = MainWindow(no_bwrap)
        bridge = FleetBridge(fleet, window)
        window.attach_bridge(bridge)
        commands = FleetCommands(fleet)
        window.commands = commands
        window.show()

        async def body() -> None:
            try:
                await fleet.start()
                await bridge.load_existing()
                await commands.create_sessions(NewSessionRequest(
                    task="run it", repo_path=str(calc_repo), auto_approve="all", copies=1))
                await wait_until(lambda: len(window.panes) == 1)
                (sid,) = window.panes
                pane = window.panes[sid]
                await commands.start_all()
                await wait_until(lambda: pane.info.state is S.AWAITING_APPROVAL, 30)
                await wait_until(lambda: pane.approval.isVisible() and bool(pane.approval.summary.text()))
                assert "commands are not confined here" in pane.approval.summary.text()
                worktree = Path(fleet.summary(sid).worktree_path)
                assert not (worktree / "ran.txt").exists()
                qtbot.mouseClick(pane.approval.approve_button, Qt.MouseButton.LeftButton)
                await wait_until(lambda: pane.info.state is S.DONE, 30)
                assert (worktree / "ran.txt").exists()  # a person approved it: it ran
            finally:
                await window.tasks.aclose()
                await fleet.aclose()
                bridge.close()
                await http.aclose()

        try:
            run(qloop, body())
        finally:
            window.allow_close()
            window.close()
            sb.forget_probes()
