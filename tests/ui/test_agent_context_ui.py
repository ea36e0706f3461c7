"""The window's side of rules, MCP servers, images and adapters: the new-session dialog
picks an adapter, attaches and pastes images and names MCP servers; the pane shows the rules
its session follows; the focus view draws thumbnails and sends a follow-up with an image —
and the scripted engine gets all of it in its requests."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QGuiApplication, QImage

from tests.agent.test_images import png
from tests.ui.conftest import FleetUI
from workstation.core.session_state import SessionState as S
from workstation.ui.panes.transcript_doc import LineStyle

pytestmark = pytest.mark.gui

NOTES = Path(__file__).parents[1] / "agent" / "mcp_servers" / "notes_server.py"


def image_bytes(message: dict) -> list[bytes]:
    if not isinstance(message.get("content"), list):
        return []
    return [base64.b64decode(p["image_url"]["url"].split(",", 1)[1]) for p in message["content"]
            if p.get("type") == "image_url"]


def test_dialog_adapter_images_mcp_and_rules_in_the_pane(qtbot, fleet_ui: FleetUI, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    ui = fleet_ui
    (ui.repo / "AGENTS.md").write_text("Keep calc.py small.\n")
    subprocess.run(["git", "-C", str(ui.repo), "add", "AGENTS.md"], check=True)
    subprocess.run(["git", "-C", str(ui.repo), "-c", "user.name=t", "-c", "user.email=t@example.invalid",
                    "commit", "-qm", "rules"], check=True)
    vision = tmp_path / "vision-model"
    vision.mkdir()
    (vision / "config.json").write_text(json.dumps({"model_type": "llava", "vision_config": {}}))
    ui.server.model_root = str(vision)
    ui.server.adapters = {"style": str(tmp_path / "style")}
    ui.commands.adapters, ui.commands.takes_images, ui.commands.model = ("style",), True, ui.server.model
    mcp = tmp_path / "mcp.json"
    mcp.write_text(json.dumps({"mcpServers": {"notes": {"command": sys.executable, "args": [str(NOTES)]}}}))
    shot = png(tmp_path / "mock.png")

    async def body() -> None:
        qtbot.keyClick(ui.window, Qt.Key.Key_N, Qt.KeyboardModifier.ControlModifier)
        dialog = ui.window.new_session_dialog
        assert dialog.adapter.isEnabled() and dialog.images.attach_button.isEnabled()
        dialog.repo.setCurrentText(str(ui.repo))
        qtbot.keyClicks(dialog.task, "Fix add() in calc.py like the mock-up")
        dialog.adapter.setCurrentIndex(dialog.adapter.findData("style"))
        dialog.auto_approve.setCurrentIndex(dialog.auto_approve.findData("all"))
        assert dialog.images.add_path(shot)
        pasted = QImage(3, 3, QImage.Format.Format_RGB32)
        pasted.fill(QColor(0, 128, 0))
        QGuiApplication.clipboard().setImage(pasted)
        qtbot.keyClick(dialog.task, Qt.Key.Key_V, Qt.KeyboardModifier.ControlModifier)
        assert len(dialog.images.paths()) == 2  # the pasted screenshot, kept under the data folder
        assert Path(dialog.images.paths()[1]).parent == Path(ui.commands.attachments_dir())
        dialog.mcp_config.setText(str(tmp_path / "missing.json"))
        assert not dialog.create_button.isEnabled() and "does not exist" in dialog.mcp_error.text()
        dialog.mcp_config.setText(str(mcp))
        assert dialog.create_button.isEnabled()
        qtbot.mouseClick(dialog.create_button, Qt.MouseButton.LeftButton)
        await ui.wait(lambda: len(ui.window.panes) == 1)
        (sid,) = ui.window.panes
        await ui.wait(lambda: ui.state(sid) is S.DONE, 60)
        pane = ui.window.panes[sid]
        assert pane.info.rules == ("AGENTS.md",) and pane.info.adapter == "style"
        assert "⧉ style" in pane.info.where() and "§ AGENTS.md" in pane.info.where()
        ui.window.flush()
        images = [line for line in pane.doc.lines if line.style is LineStyle.IMAGE]
        assert images and len(images[0].images) == 2
        assert any("rules: AGENTS.md" in line.text for line in pane.doc.lines)
        assert any("MCP server notes: 5 tools" in line.text for line in pane.doc.lines)
        first = next(r for r in ui.server.requests if "<task>" in json.dumps(r["messages"][1]))
        assert first["model"] == "style"
        assert image_bytes(first["messages"][1])[0] == shot.read_bytes() and len(image_bytes(first["messages"][1])) == 2
        assert "Keep calc.py small." in first["messages"][0]["content"]
        assert any(t["function"]["name"] == "mcp__notes__add" for t in first["tools"])
        # the focus view draws the thumbnails, and a follow-up takes a pasted image
        ui.window.show_focus(pane)
        assert ui.window.in_focus_view and ui.window.focus.images.attach_button.isEnabled()
        ui.window.focus.transcript.viewport().grab()
        assert ui.window.focus.transcript.thumbnails_drawn >= 2
        after = png(tmp_path / "after.png", rgb=(9, 9, 200))
        assert ui.window.focus.images.add_path(after)
        qtbot.keyClicks(ui.window.focus.input, "Please follow up like this")
        qtbot.keyClick(ui.window.focus.input, Qt.Key.Key_Return)
        await ui.wait(lambda: any(image_bytes(m) == [after.read_bytes()] for r in ui.server.requests
                                  for m in r["messages"]), 30)

    ui.play(body)


def test_a_refused_follow_up_keeps_its_text_and_its_images(qtbot, fleet_ui: FleetUI, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A follow-up the fleet refuses (here: over its budget) goes back into the focus view
    whole: the text into the input, the attached images into the tray (they were dropped, and
    the user had to find and attach them again); images sent alone come back without the
    words the view gave them."""
    ui = fleet_ui
    vision = tmp_path / "vision-model"
    vision.mkdir()
    (vision / "config.json").write_text(json.dumps({"model_type": "llava", "vision_config": {}}))
    ui.server.model_root = str(vision)
    ui.commands.takes_images, ui.commands.model = True, ui.server.model
    shot = png(tmp_path / "mock.png", rgb=(9, 9, 200))

    async def body() -> None:
        (sid,) = await ui.create(1, auto_approve="all")
        await ui.wait(lambda: ui.state(sid) is S.DONE, 60)
        await ui.commands.set_budget(sid, 1, None)
        sent = len(ui.server.requests)
        focus = ui.window.focus
        ui.window.show_focus(ui.window.panes[sid])
        assert focus.images.add_path(shot)
        qtbot.keyClicks(focus.input, "Please follow up like this")
        qtbot.keyClick(focus.input, Qt.Key.Key_Return)
        await ui.wait(lambda: "budget reached" in ui.window.notice_label.text())
        assert ui.window.notice_label.text().endswith("(raise or clear its budget to continue)")
        assert focus.input.text() == "Please follow up like this"
        assert [Path(p) for p in focus.images.paths()] == [shot.resolve()]
        focus.input.clear()
        qtbot.mouseClick(focus.send_button, Qt.MouseButton.LeftButton)  # the image alone
        assert focus.images.paths() == ()
        await ui.wait(lambda: len(focus.images.paths()) == 1)
        assert focus.input.text() == ""
        assert len(ui.server.requests) == sent  # neither reached the model

    ui.play(body)


def test_dialog_turns_images_off_for_a_model_without_them(qtbot, fleet_ui: FleetUI) -> None:  # type: ignore[no-untyped-def]
    ui = fleet_ui
    ui.commands.takes_images, ui.commands.model = False, "smollm2"

    async def body() -> None:
        qtbot.keyClick(ui.window, Qt.Key.Key_N, Qt.KeyboardModifier.ControlModifier)
        dialog = ui.window.new_session_dialog
        assert not dialog.images.attach_button.isEnabled()
        assert "does not take images" in dialog.images.note.text()
        assert not dialog.adapter.isEnabled()  # no adapters served
        dialog.reject()

    ui.play(body)


def test_meter_strip_shows_tokens_per_adapter(qtbot) -> None:  # type: ignore[no-untyped-def]
    from workstation.telemetry.streams import ModelTokens
    from workstation.ui.meters.strip import MeterStrip

    strip = MeterStrip()
    qtbot.addWidget(strip)
    strip.show()
    strip.on_models((ModelTokens("tiny", 2, 900, 0, 100),))
    assert not strip.adapters.isVisible()  # one model: nothing to tell apart
    strip.on_models((ModelTokens("tiny", 2, 900, 0, 100), ModelTokens("tiny-lora", 3, 2400, 800, 150)))
    assert strip.adapters.isVisible() and strip.adapters.text() == "tiny 1.0k · tiny-lora 2.5k"
