"""Every user action of the window, driven by qtbot, against a real fleet whose agents
talk to the scripted vLLM-format server."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QDialog

from tests.ui.conftest import FIXED, FleetUI
from workstation.core.session_state import SessionState as S
from workstation.ui.panes.transcript_doc import LineStyle

pytestmark = pytest.mark.gui


def worktree_file(ui: FleetUI, session_id: str, name: str) -> str:
    return (Path(ui.fleet.summary(session_id).worktree_path) / name).read_text()


def test_new_session_dialog_then_approve(qtbot, fleet_ui: FleetUI) -> None:  # type: ignore[no-untyped-def]
    ui = fleet_ui

    async def body() -> None:
        notes: list[str] = []
        ui.window.attention.notified.connect(lambda _t, m: notes.append(m))
        qtbot.keyClick(ui.window, Qt.Key.Key_N, Qt.KeyboardModifier.ControlModifier)
        dialog = ui.window.new_session_dialog
        assert dialog is not None and dialog.isVisible()
        assert not dialog.create_button.isEnabled()
        dialog.repo.setCurrentText(str(ui.repo))
        qtbot.keyClicks(dialog.task, "Fix add() in calc.py")
        assert dialog.create_button.isEnabled()
        qtbot.mouseClick(dialog.create_button, Qt.MouseButton.LeftButton)
        await ui.wait(lambda: len(ui.window.panes) == 1)
        (sid,) = ui.window.panes
        pane = ui.window.panes[sid]
        await ui.wait(lambda: ui.state(sid) is S.AWAITING_APPROVAL)
        assert pane.approval.isVisible() and pane.waiting
        assert ui.window.approve_all_action.text() == "Approve (1)"
        assert "write_to_file calc.py" in pane.approval.summary.text()
        assert any("waits for your approval" in n for n in notes)
        ui.window.flush()
        texts = [(line.text, line.style) for line in pane.doc.lines]
        assert ("Fix add() in calc.py", LineStyle.USER) in texts
        assert ("    return a + b", LineStyle.CODE) in texts
        assert any(style is LineStyle.TOOL and "write_to_file calc.py  +2 −0" in text for text, style in texts)
        qtbot.mouseClick(pane.approval.approve_button, Qt.MouseButton.LeftButton)
        await ui.wait(lambda: ui.state(sid) is S.DONE)
        assert worktree_file(ui, sid, "calc.py") == FIXED
        assert not pane.approval.isVisible() and ui.window.approve_all_action.text() == "Approve"
        assert any("finished" in n for n in notes)
        ui.window.flush()
        assert any(line.text.startswith("✓ add() adds now.") for line in pane.doc.lines)

    ui.play(body)


def test_deny_with_feedback(qtbot, fleet_ui: FleetUI) -> None:  # type: ignore[no-untyped-def]
    ui = fleet_ui

    async def body() -> None:
        (sid,) = await ui.create()
        pane = ui.window.panes[sid]
        await ui.wait(lambda: ui.state(sid) is S.AWAITING_APPROVAL)
        qtbot.mouseClick(pane.approval.deny_button, Qt.MouseButton.LeftButton)
        assert pane.approval.feedback.isVisible()
        qtbot.keyClicks(pane.approval.feedback, "not this file")
        qtbot.keyClick(pane.approval.feedback, Qt.Key.Key_Return)
        await ui.wait(lambda: ui.state(sid) is S.DONE)
        assert worktree_file(ui, sid, "calc.py") != FIXED
        ui.window.flush()
        assert any(line.text == "denied: not this file" for line in pane.doc.lines)
        sent = json.dumps(ui.server.requests[-1])
        assert "not this file" in sent

    ui.play(body)


def test_edit_then_approve(qtbot, fleet_ui: FleetUI) -> None:  # type: ignore[no-untyped-def]
    ui = fleet_ui

    async def body() -> None:
        (sid,) = await ui.create()
        pane = ui.window.panes[sid]
        await ui.wait(lambda: ui.state(sid) is S.AWAITING_APPROVAL)
        qtbot.mouseClick(pane.approval.edit_button, Qt.MouseButton.LeftButton)
        dialog = pane.approval._dialog
        assert dialog is not None and dialog.isVisible()
        args = json.loads(dialog.arguments)
        args["content"] = "def add(a, b):\n    return b + a\n"
        dialog.editor.setPlainText(json.dumps(args))
        dialog.done(QDialog.DialogCode.Accepted)
        await ui.wait(lambda: ui.state(sid) is S.DONE)
        assert worktree_file(ui, sid, "calc.py") == "def add(a, b):\n    return b + a\n"

    ui.play(body)


def test_approve_all_shortcut(qtbot, fleet_ui: FleetUI) -> None:  # type: ignore[no-untyped-def]
    ui = fleet_ui

    async def body() -> None:
        sids = await ui.create(3)
        await ui.wait(lambda: all(ui.state(s) is S.AWAITING_APPROVAL for s in sids))
        assert ui.window.approve_all_action.text() == "Approve (3)"
        qtbot.keyClick(ui.window, Qt.Key.Key_A, Qt.KeyboardModifier.ControlModifier | Qt.KeyboardModifier.ShiftModifier)
        confirm = ui.window.confirmations.dialog  # it asks first, listing the three
        assert confirm is not None and len(confirm.items) == 3
        qtbot.mouseClick(confirm.confirm_button, Qt.MouseButton.LeftButton)
        await ui.wait(lambda: all(ui.state(s) is S.DONE for s in sids))
        assert all(worktree_file(ui, s, "calc.py") == FIXED for s in sids)

    ui.play(body)


def test_keyboard_focus_zoom_follow_up_and_back(qtbot, fleet_ui: FleetUI) -> None:  # type: ignore[no-untyped-def]
    ui = fleet_ui

    async def body() -> None:
        sids = await ui.create(3, auto_approve="all")
        await ui.wait(lambda: all(ui.state(s) is S.DONE for s in sids))
        grid = ui.window.grid
        grid.setFocus()
        assert grid.focused == 2  # the newest session was brought into view
        grid.set_focus(0)
        qtbot.keyClick(grid, Qt.Key.Key_Right)
        assert grid.focused == 1 and grid.panes[1].focused and not grid.panes[0].focused
        qtbot.keyClick(grid, Qt.Key.Key_Left)
        qtbot.keyClick(grid, Qt.Key.Key_Right)
        qtbot.keyClick(grid, Qt.Key.Key_Right)
        assert grid.focused == 2
        qtbot.keyClick(grid, Qt.Key.Key_Return)
        assert ui.window.in_focus_view and ui.window.focus.pane is grid.panes[2]
        sid = grid.panes[2].info.session_id
        assert "write_to_file calc.py" in ui.window.focus.transcript.toPlainText()
        await ui.wait(lambda: "+    return a + b" in ui.window.focus.diff.text.toPlainText())
        assert re.fullmatch(r"\+[1-9]\d* −\d+", ui.window.focus.diff.summary.text())  # the diff's own counts
        qtbot.keyClicks(ui.window.focus.input, "Please follow up with a test")
        qtbot.keyClick(ui.window.focus.input, Qt.Key.Key_Return)
        await ui.wait(lambda: any("follow up" in json.dumps(r) for r in ui.server.requests))
        await ui.wait(lambda: ui.state(sid) is S.DONE and "followed up" in ui.window.focus.transcript.toPlainText())
        qtbot.keyClick(ui.window.focus, Qt.Key.Key_Escape)
        assert not ui.window.in_focus_view and ui.window.focus.pane is None

    ui.play(body)


def test_double_click_zooms_and_tool_line_expands(qtbot, fleet_ui: FleetUI) -> None:  # type: ignore[no-untyped-def]
    ui = fleet_ui

    async def body() -> None:
        (sid,) = await ui.create(auto_approve="all")
        await ui.wait(lambda: ui.state(sid) is S.DONE)
        pane = ui.window.panes[sid]
        ui.window.flush()
        await ui.wait(lambda: not pane.view.stale)
        tool = next(line for line in pane.doc.lines if line.style is LineStyle.TOOL)
        top = next(y for y, _end, line in pane.view._rows if line is tool)
        qtbot.mouseClick(pane.view, Qt.MouseButton.LeftButton, pos=pane.view.rect().topLeft() + _point(10, top + 2))
        assert tool.expanded
        qtbot.mouseDClick(pane.header, Qt.MouseButton.LeftButton)
        assert ui.window.in_focus_view
        assert '"path": "calc.py"' in ui.window.focus.transcript.toPlainText()

    ui.play(body)


def test_pause_focused_then_start_all(qtbot, fleet_ui: FleetUI) -> None:  # type: ignore[no-untyped-def]
    ui = fleet_ui

    async def body() -> None:
        first, second = await ui.create(2)
        await ui.wait(lambda: ui.state(first) is S.AWAITING_APPROVAL and ui.state(second) is S.AWAITING_APPROVAL)
        grid = ui.window.grid
        grid.set_focus(grid.panes.index(ui.window.panes[first]))
        qtbot.keyClick(ui.window, Qt.Key.Key_Return, Qt.KeyboardModifier.ControlModifier)  # approve focused
        await ui.wait(lambda: ui.state(first) is S.DONE)
        assert worktree_file(ui, first, "calc.py") == FIXED
        grid.set_focus(grid.panes.index(ui.window.panes[second]))
        qtbot.keyClick(ui.window, Qt.Key.Key_P, Qt.KeyboardModifier.ControlModifier)  # pause focused
        await ui.wait(lambda: ui.state(second) is S.PAUSED)
        assert not ui.window.panes[second].approval.isVisible()
        ui.window.start_all_action.trigger()
        # The interrupted action is never run again: the agent hears so and goes on.
        await ui.wait(lambda: ui.state(second) is S.DONE)
        assert worktree_file(ui, second, "calc.py") != FIXED

    ui.play(body)


def test_pause_all_and_commit_from_diff_tab(qtbot, fleet_ui: FleetUI) -> None:  # type: ignore[no-untyped-def]
    ui = fleet_ui

    async def body() -> None:
        sids = await ui.create(2)
        await ui.wait(lambda: all(ui.state(s) is S.AWAITING_APPROVAL for s in sids))
        (paused,) = await ui.create(task="Fix add() in calc.py; read it first", auto_approve="ask")
        await ui.wait(lambda: ui.state(paused) is S.AWAITING_APPROVAL)
        ui.window.pause_all_action.trigger()
        await asyncio.sleep(0.5)
        # the sessions that need you keep saying so: Pause all pauses only what works
        assert all(ui.state(s) is S.AWAITING_APPROVAL for s in (*sids, paused))
        assert ui.window.attention.waiting == 3 and "3 need you" in ui.window.summary_label.text()
        for sid in sids:
            ui.window.approvals.approve(ui.window.panes[sid])
        await ui.wait(lambda: all(ui.state(s) is S.DONE for s in sids))
        (done,) = await ui.create(auto_approve="edits", task="Fix add() again")
        await ui.wait(lambda: ui.state(done) is S.DONE)
        ui.window.show_focus(ui.window.panes[done])
        diff = ui.window.focus.diff
        await ui.wait(lambda: diff.commit_button.isEnabled())
        messages: list[str] = []
        ui.bridge.message.connect(messages.append)
        qtbot.mouseClick(diff.commit_button, Qt.MouseButton.LeftButton)
        await ui.wait(lambda: ui.window.review.dialog is not None)  # the message, drawn from the change
        assert "calc.py" in ui.window.review.dialog.message.toPlainText()
        qtbot.mouseClick(ui.window.review.dialog.go_button, Qt.MouseButton.LeftButton)
        await ui.wait(lambda: any(m.startswith("commit of") for m in messages))
        assert "done" in messages[-1]

    ui.play(body)


def _point(x: int, y: int):  # type: ignore[no-untyped-def]
    from PySide6.QtCore import QPoint

    return QPoint(x, y)


def test_pane_says_which_protocol_a_session_uses(qtbot, fleet_ui: FleetUI) -> None:  # type: ignore[no-untyped-def]
    from workstation.core import agent_events as ev
    from workstation.core.fleet_events import SessionAgentEvent

    ui = fleet_ui

    async def body() -> None:
        (sid,) = await ui.create(auto_approve="all")
        await ui.wait(lambda: ui.state(sid) is S.DONE)
        pane = ui.window.panes[sid]
        assert pane.info.protocol == "full"  # a model of unknown size that takes tools
        assert pane.info.where().endswith("· Act · full")
        ui.window.flush()
        assert any(line.text.startswith("full protocol: ") for line in pane.doc.lines)
        # an agent that repeated itself is switched to the guided protocol: the header says so
        ui.bridge.handle_agent_event(SessionAgentEvent(sid, 10_000, ev.ProtocolSelected(
            sid, ev.ToolProtocol.GUIDED, "the model repeated a call that had succeeded")))
        assert pane.info.protocol == "guided" and pane.info.where().endswith("· Act · guided")

    ui.play(body)


def test_ask_before_every_action_asks_for_reads_too(qtbot, fleet_ui: FleetUI) -> None:  # type: ignore[no-untyped-def]
    """"Ask before every action" means every action: a read waits for approval too; the
    default ("Run reads, ask before edits and commands") lets it run."""
    ui = fleet_ui

    async def body() -> None:
        from workstation.ui.dialogs.new_session import AUTO_APPROVE

        assert AUTO_APPROVE[0][0] == "reads" and AUTO_APPROVE[1] == ("ask", "Ask before every action, reads too")
        (asks,) = await ui.create(task="Fix add() in calc.py; read it first", auto_approve="ask")
        await ui.wait(lambda: ui.state(asks) is S.AWAITING_APPROVAL)
        assert "read_file calc.py" in ui.window.panes[asks].approval.summary.text()
        (reads,) = await ui.create(task="Fix add() in calc.py; read it first", auto_approve="reads")
        await ui.wait(lambda: ui.state(reads) is S.DONE)
        assert ui.state(asks) is S.AWAITING_APPROVAL

    ui.play(body)


def test_a_follow_up_to_a_working_session_is_taken_and_reaches_the_model(qtbot, fleet_ui: FleetUI) -> None:  # type: ignore[no-untyped-def]
    """Typed while the session waits for an approval (it works): the input clears, the
    transcript shows it, and the model's next request carries it once the action is approved
    (it was dropped without a word before)."""
    ui = fleet_ui

    async def body() -> None:
        (sid,) = await ui.create(1)
        await ui.wait(lambda: ui.state(sid) is S.AWAITING_APPROVAL)
        pane = ui.window.panes[sid]
        ui.window.grid.set_focus(ui.window.grid.panes.index(pane))
        qtbot.keyClick(ui.window.grid, Qt.Key.Key_Return)
        assert ui.window.in_focus_view and ui.window.focus.pane is pane
        qtbot.keyClicks(ui.window.focus.input, "also rename it")
        qtbot.keyClick(ui.window.focus.input, Qt.Key.Key_Return)
        await ui.wait(lambda: "also rename it" in ui.window.focus.transcript.toPlainText())
        assert ui.window.focus.input.text() == "" and "not sent" not in ui.window.notice_label.text()
        (request,) = ui.fleet.pending_approvals()
        from workstation.core.approvals import ApprovalDecision

        ui.fleet.resolve_approval(sid, request.request_id, ApprovalDecision.approve())
        await ui.wait(lambda: any("also rename it" in json.dumps(r) for r in ui.server.requests))

    ui.play(body)
