"""The window's worktree tools, driven like a user would: a pane's menu marks a session
ready and starts and stops its dev server (reached from the host), the header shows both,
and the toolbar's merge queue merges the ready session into main through its dialog —
against a real fleet, real git and the real sandbox."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest
from PySide6.QtCore import QPoint, Qt
from PySide6.QtGui import QContextMenuEvent
from PySide6.QtWidgets import QApplication

from tests.helpers.prerequisites import needs_bwrap
from tests.ui.conftest import FIXED, FleetUI
from workstation.core.session_state import SessionState as S

pytestmark = [pytest.mark.gui, needs_bwrap]

GATE = "python3 -c 'import calc; assert calc.add(2, 3) == 5'"


@pytest.fixture
def fleet_options(settings, calc_repo: Path) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    from workstation.agent.sandbox import SandboxPolicy
    from workstation.config import RepoSettings
    from workstation.fleet.bootstrap import BootstrapOptions

    repos = {str(calc_repo): RepoSettings(run="exec python3 -m http.server \"$PORT\" --bind 127.0.0.1",
                                          gate=GATE, ports=2)}
    return {"sandbox": SandboxPolicy(app_data_dirs=(str(settings.data_dir),)),
            "bootstrap": BootstrapOptions(repos=repos)}


def _menu_action(ui: FleetUI, sid: str, what: str):  # type: ignore[no-untyped-def]
    menu = ui.window.session_actions.open_menu(ui.window.panes[sid])
    found = [a for a in menu.actions() if a.data() == what]
    assert found, [(a.text(), a.data()) for a in menu.actions()]
    return found[0]


def test_menu_ready_dev_server_and_merge_queue(qtbot, fleet_ui: FleetUI) -> None:  # type: ignore[no-untyped-def]
    ui = fleet_ui

    async def body() -> None:
        (sid,) = await ui.create(auto_approve="edits")
        await ui.wait(lambda: ui.state(sid) is S.DONE)
        pane = ui.window.panes[sid]
        # a right-click on the pane opens its menu
        where = QPoint(20, 40)
        QApplication.sendEvent(pane, QContextMenuEvent(QContextMenuEvent.Reason.Mouse, where, pane.mapToGlobal(where)))
        menu = ui.window.session_actions.menu
        assert menu is not None and menu.isVisible()
        assert [a.data() for a in menu.actions() if a.data()] == [
            "stop", "restart", "rename", "merge", "ready", "server-start", "background", "budget",
            "archive", "remove"]
        menu.close()
        # the dev server, from the pane's menu
        _menu_action(ui, sid, "server-start").trigger()
        await ui.wait(lambda: bool(pane.info.server_url))
        url = pane.info.server_url
        assert url == ui.fleet.dev_server(sid).url
        pages: list[str] = []

        async def fetch() -> bool:  # the server may still be starting behind its URL
            try:
                async with httpx.AsyncClient(timeout=5) as client:
                    pages.append((await client.get(url + "calc.py")).text)
            except httpx.TransportError:
                return False
            return True

        for _ in range(100):
            if await fetch():
                break
            await asyncio.sleep(0.2)
        assert pages == [FIXED]  # its own worktree, served from inside the sandbox
        whats = [a.data() for a in ui.window.session_actions.open_menu(pane).actions() if a.data()]
        assert whats[whats.index("ready") + 1:whats.index("ready") + 3] == ["open", "server-stop"]
        _menu_action(ui, sid, "server-stop").trigger()
        await ui.wait(lambda: not pane.info.server_url)
        # ready to merge, from the menu: the work is committed, the header says so
        _menu_action(ui, sid, "ready").trigger()
        await ui.wait(lambda: pane.info.ready)
        assert ui.fleet.summary(sid).ready
        # the merge queue, from the toolbar, through its dialog
        ui.window.session_actions.merge_action.trigger()
        dialog = ui.window.session_actions.dialog
        assert dialog.into.text() == "main" and dialog.gate.text() == GATE
        assert pane.info.name in dialog.order.text()
        messages: list[str] = []
        ui.bridge.message.connect(messages.append)
        qtbot.mouseClick(dialog.merge_button, Qt.MouseButton.LeftButton)
        # main is checked out in the repository itself: the queue asks first, naming it and the commits
        await ui.wait(lambda: ui.window.confirmations.dialog is not None)
        confirm = ui.window.confirmations.dialog
        assert confirm.headline.text() == f"main is checked out in {ui.repo}: merge 1 commit into it?"
        (commit,) = confirm.items
        assert commit.startswith(f"{pane.info.name}: ")
        qtbot.mouseClick(confirm.confirm_button, Qt.MouseButton.LeftButton)
        await ui.wait(lambda: not pane.info.ready, timeout_s=60)
        await ui.wait(lambda: any(m.startswith("merge-queue of") for m in messages))
        assert "done" in [m for m in messages if m.startswith("merge-queue of")][-1]
        main = subprocess.run(["git", "-C", str(ui.repo), "show", "main:calc.py"], capture_output=True,
                              text=True, check=True).stdout
        assert main == FIXED

    ui.play(body)


def test_merge_dialog_says_what_is_missing(qtbot, fleet_ui: FleetUI) -> None:  # type: ignore[no-untyped-def]
    from workstation.ui.backend import MergePlan
    from workstation.ui.dialogs.merge_dialog import MergeDialog

    empty = MergeDialog(MergePlan())
    qtbot.addWidget(empty)
    assert not empty.merge_button.isEnabled() and "No session is marked ready" in empty.problem.text()
    dialog = MergeDialog(MergePlan(("a", "b"), "main", ""))
    qtbot.addWidget(dialog)
    assert "a → b" in dialog.order.text()
    assert not dialog.merge_button.isEnabled() and "test command" in dialog.problem.text()
    dialog.gate.setText("pytest -q")
    dialog.into.setText("bad..name")
    assert not dialog.merge_button.isEnabled()
    dialog.into.setText("release/1.0")
    assert dialog.merge_button.isEnabled()
    got: list[tuple[str, str, bool]] = []
    dialog.merge_requested.connect(lambda *a: got.append(a))
    dialog.rebase.setChecked(True)
    qtbot.mouseClick(dialog.merge_button, Qt.MouseButton.LeftButton)
    assert got == [("release/1.0", "pytest -q", True)]
