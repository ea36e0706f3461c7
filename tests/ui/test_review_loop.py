"""See before you approve, and state at a glance — driven like a user would, against a real
fleet (real git, the real sandbox) whose agents talk to the scripted vLLM-format server."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt

from tests.helpers.prerequisites import needs_bwrap
from tests.ui.conftest import FleetUI
from workstation.core.session_state import SessionState as S
from workstation.ui import theme
from workstation.ui.panes.transcript_doc import LineStyle

pytestmark = pytest.mark.gui


def test_an_edit_approval_shows_the_change_as_a_diff(qtbot, fleet_ui: FleetUI) -> None:  # type: ignore[no-untyped-def]
    ui = fleet_ui

    async def body() -> None:
        (sid,) = await ui.create()
        await ui.wait(lambda: ui.state(sid) is S.AWAITING_APPROVAL)
        pane = ui.window.panes[sid]
        bar = pane.approval
        assert bar.preview.isVisible()  # the change, not only `write_to_file calc.py +2 −0`
        lines = bar.preview_text.splitlines()
        assert lines[:2] == ["--- a/calc.py", "+++ b/calc.py"]
        assert "-    return a - b" in lines and "+    return a + b" in lines
        ui.window.show_focus(pane)  # the focus view shows the same change, taller
        assert ui.window.focus.approval.preview_text == bar.preview_text
        assert ui.window.focus.approval.preview.height() >= bar.preview.height()
        qtbot.mouseClick(ui.window.focus.approval.approve_button, Qt.MouseButton.LeftButton)
        await ui.wait(lambda: ui.state(sid) is S.DONE)

    ui.play(body)


@needs_bwrap  # the approved command runs inside the sandbox
def test_a_command_shows_its_output_and_exit_code_inline_and_in_the_output_tab(
        qtbot, fleet_ui: FleetUI) -> None:  # type: ignore[no-untyped-def]
    ui = fleet_ui

    async def body() -> None:
        from workstation.ui.bridge import FleetBridge
        from workstation.ui.main_window import MainWindow

        (sid,) = await ui.create(task="Please run the check")
        await ui.wait(lambda: ui.state(sid) is S.AWAITING_APPROVAL)
        pane = ui.window.panes[sid]
        assert pane.approval.summary.text().startswith("$ python3 -c")
        assert not pane.approval.preview.isVisible()
        qtbot.mouseClick(pane.approval.approve_button, Qt.MouseButton.LeftButton)
        await ui.wait(lambda: ui.state(sid) is S.DONE)
        ui.window.flush()
        (line,) = [ln for ln in pane.doc.lines if ln.style in (LineStyle.TOOL, LineStyle.ERROR)
                   and ln.text.startswith("$ ")]
        assert line.text.endswith("✗ exit 1") and line.style is LineStyle.ERROR  # add() subtracts
        assert line.detail.strip() == "add(2, 3) = -1"  # what the line expands to: the output
        ui.window.show_focus(pane)
        output = ui.window.focus.output.toPlainText()
        assert output.startswith("$ python3 -c") and "add(2, 3) = -1\n✗ exit 1" in output
        # after a restart the Output tab comes from the store (the live chunks were never stored)
        other = MainWindow(ui.window.settings)
        qtbot.addWidget(other)
        bridge = FleetBridge(ui.fleet, other)
        await bridge.load_existing()
        stored = bridge.output_of(sid)
        assert "add(2, 3) = -1" in stored and "✗ exit 1" in stored
        bridge.close()

    ui.play(body)


def test_each_state_has_its_own_colour_and_icon(qtbot, fleet_ui: FleetUI) -> None:  # type: ignore[no-untyped-def]
    from workstation.core import agent_events as ev
    from workstation.core.fleet_events import SessionAgentEvent, SessionStateChanged

    ui = fleet_ui

    async def body() -> None:
        approval, question = await ui.create(2, task="Fix add() in calc.py")
        await ui.wait(lambda: ui.state(approval) is S.AWAITING_APPROVAL)
        (asks,) = await ui.create(task="Fix add(); ask me first", auto_approve="all")
        await ui.wait(lambda: ui.state(asks) is S.NEEDS_INPUT)
        window = ui.window
        ui.window.flush()
        # a question is rendered once (not as a tool line and again as the question)
        texts = [ln.text for ln in window.panes[asks].doc.lines]
        assert sum("Should add() also take floats?" in t for t in texts) == 1
        looks = {name: window.panes[sid].info.look() for name, sid in (("approval", approval), ("question", asks))}
        assert (looks["approval"].icon, looks["approval"].word) == ("warning", "needs approval")
        assert (looks["question"].icon, looks["question"].word) == ("question", "asked you")
        # stuck after mistakes, failed and done, on the other session's pane (events as the fleet sends them)
        pane = window.panes[question]
        ui.bridge.handle_agent_event(SessionAgentEvent(question, 10_000, ev.MistakeCounted(question, 3, 3, "x")))
        ui.bridge.handle_fleet_event(SessionStateChanged(question, S.AWAITING_APPROVAL, S.NEEDS_INPUT, "mistakes"))
        stuck = pane.info.look()
        assert (stuck.icon, stuck.word, stuck.colour) == ("stuck", "stuck · mistakes", theme.ORANGE)
        ui.bridge.handle_fleet_event(SessionStateChanged(question, S.NEEDS_INPUT, S.FAILED, "engine error"))
        failed = pane.info.look()
        assert (failed.icon, failed.colour, failed.tint) == ("error", theme.RED, True)
        assert failed.border_px > stuck.border_px  # failed stands out more than stuck
        colours = {looks["approval"].colour.name(), looks["question"].colour.name(), stuck.colour.name(),
                   failed.colour.name(), theme.state_look(S.DONE).colour.name()}
        assert len(colours) == 5
        # the pixels say so too: the failed pane's frame is red, the waiting one's amber
        window.grid.relayout()
        img = pane.grab().toImage()
        assert img.pixelColor(1, img.height() // 2).name() == theme.RED.name()
        waiting = window.panes[approval].grab().toImage()
        assert waiting.pixelColor(0, waiting.height() // 2).name() == theme.AMBER.name()

    ui.play(body)
