"""The window on its own: grid layout and pages, repaint of visible panes only, the
new-session dialog's inline validation, settings, the engine dock."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PySide6.QtCore import QPoint, Qt

from tests.ui.conftest import run, wait_until
from workstation.core.session_state import SessionState as S
from workstation.ui.backend import EngineView
from workstation.ui.panes.session_pane import PaneInfo

pytestmark = pytest.mark.gui


@pytest.fixture
def window(qtbot, settings):  # type: ignore[no-untyped-def]
    from workstation.ui.main_window import MainWindow

    win = MainWindow(settings)
    win.flush_timer.stop()
    win.resize(1920, 1080)
    win.show()
    qtbot.waitExposed(win)
    yield win
    win.allow_close()
    win.close()


def add_panes(window, count: int) -> list[str]:  # type: ignore[no-untyped-def]
    ids = []
    for i in range(count):
        sid = f"s{i}"
        window.add_session(PaneInfo(sid, f"session-{i}", repo="repo", branch=f"ws/s{i}", mode="Act",
                                    state=S.RUNNING))
        ids.append(sid)
    return ids


def test_empty_state_explains_what_to_do(window) -> None:  # type: ignore[no-untyped-def]
    assert window.grid.empty.isVisible()
    assert "Ctrl+N" in window.grid.empty.text()


def test_32_panes_fill_8_by_4(qtbot, window) -> None:  # type: ignore[no-untyped-def]
    add_panes(window, 32)
    shape = window.grid.shape
    assert (shape.cols, shape.rows, shape.pages) == (8, 4, 1)
    assert all(p.isVisible() for p in window.grid.panes)
    assert not window.grid.empty.isVisible()
    widths = {p.width() for p in window.grid.panes}
    assert max(widths) - min(widths) <= 1 and min(widths) > 200
    assert window.summary_label.text().startswith("32 sessions · 32 running")


def test_pages_and_arrow_keys_across_pages(qtbot, window) -> None:  # type: ignore[no-untyped-def]
    add_panes(window, 40)
    grid = window.grid
    assert grid.shape.pages == 2 and grid.page == 0
    assert "page 1/2" in window.page_label.text()
    assert sum(p.isVisible() for p in grid.panes) == 32
    grid.setFocus()
    grid.set_focus(27)  # bottom row of page 1 (8 x 4)
    qtbot.keyClick(grid, Qt.Key.Key_Down)
    assert grid.page == 1 and grid.focused == 35 and grid.panes[35].isVisible()
    assert not grid.panes[0].isVisible()
    qtbot.keyClick(grid, Qt.Key.Key_PageUp)
    assert grid.page == 0 and grid.panes[0].isVisible()
    qtbot.keyClick(grid, Qt.Key.Key_PageDown)
    assert grid.page == 1 and "page 2/2" in window.page_label.text()
    qtbot.keyClick(grid, Qt.Key.Key_Right)
    assert grid.focused == grid.shape.page_range(1)[0] + 1


def test_flush_repaints_only_visible_panes(qtbot, window) -> None:  # type: ignore[no-untyped-def]
    add_panes(window, 40)
    visible, hidden = window.panes["s0"], window.panes["s39"]
    assert visible.isVisible() and not hidden.isVisible()
    qtbot.waitUntil(lambda: not visible.view.stale)
    for token in ["Hello", " from", " the", " model"]:
        visible.doc.stream(token)
        hidden.doc.stream(token)
    assert visible.doc.text() == "" and visible.doc.pending_tokens == 4
    window.flush()
    assert visible.doc.text() == hidden.doc.text() == "Hello from the model"  # both documents
    qtbot.waitUntil(lambda: not visible.view.stale)  # the visible tile painted
    assert hidden.view.stale  # the hidden one did not
    window.grid.set_page(1)
    qtbot.waitUntil(lambda: not hidden.view.stale)


def test_amber_waiting_pane_counts_and_notifies(qtbot, window) -> None:  # type: ignore[no-untyped-def]
    (sid,) = add_panes(window, 1)
    notes: list[str] = []
    window.attention.notified.connect(lambda _t, m: notes.append(m))
    pane = window.panes[sid]
    window.update_session(PaneInfo(sid, "session-0", state=S.AWAITING_APPROVAL))
    window.show_approval(sid, "execute_command", "$ pytest -q", '{"command": "pytest -q"}')
    assert pane.waiting and pane.approval.isVisible()
    assert window.approve_all_action.text() == "Approve (1)"
    assert window.attention.waiting == 1 and notes == ["session-0 waits for your approval"]
    window.update_session(PaneInfo(sid, "session-0", state=S.FAILED), "budget exhausted")
    assert not pane.approval.isVisible() and window.attention.waiting == 0
    assert notes[-1] == "session-0 failed: budget exhausted"


def test_new_session_dialog_validates_inline(qtbot, window, tmp_path: Path, calc_repo: Path) -> None:  # type: ignore[no-untyped-def]
    from workstation.ui.dialogs.new_session import NewSessionDialog

    dialog = NewSessionDialog(window, None)
    qtbot.addWidget(dialog)
    dialog.open()
    create = dialog.create_button
    dialog.repo.setCurrentText(str(tmp_path / "missing"))
    assert dialog.repo_error.isVisible() and "does not exist" in dialog.repo_error.text()
    (tmp_path / "plain").mkdir()
    dialog.repo.setCurrentText(str(tmp_path / "plain"))
    assert "not a git repository" in dialog.repo_error.text()
    dialog.repo.setCurrentText(str(calc_repo))
    assert not dialog.repo_error.isVisible()
    assert not create.isEnabled()  # no task yet
    qtbot.keyClicks(dialog.task, "Fix add()")
    assert create.isEnabled()
    qtbot.keyClicks(dialog.base_branch, "bad branch")
    assert dialog.branch_error.isVisible() and not create.isEnabled()
    dialog.base_branch.setText("main")
    assert create.isEnabled()
    qtbot.keyClicks(dialog.clone_url, "https://example.invalid/x.git")
    assert "not both" in dialog.repo_error.text() and not create.isEnabled()
    dialog.repo.setCurrentText("")
    assert create.isEnabled()
    dialog.clone_url.setText("ftp://nope")
    assert "clone URL" in dialog.repo_error.text()
    dialog.clone_url.setText("")
    dialog.repo.setCurrentText(str(calc_repo))
    dialog.plan.setChecked(True)
    dialog.copies.setValue(4)
    dialog.auto_approve.setCurrentIndex(2)
    got = []
    dialog.submitted.connect(got.append)
    qtbot.mouseClick(create, Qt.MouseButton.LeftButton)
    (request,) = got
    assert (request.repo_path, request.task, request.mode, request.copies, request.auto_approve,
            request.base_branch) == (str(calc_repo), "Fix add()", "plan", 4, "edits", "main")


def test_settings_dialog_saves_and_refuses_bad_values(qtbot, window, settings) -> None:  # type: ignore[no-untyped-def]
    qtbot.keyClick(window, Qt.Key.Key_Comma, Qt.KeyboardModifier.ControlModifier)
    dialog = window.settings_dialog
    assert dialog is not None and dialog.isVisible()
    fields = dialog.fields
    fields["telemetry"]["gpu_hourly_usd"].widget.setText("a lot")
    dialog.buttons.accepted.emit()
    assert dialog.isVisible() and "gpu_hourly_usd" in dialog.error.text()
    fields["telemetry"]["gpu_hourly_usd"].widget.setText("2.5")
    fields["ui"]["flush_hz"].widget.setValue(20.0)
    dialog.buttons.accepted.emit()
    assert not dialog.isVisible()
    saved = json.loads(settings.settings_file.read_text())
    assert saved["ui"]["flush_hz"] == 20.0 and saved["telemetry"]["gpu_hourly_usd"] == 2.5
    assert window.flush_timer.interval() == 50
    assert fields["engine"]["external_url"].widget.toolTip().startswith("Use an OpenAI-compatible endpoint")


class FakeEngine:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str | None]] = []
        self.state = "ready"

    def view(self) -> EngineView:
        return EngineView(state=self.state, model="smollm2", profile="default",
                          profiles=("default", "vllm-defaults"), detail="ready in 26.0 s")

    def log_tail(self) -> list[str]:
        return ["INFO started"]

    async def start(self, profile: str | None = None) -> None:
        self.calls.append(("start", profile))

    async def stop(self) -> None:
        self.calls.append(("stop", None))

    async def restart(self, profile: str | None = None) -> None:
        self.calls.append(("restart", profile))


def test_engine_dock_buttons_and_log(qtbot, qloop, settings) -> None:  # type: ignore[no-untyped-def]
    from workstation.ui.main_window import MainWindow

    engine = FakeEngine()
    window = MainWindow(settings, engine=engine)
    window.show()
    try:
        assert "smollm2 · ready" in window.engine_button.text()
        assert not window.engine_dock.isVisible()
        qtbot.mouseClick(window.engine_button, Qt.MouseButton.LeftButton)
        dock = window.engine_dock
        assert dock.isVisible() and not dock.start_button.isEnabled() and dock.stop_button.isEnabled()
        dock.profile.setCurrentText("vllm-defaults")
        qtbot.mouseClick(dock.restart_button, Qt.MouseButton.LeftButton)
        qtbot.mouseClick(dock.stop_button, Qt.MouseButton.LeftButton)
        run(qloop, wait_until(lambda: len(engine.calls) == 2))
        assert engine.calls == [("restart", "vllm-defaults"), ("stop", None)]
        engine.state = "stopped"
        window.set_engine_view(engine.view())
        assert dock.start_button.isEnabled() and not dock.stop_button.isEnabled()
        qtbot.mouseClick(dock.start_button, Qt.MouseButton.LeftButton)
        run(qloop, wait_until(lambda: len(engine.calls) == 3))
        assert engine.calls[-1] == ("start", "default")  # the view reset the profile it reports
        engine.state = "starting"  # a start can be cancelled from the dock
        window.set_engine_view(engine.view())
        assert dock.stop_button.text() == "Cancel start" and dock.stop_button.isEnabled()
        qtbot.mouseClick(dock.stop_button, Qt.MouseButton.LeftButton)
        run(qloop, wait_until(lambda: len(engine.calls) == 4))
        assert engine.calls[-1] == ("stop", None)
        engine.state = "stopped"
        window.set_engine_view(engine.view())
        assert dock.stop_button.text() == "Stop"
        for i in range(5):
            window.engine_log_line(f"line {i}")
        window.flush()
        assert dock.log.toPlainText().endswith("line 3\nline 4")
    finally:
        window.allow_close()
        window.close()


def test_the_cost_follows_the_summary_with_its_one_separator(window) -> None:  # type: ignore[no-untyped-def]
    """The cost was a label of its own that began with "· ": beside the bar's own gap it read
    "77 tok/s  · $0.034"."""
    add_panes(window, 2)
    window.set_token_rate(77.0)
    window.set_fleet_cost("$0.034 at m1 prices")
    assert window.summary_label.text() == "2 sessions · 2 running · 77 tok/s · $0.034 at m1 prices"


def test_the_new_session_dialog_keeps_its_size_while_typing(qtbot, window, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """An error line that appeared (and went) under a field while typing resized the form, and
    its buttons moved under the pointer."""
    from workstation.ui.dialogs.new_session import NewSessionDialog

    dialog = NewSessionDialog(window, None)
    qtbot.addWidget(dialog)
    dialog.show()
    qtbot.waitExposed(dialog)
    size = dialog.size()
    (tmp_path / "plain").mkdir()
    for field, text in ((dialog.repo.lineEdit(), str(tmp_path / "plain") + "/a-long-folder-name" * 6),
                        (dialog.base_branch, "bad branch"), (dialog.task, "Fix add()"),
                        (dialog.mcp_config, str(tmp_path / "missing.json")),
                        (dialog.clone_url, "https://example.invalid/x.git")):
        qtbot.keyClicks(field, text)
        qtbot.wait(20)  # the layout's deferred resize
        assert dialog.size() == size, field.objectName() or text
    assert dialog.repo_error.isVisible() and dialog.branch_error.isVisible()
    for field in (dialog.repo.lineEdit(), dialog.base_branch, dialog.mcp_config, dialog.clone_url):
        field.clear()
        qtbot.wait(20)
        assert dialog.size() == size


def test_a_status_notice_keeps_its_details_in_the_tooltip(window) -> None:  # type: ignore[no-untyped-def]
    window.show_status("Kept 1 demo session(s) you worked in, as yours now (fix-median)", 20000,
                       details="fix-median: you sent it 1 message")
    assert "fix-median" in window.notice_label.text()
    assert window.notice_label.toolTip().endswith("\n\nfix-median: you sent it 1 message")
    window.show_status("plain")
    assert window.notice_label.toolTip() == "plain"


def test_a_follow_up_not_sent_goes_back_into_the_focus_input(window) -> None:  # type: ignore[no-untyped-def]
    (sid, other) = add_panes(window, 2)
    window.show_focus(window.panes[sid])
    window.focus.keep_unsent(other, "for the other one")  # not the session shown: left alone
    assert window.focus.input.text() == ""
    window.focus.keep_unsent(sid, "also rename it")
    assert window.focus.input.text() == "also rename it"
    window.focus.input.setText("typed anew")
    window.focus.keep_unsent(sid, "also rename it")  # what the user typed since wins
    assert window.focus.input.text() == "typed anew"


def test_a_click_on_a_tiles_tool_line_expands_it_and_focuses_the_tile(qtbot, window) -> None:  # type: ignore[no-untyped-def]
    """The click toggled the line and stopped there: the focus stayed on another tile, so
    Ctrl+Enter or Enter then acted on a tile the user had not clicked."""
    from workstation.ui.panes.transcript_doc import LineStyle

    first, second = add_panes(window, 2)
    pane = window.panes[second]
    tool = pane.doc.add_line("▸ read_file calc.py", LineStyle.TOOL, detail="def add(a, b): ...")
    window.grid.set_focus(0)
    window.flush()
    pane.view.repaint()
    top = next(y for y, _end, line in pane.view._rows if line is tool)
    qtbot.mouseClick(pane.view, Qt.MouseButton.LeftButton, pos=pane.view.rect().topLeft() + QPoint(10, top + 2))
    assert tool.expanded
    assert window.grid.focused_pane() is pane
