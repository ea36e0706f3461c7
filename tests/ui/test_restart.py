"""After a restart: the stored sessions are in the grid before the engine is up, the ones that
were working resume with a notice, and those whose endpoint is gone ask first — the real
window over real fleets (one store, real git) whose agents talk to the scripted server."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import Qt

from tests.helpers.scripted_server import ScriptedServer
from tests.ui.conftest import agent_responder, run, wait_until
from workstation.core.session_state import SessionState as S
from workstation.ui.panes.transcript_doc import LineStyle

pytestmark = pytest.mark.gui

TASK = "Fix add() in calc.py"


@pytest.fixture
def server() -> Iterator[ScriptedServer]:
    with ScriptedServer(responder=agent_responder).in_thread() as s:
        yield s


@asynccontextmanager
async def fleet_on(window: Any, settings: Any, endpoint: Any):  # type: ignore[no-untyped-def]
    """A fleet over the settings' store, bridged into ``window`` the way the app does it."""
    from workstation.engine.http import make_http_client
    from workstation.fleet.agent_bridge import real_agent_factory
    from workstation.fleet.service import Fleet
    from workstation.ui.bridge import FleetBridge
    from workstation.ui.fleet_backend import FleetCommands

    http = make_http_client()
    fleet = Fleet(data_dir=settings.data_dir, endpoints=[endpoint], http=http, max_generating=8,
                  engine_poll_s=0.2, agent_factory=real_agent_factory(
                      http, context_window_tokens=8192, overrides={"retry_backoff_s": 0.01}))
    bridge = FleetBridge(fleet, window)
    window.attach_bridge(bridge)
    await fleet.start()
    await bridge.load_existing()
    commands = window.commands = FleetCommands(fleet)
    try:
        yield fleet, commands
    finally:
        window.commands = None
        await window.tasks.aclose()
        await asyncio.wait_for(fleet.aclose(), 30)
        bridge.close()
        await http.aclose()


def _window(qtbot, settings):  # type: ignore[no-untyped-def]
    from workstation.ui.main_window import MainWindow

    window = MainWindow(settings)
    qtbot.addWidget(window)
    window.allow_close()
    window.show()
    return window


def test_the_grid_comes_from_the_store_at_once_and_working_sessions_resume_with_a_notice(
        qtbot, qloop, settings, calc_repo: Path, server: ScriptedServer) -> None:  # type: ignore[no-untyped-def]
    from workstation.ui.backend import NewSessionRequest
    from workstation.ui.restart_flow import WAITING_FOR_ENGINE, show_stored_sessions

    async def body() -> None:
        first = _window(qtbot, settings)
        async with fleet_on(first, settings, server.endpoint) as (fleet, commands):
            await commands.create_sessions(NewSessionRequest(task=TASK, repo_path=str(calc_repo), auto_approve="all"))
            await commands.create_sessions(NewSessionRequest(task=TASK, repo_path=str(calc_repo)))
            await wait_until(lambda: len(first.panes) == 2)
            done, working = sorted(first.panes, key=lambda s: fleet.record(s).spec.auto_approve != ("all",))
            await wait_until(lambda: first.panes[done].info.state is S.DONE
                             and first.panes[working].info.state is S.AWAITING_APPROVAL)
        # the app starts again: the grid, from the store, before any engine or fleet exists
        window = _window(qtbot, settings)
        assert await show_stored_sessions(window, settings.data_dir / "store.sqlite3") == 2
        assert set(window.panes) == {done, working}
        stored = dict(window.panes)
        assert stored[working].info.detail == WAITING_FOR_ENGINE
        assert stored[done].info.state is S.DONE
        assert [ln.text for ln in stored[working].doc.lines] == [TASK]
        async with fleet_on(window, settings, server.endpoint) as (fleet, _commands):
            assert window.panes == stored  # the same panes take their histories
            # its approval died with the app (the call shows as interrupted); the agent goes on
            await wait_until(lambda: stored[working].info.state is S.DONE)
            window.flush()
            texts = [ln.text for ln in stored[working].doc.lines]
            assert texts.count(TASK) == 1
            notice = "resumed after the restart: the agent goes on from its history"
            assert any(t.endswith("· interrupted") for t in texts[:texts.index(notice)])  # the history first
            assert texts[-1] == "✓ add() adds now."  # then what it did after the restart
            assert stored[working].doc.lines[texts.index(notice)].style is LineStyle.NOTICE
            assert not any("resumed after the restart" in ln.text for ln in stored[done].doc.lines)
            assert any("add() adds now." in t for t in (ln.text for ln in stored[done].doc.lines))

    run(qloop, body())


async def _one_session_awaiting_approval(qtbot, settings, repo: Path, server: ScriptedServer) -> tuple[str, str]:  # type: ignore[no-untyped-def]
    """A first window's session, left waiting for an approval when its window closes: it was
    working, so the next start resumes it. Its id and name."""
    from workstation.ui.backend import NewSessionRequest

    first = _window(qtbot, settings)
    async with fleet_on(first, settings, server.endpoint) as (_fleet, commands):
        await commands.create_sessions(NewSessionRequest(task=TASK, repo_path=str(repo)))
        await wait_until(lambda: len(first.panes) == 1)
        (sid,) = first.panes
        await wait_until(lambda: first.panes[sid].info.state is S.AWAITING_APPROVAL)
        return sid, first.panes[sid].info.name


def test_sessions_moved_to_another_endpoint_ask_before_they_go_on(
        qtbot, qloop, settings, calc_repo: Path, server: ScriptedServer) -> None:  # type: ignore[no-untyped-def]
    async def body() -> None:
        sid, name = await _one_session_awaiting_approval(qtbot, settings, calc_repo, server)
        window = _window(qtbot, settings)
        other = dataclasses.replace(server.endpoint, name="other-model")  # another engine now
        async with fleet_on(window, settings, other) as (fleet, _commands):
            dialog = window.confirmations.dialog
            assert dialog is not None
            assert dialog.headline.text() == "1 session ran on scripted, which is gone. Go on with other-model?"
            assert dialog.items == [name]
            assert window.panes[sid].info.state is S.PAUSED  # it waits, it does not run on the new one
            asked = len(server.requests)
            await asyncio.sleep(0.3)
            assert window.panes[sid].info.state is S.PAUSED and len(server.requests) == asked
            qtbot.mouseClick(dialog.confirm_button, Qt.MouseButton.LeftButton)
            await wait_until(lambda: window.panes[sid].info.state is S.DONE)
            assert len(server.requests) > asked
            assert fleet.router.endpoint_of(sid).name == "other-model"

    run(qloop, body())


def test_the_moved_question_closes_when_its_sessions_are_removed(
        qtbot, qloop, settings, calc_repo: Path, server: ScriptedServer) -> None:  # type: ignore[no-untyped-def]
    """``workstation demo`` asks nothing of the sessions it replaces: the question about moved
    sessions, asked at the fleet's start, closed when the demo removed them (it stayed open,
    naming 32 sessions that no longer existed)."""
    async def body() -> None:
        sid, _name = await _one_session_awaiting_approval(qtbot, settings, calc_repo, server)
        window = _window(qtbot, settings)
        other = dataclasses.replace(server.endpoint, name="other-model")
        async with fleet_on(window, settings, other) as (fleet, _commands):
            dialog = window.confirmations.dialog
            assert dialog is not None and window.panes[sid].info.state is S.PAUSED
            await fleet.remove(sid)
            await wait_until(lambda: sid not in window.panes)
            await wait_until(lambda: window.confirmations.dialog is None)
            assert not dialog.isVisible()

    run(qloop, body())
