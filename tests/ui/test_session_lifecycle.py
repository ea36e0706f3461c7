"""Confirm before you destroy, manage sessions from their pane, merge in one step — driven
like a user would, against a real fleet (real git worktrees and branches) whose agents talk to
the scripted vLLM-format server."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from PySide6.QtCore import QEvent, Qt
from PySide6.QtWidgets import QApplication

from tests.ui.conftest import FleetUI
from workstation.core.session_state import SessionState as S

pytestmark = pytest.mark.gui


def _git(repo: Path, *args: str) -> str:
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.invalid", "PATH": "/usr/bin:/bin"}
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env=env).stdout


def _click(qtbot, button) -> None:  # type: ignore[no-untyped-def]
    assert button.isEnabled(), button.text()
    qtbot.mouseClick(button, Qt.MouseButton.LeftButton)


def _cancel(qtbot, dialog) -> None:  # type: ignore[no-untyped-def]
    from PySide6.QtWidgets import QDialogButtonBox

    _click(qtbot, dialog.buttons.button(QDialogButtonBox.StandardButton.Cancel))


async def _done_session(ui: FleetUI) -> str:
    (sid,) = await ui.create(auto_approve="all")
    await ui.wait(lambda: ui.state(sid) is S.DONE)
    ui.window.flush()
    return sid


# ----- 2. destructive actions ask, naming what they affect -----

def test_approve_all_asks_listing_each_action_first(qtbot, fleet_ui: FleetUI) -> None:  # type: ignore[no-untyped-def]
    ui = fleet_ui

    async def body() -> None:
        a, b = await ui.create(2)
        await ui.wait(lambda: ui.state(a) is S.AWAITING_APPROVAL and ui.state(b) is S.AWAITING_APPROVAL)
        window = ui.window
        assert window.approve_all_action.text() == "Approve (2)"
        window.approve_all_action.trigger()
        dialog = window.confirmations.dialog
        assert dialog is not None and dialog.headline.text() == "Approve 2 waiting actions in 2 sessions?"
        assert sorted(dialog.items) == sorted(f"{window.panes[s].info.name}: write_to_file calc.py" for s in (a, b))
        assert len(dialog.items) == 2 and "2 file edits" in dialog.note.text()
        assert dialog.buttons.button(dialog.buttons.StandardButton.Cancel).isDefault()  # Enter does not approve
        _cancel(qtbot, dialog)
        await ui.wait(lambda: window.confirmations.dialog is None)
        assert ui.state(a) is S.AWAITING_APPROVAL and ui.state(b) is S.AWAITING_APPROVAL
        window.approve_all_action.trigger()
        _click(qtbot, window.confirmations.dialog.confirm_button)
        await ui.wait(lambda: ui.state(a) is S.DONE and ui.state(b) is S.DONE)

    ui.play(body)


def test_discard_names_the_branch_and_its_changes_and_then_archives(qtbot, fleet_ui: FleetUI) -> None:  # type: ignore[no-untyped-def]
    ui = fleet_ui

    async def body() -> None:
        sid = await _done_session(ui)
        window = ui.window
        rec = ui.fleet.record(sid)
        window.show_focus(window.panes[sid])
        window.focus.tabs.setCurrentWidget(window.focus.diff)
        await ui.wait(lambda: "calc.py" in window.focus.diff.text.toPlainText())
        _click(qtbot, window.focus.diff.discard_button)
        await ui.wait(lambda: window.confirmations.dialog is not None)
        dialog = window.confirmations.dialog
        assert rec.branch in dialog.headline.text()
        assert any(item.startswith("calc.py") for item in dialog.items)
        assert "cannot be undone" in dialog.note.text()
        _cancel(qtbot, dialog)
        await ui.wait(lambda: window.confirmations.dialog is None)
        assert "return a + b" in (Path(rec.worktree_path) / "calc.py").read_text()  # nothing happened
        _click(qtbot, window.focus.diff.discard_button)
        await ui.wait(lambda: window.confirmations.dialog is not None)
        _click(qtbot, window.confirmations.dialog.confirm_button)
        await ui.wait(lambda: sid not in window.panes)  # it left the grid for the archive
        assert "return a - b" in (Path(rec.worktree_path) / "calc.py").read_text()
        assert ui.fleet.record(sid).archived == "its work was discarded"

    ui.play(body)


class _Engine:
    """The engine owner's verbs, recorded (the confirmation is what is tested here)."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    async def stop(self) -> None:
        self.calls.append("stop")


def test_engine_stop_with_requests_in_flight_asks_naming_the_sessions(qtbot, fleet_ui: FleetUI) -> None:  # type: ignore[no-untyped-def]
    from workstation.core.fleet_events import GenerationSlotsChanged, SessionStateChanged

    ui = fleet_ui

    async def body() -> None:
        import asyncio

        (sid,) = await ui.create()
        await ui.wait(lambda: ui.state(sid) is S.AWAITING_APPROVAL)
        window = ui.window
        engine = window.engine = _Engine()  # type: ignore[assignment]
        window.engine_dock.stop_requested.emit()  # nothing in flight: it stops at once
        await ui.wait(lambda: engine.calls == ["stop"])
        # one request in flight, as the fleet reports it
        ui.bridge.handle_fleet_event(GenerationSlotsChanged(1, 0, 8))
        ui.bridge.handle_fleet_event(SessionStateChanged(sid, S.AWAITING_APPROVAL, S.RUNNING, "generating"))
        window.engine_dock.stop_requested.emit()
        dialog = window.confirmations.dialog
        assert dialog is not None and dialog.headline.text() == "Stop the engine while 1 request is in flight?"
        assert dialog.items == [window.panes[sid].info.name]
        _cancel(qtbot, dialog)
        await asyncio.sleep(0.05)
        assert engine.calls == ["stop"]
        window.engine_dock.stop_requested.emit()
        _click(qtbot, window.confirmations.dialog.confirm_button)
        await ui.wait(lambda: engine.calls == ["stop", "stop"])
        window.engine = None

    ui.play(body)


def test_quitting_with_a_pending_approval_asks_first(qtbot, fleet_ui: FleetUI) -> None:  # type: ignore[no-untyped-def]
    ui = fleet_ui

    async def body() -> None:
        (sid,) = await ui.create()
        await ui.wait(lambda: ui.state(sid) is S.AWAITING_APPROVAL)
        window = ui.window
        asked: list[bool] = []
        window.close_requested.connect(lambda: asked.append(True))
        assert ui.commands.waiting_actions() == {sid: "write_to_file calc.py"}  # the fleet's approvals desk
        window.panes[sid].approval.summary.setText("what the pane shows  — is not read")
        window.close()
        dialog = window.confirmations.dialog
        assert dialog is not None and dialog.headline.text() == "Quit with 1 waiting for you?"
        assert dialog.items == [f"{window.panes[sid].info.name}: waits for approval of write_to_file calc.py"]
        assert "resumes" in dialog.note.text()
        _cancel(qtbot, dialog)
        assert window.isVisible() and not asked  # still open, nothing shut down
        window.close()
        _click(qtbot, window.confirmations.dialog.confirm_button)
        assert asked == [True]  # the app's shutdown starts

    ui.play(body)


# ----- 3. the pane's menu: stop, restart, rename, archive, remove; checkpoints restore -----

def _menu_action(ui: FleetUI, sid: str, what: str):  # type: ignore[no-untyped-def]
    menu = ui.window.session_actions.open_menu(ui.window.panes[sid])
    assert menu is not None
    (action,) = [a for a in menu.actions() if a.data() == what]
    return action


def test_the_pane_menu_renames_archives_brings_back_and_removes(qtbot, fleet_ui: FleetUI) -> None:  # type: ignore[no-untyped-def]
    ui = fleet_ui

    async def body() -> None:
        sid = await _done_session(ui)
        window = ui.window
        rec = ui.fleet.record(sid)
        branch, worktree = rec.branch, Path(rec.worktree_path)
        menu = window.session_actions.open_menu(window.panes[sid])
        whats = [a.data() for a in menu.actions() if a.data()]
        for what in ("stop", "restart", "rename", "merge", "archive", "remove"):
            assert what in whats
        assert not [a for a in menu.actions() if a.data() == "stop"][0].isEnabled()  # done: nothing to stop
        # rename: the grid shows the new name, the branch keeps its own
        _menu_action(ui, sid, "rename").trigger()
        dialog = window.session_actions.dialog
        assert branch in dialog.labelText()
        dialog.setTextValue("calc-fix")
        dialog.accept()
        await ui.wait(lambda: window.panes[sid].info.name == "calc-fix")
        assert ui.fleet.record(sid).branch == branch
        # archive: it leaves the grid; the archive lists it and brings it back with its history
        _menu_action(ui, sid, "archive").trigger()
        await ui.wait(lambda: sid not in window.panes)
        archive = window.session_actions.open_archive()
        assert archive.list.count() == 1 and "calc-fix" in archive.list.item(0).text()
        archive.list.setCurrentRow(0)
        _click(qtbot, archive.back_button)
        await ui.wait(lambda: sid in window.panes)
        await ui.wait(lambda: archive.list.count() == 0)  # the row leaves once the session is back
        await ui.wait(lambda: any("add() adds now." in ln.text for ln in window.panes[sid].doc.lines))
        # remove: the confirmation names the worktree and the branch; yes deletes both
        _menu_action(ui, sid, "remove").trigger()
        confirm = window.confirmations.dialog
        assert f"worktree {worktree}" in confirm.items and any(branch in i for i in confirm.items)
        _click(qtbot, confirm.confirm_button)
        await ui.wait(lambda: sid not in window.panes)
        await ui.wait(lambda: not worktree.exists())
        assert branch not in _git(ui.repo, "branch", "--list", branch)

    ui.play(body)


def test_an_unarchive_that_fails_leaves_the_session_listed(qtbot, fleet_ui: FleetUI, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    ui = fleet_ui

    async def body() -> None:
        import asyncio

        from workstation.core.errors import UserError

        sid = await _done_session(ui)
        window = ui.window
        _menu_action(ui, sid, "archive").trigger()
        await ui.wait(lambda: sid not in window.panes)
        archive = window.session_actions.open_archive()
        archive.list.setCurrentRow(0)

        async def refuse(session_id: str) -> None:
            raise UserError("its worktree is gone")

        monkeypatch.setattr(window.commands, "unarchive", refuse)
        _click(qtbot, archive.back_button)
        await asyncio.sleep(0.3)
        # the session did not come back: it stays in the archive, to try again or remove
        assert sid not in window.panes
        assert archive.list.count() == 1 and archive.back_button.isEnabled()

    ui.play(body)


def test_a_session_removed_from_the_archive_leaves_its_list(qtbot, fleet_ui: FleetUI) -> None:  # type: ignore[no-untyped-def]
    ui = fleet_ui

    async def body() -> None:
        import asyncio

        sid = await _done_session(ui)
        window = ui.window
        worktree = Path(ui.fleet.record(sid).worktree_path)
        _menu_action(ui, sid, "archive").trigger()
        await ui.wait(lambda: sid not in window.panes)
        archive = window.session_actions.open_archive()
        assert archive.list.count() == 1 and archive.empty.isHidden()
        archive.list.setCurrentRow(0)
        _click(qtbot, archive.remove_button)
        _click(qtbot, window.confirmations.dialog.confirm_button)
        await ui.wait(lambda: not worktree.exists())
        # the row goes with the session; nothing is left to select or remove twice
        await ui.wait(lambda: archive.list.count() == 0)
        assert not archive.empty.isHidden() and not archive.remove_button.isEnabled()
        # once the dialog is closed and gone, a later removal reaches no dead dialog
        archive.reject()
        await asyncio.sleep(0.05)
        QApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
        ui.bridge.session_removed.emit("another-session")

    ui.play(body)


def test_a_checkpoint_is_restored_from_the_focus_view(qtbot, fleet_ui: FleetUI) -> None:  # type: ignore[no-untyped-def]
    ui = fleet_ui

    async def body() -> None:
        sid = await _done_session(ui)
        window = ui.window
        worktree = Path(ui.fleet.record(sid).worktree_path)
        assert "return a + b" in (worktree / "calc.py").read_text()
        window.show_focus(window.panes[sid])
        checkpoints = window.focus.checkpoints
        await ui.wait(lambda: checkpoints.count() >= 1)
        checkpoints.list.setCurrentRow(0)
        _click(qtbot, checkpoints.restore_button)
        dialog = window.review.dialog
        assert dialog is not None and dialog.both.isChecked()
        dialog.files.setChecked(True)  # files only
        _click(qtbot, dialog.restore_button)
        # the first checkpoint is taken before the agent's first change
        await ui.wait(lambda: "return a - b" in (worktree / "calc.py").read_text())
        window.flush()
        await ui.wait(lambda: any(ln.text.startswith("restored checkpoint") for ln in window.panes[sid].doc.lines))

    ui.play(body)


def test_a_new_session_is_scrolled_into_view(qtbot, fleet_ui: FleetUI) -> None:  # type: ignore[no-untyped-def]
    ui = fleet_ui

    async def body() -> None:
        window = ui.window
        window.grid.max_per_page = 1
        window.grid.relayout()
        first, second = await ui.create(2)
        (third,) = await ui.create()
        assert window.grid.focused_pane() is window.panes[third]
        assert window.grid.visible_panes() == [window.panes[third]]

    ui.play(body)


# ----- 4. one-step merge -----

def test_commit_and_merge_in_one_step_archives_the_session(qtbot, fleet_ui: FleetUI) -> None:  # type: ignore[no-untyped-def]
    ui = fleet_ui

    async def body() -> None:
        sid = await _done_session(ui)
        window = ui.window
        window.show_focus(window.panes[sid])
        await ui.wait(lambda: window.focus.diff.merge_button.isEnabled())  # once the diff is read
        _click(qtbot, window.focus.diff.merge_button)
        await ui.wait(lambda: window.review.dialog is not None)
        dialog = window.review.dialog
        message = dialog.message.toPlainText()
        assert message.splitlines()[0] == "add() adds now."  # drawn from its result and changes
        assert "- update calc.py (+1 −1)" in message
        assert dialog.into.currentText() == "main"
        assert f"main is checked out in {ui.repo}" in dialog.warning.text()  # names what changes
        dialog.message.setPlainText("Fix add(): it subtracted\n\nSession: calc")
        _click(qtbot, dialog.go_button)
        await ui.wait(lambda: sid not in window.panes)  # merged: it went to the archive
        assert "return a + b" in (ui.repo / "calc.py").read_text()
        assert "Fix add(): it subtracted" in _git(ui.repo, "log", "--format=%s", "main")
        assert ui.fleet.record(sid).archived.startswith("merged into main")

    ui.play(body)


def test_a_merge_conflict_is_shown_with_its_files_and_the_target_is_untouched(qtbot, fleet_ui: FleetUI) -> None:  # type: ignore[no-untyped-def]
    ui = fleet_ui

    async def body() -> None:
        sid = await _done_session(ui)
        (ui.repo / "calc.py").write_text("def add(a, b):\n    return b + a  # main's fix\n")
        _git(ui.repo, "commit", "-qam", "main fixed it differently")
        head = _git(ui.repo, "rev-parse", "main").strip()
        window = ui.window
        window.show_focus(window.panes[sid])
        await ui.wait(lambda: window.focus.diff.merge_button.isEnabled())  # once the diff is read
        _click(qtbot, window.focus.diff.merge_button)
        await ui.wait(lambda: window.review.dialog is not None)
        dialog = window.review.dialog
        _click(qtbot, dialog.go_button)
        await ui.wait(lambda: dialog.conflicts.isVisible())
        assert dialog.conflicts.toPlainText().splitlines() == ["calc.py"]
        assert "main is unchanged" in dialog.problem.text()
        assert dialog.isVisible() and sid in window.panes  # the dialog stays, the session stays
        assert _git(ui.repo, "rev-parse", "main").strip() == head

    ui.play(body)


def test_the_diff_tab_follows_the_worktree_and_merge_waits_only_while_generating(
        qtbot, fleet_ui: FleetUI) -> None:  # type: ignore[no-untyped-def]
    ui = fleet_ui

    async def body() -> None:
        (sid,) = await ui.create()
        await ui.wait(lambda: ui.state(sid) is S.AWAITING_APPROVAL)
        window = ui.window
        window.show_focus(window.panes[sid])
        window.focus.tabs.setCurrentWidget(window.focus.diff)
        await ui.wait(lambda: window.focus.diff.summary.text() == "No changes yet.")
        # waiting for approval is not "still working": the merge dialog opens and says what happens
        plan = await ui.commands.review_plan(sid)
        assert not plan.working and plan.waiting_action.startswith("write_to_file calc.py")
        _click(qtbot, window.focus.approval.approve_button)
        await ui.wait(lambda: ui.state(sid) is S.DONE)
        # no click on Refresh: the tab read the worktree again when the agent changed it
        await ui.wait(lambda: "+    return a + b" in window.focus.diff.text.toPlainText())
        assert window.focus.diff.summary.text() == "+1 −1"

    ui.play(body)


def test_commit_and_rebase_puts_the_sessions_commit_on_top_of_the_target(qtbot, fleet_ui: FleetUI) -> None:  # type: ignore[no-untyped-def]
    ui = fleet_ui

    async def body() -> None:
        sid = await _done_session(ui)
        (ui.repo / "README").write_text("a file main got meanwhile\n")
        _git(ui.repo, "add", "README")
        _git(ui.repo, "commit", "-qm", "main moved on")
        window = ui.window
        window.show_focus(window.panes[sid])
        await ui.wait(lambda: window.focus.diff.merge_button.isEnabled())
        _click(qtbot, window.focus.diff.merge_button)
        await ui.wait(lambda: window.review.dialog is not None)
        dialog = window.review.dialog
        dialog.rebase.setChecked(True)
        dialog.message.setPlainText("Fix add(): rebased")
        _click(qtbot, dialog.go_button)
        await ui.wait(lambda: sid not in window.panes)
        log = [line.split("|") for line in _git(ui.repo, "log", "--format=%s|%p", "main").splitlines()]
        assert [subject for subject, _parents in log] == ["Fix add(): rebased", "main moved on", "initial"]
        assert len(log[0][1].split()) == 1  # one parent: on top of main, no merge commit
        assert "return a + b" in (ui.repo / "calc.py").read_text()

    ui.play(body)
