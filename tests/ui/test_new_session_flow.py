"""The New-session form: a refusal stays in the form with what was typed, the form can be
filled while the engine starts, and a slow clone can be cancelled — in the real window over
a real fleet (real git) whose agents talk to the scripted vLLM-format server."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QDialogButtonBox

from tests.ui.conftest import FleetUI
from workstation.core.session_state import SessionState as S

pytestmark = pytest.mark.gui


def _fill(qtbot, dialog, repo: Path, task: str, name: str = "") -> None:  # type: ignore[no-untyped-def]
    dialog.repo.setCurrentText(str(repo))
    qtbot.keyClicks(dialog.task, task)
    if name:
        dialog.name.setText(name)


def test_a_taken_name_is_refused_in_the_form_which_keeps_the_task(qtbot, fleet_ui: FleetUI) -> None:  # type: ignore[no-untyped-def]
    ui = fleet_ui

    async def body() -> None:
        window = ui.window
        window.open_new_session()
        first = window.new_session_dialog
        _fill(qtbot, first, ui.repo, "Fix add() in calc.py", name="calc-fix")
        closed: list[int] = []
        first.finished.connect(closed.append)
        qtbot.mouseClick(first.create_button, Qt.MouseButton.LeftButton)
        await ui.wait(lambda: len(window.panes) == 1 and closed == [1])  # created: the form closed
        window.open_new_session()
        again = window.new_session_dialog
        _fill(qtbot, again, ui.repo, "Fix add() once more, with a test", name="calc-fix")
        qtbot.mouseClick(again.create_button, Qt.MouseButton.LeftButton)
        await ui.wait(lambda: again.problem.isVisible())
        assert "calc-fix" in again.problem.text() and "calc-fix-2" in again.problem.text()  # names a free one
        assert again.isVisible() and len(window.panes) == 1
        assert again.task.toPlainText() == "Fix add() once more, with a test"  # nothing typed is lost
        assert again.create_button.isEnabled() and again.create_button.text() == "Create"
        again.name.setText("calc-fix-2")
        again.finished.connect(closed.append)
        qtbot.mouseClick(again.create_button, Qt.MouseButton.LeftButton)
        await ui.wait(lambda: len(window.panes) == 2 and closed == [1, 1])
        assert sorted(p.info.name for p in window.panes.values()) == ["calc-fix", "calc-fix-2"]

    ui.play(body)


def test_the_form_is_filled_while_the_engine_starts(qtbot, fleet_ui: FleetUI) -> None:  # type: ignore[no-untyped-def]
    ui = fleet_ui

    async def body() -> None:
        import asyncio

        window = ui.window
        window.commands = None  # the sessions service is not up yet: the engine starts
        qtbot.keyClick(window, Qt.Key.Key_N, Qt.KeyboardModifier.ControlModifier)
        dialog = window.new_session_dialog
        assert dialog is not None and dialog.isVisible()
        assert "engine is still starting" in dialog.note.text()
        _fill(qtbot, dialog, ui.repo, "Fix add() in calc.py")
        qtbot.mouseClick(dialog.create_button, Qt.MouseButton.LeftButton)
        assert dialog.create_button.text() == "Waiting for the engine…" and not dialog.create_button.isEnabled()
        await asyncio.sleep(0.5)
        assert dialog.isVisible() and not window.panes
        closed: list[int] = []
        dialog.finished.connect(closed.append)
        window.commands = ui.commands  # the engine is up
        await ui.wait(lambda: len(window.panes) == 1 and closed == [1])
        (sid,) = window.panes
        await ui.wait(lambda: ui.state(sid) is S.AWAITING_APPROVAL)

    ui.play(body)


@pytest.fixture
def silent_git_server() -> Iterator[str]:
    """A git:// server that accepts and never answers: a clone from it waits until cancelled."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    listener.settimeout(0.2)
    held: list[socket.socket] = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            held.append(conn)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"git://127.0.0.1:{listener.getsockname()[1]}/slow.git"
    finally:
        stop.set()
        thread.join(5)
        for conn in held:
            conn.close()
        listener.close()


def test_a_slow_clone_is_cancelled_from_the_form(qtbot, fleet_ui: FleetUI, silent_git_server: str) -> None:  # type: ignore[no-untyped-def]
    ui = fleet_ui

    async def body() -> None:
        import asyncio

        window = ui.window
        window.open_new_session()
        dialog = window.new_session_dialog
        dialog.clone_url.setText(silent_git_server)
        qtbot.keyClicks(dialog.task, "Fix add() in calc.py")
        qtbot.mouseClick(dialog.create_button, Qt.MouseButton.LeftButton)
        assert dialog.create_button.text() == "Creating…"
        await asyncio.sleep(1.0)
        assert ui.fleet.roster.creating == 1  # the clone hangs on the silent server
        qtbot.mouseClick(dialog.buttons.button(QDialogButtonBox.StandardButton.Cancel), Qt.MouseButton.LeftButton)
        await ui.wait(lambda: dialog.problem.text() == "Cancelled: nothing was created.")
        assert dialog.isVisible() and dialog.clone_url.text() == silent_git_server
        await ui.wait(lambda: ui.fleet.roster.creating == 0)  # the fleet stopped creating, git was killed
        assert not window.panes and not ui.fleet.sessions()
        closed: list[int] = []
        dialog.finished.connect(closed.append)
        qtbot.mouseClick(dialog.buttons.button(QDialogButtonBox.StandardButton.Cancel), Qt.MouseButton.LeftButton)
        assert closed == [0]  # not busy any more: Cancel closes the form

    ui.play(body)
