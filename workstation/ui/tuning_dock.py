"""The Tuning dock: profiles (their diff against the parent, checks in plain words, the safe
switch of the live engine), saved traffic shapes (small charts) and stored benchmark results
(a table and a bar chart). See ``workstation.tuning``'s docstring for the data it draws.

The store is read in a worker thread when the dock is first shown and on *Refresh*; nothing
polls. Checks run in a worker thread too (the first one reads the engine's ``--help=all``,
which is then cached per version). The switch is the Qt-free
:class:`~workstation.tuning.live_switch.LiveSwitch`, run as a task of the window's
``TaskOwner``: the button disables itself and a stepper follows its ``state_changed``; the
live engine's owner adopts the engine that serves afterwards (the dock decides nothing).
"""

from __future__ import annotations

import asyncio
import functools
import html
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

os.environ.setdefault("PYQTGRAPH_QT_LIB", "PySide6")

import pyqtgraph as pg  # noqa: E402
from PySide6.QtCore import Qt  # noqa: E402
from PySide6.QtGui import QPalette, QShowEvent  # noqa: E402
from PySide6.QtWidgets import (  # noqa: E402
    QAbstractItemView,
    QDockWidget,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QMessageBox,
    QProgressBar,
    QPushButton,
    QSplitter,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from workstation.config import Settings  # noqa: E402
from workstation.core.errors import UserError  # noqa: E402
from workstation.core.profiles import PRESETS, Profile, diff_against_parent  # noqa: E402
from workstation.core.traffic import TrafficShape  # noqa: E402
from workstation.tuning.checks import CheckReport, Severity  # noqa: E402
from workstation.tuning.live_switch import LiveSwitch  # noqa: E402
from workstation.tuning.results import BenchResult  # noqa: E402
from workstation.tuning.store import TuningStore  # noqa: E402
from workstation.tuning.switch import SwitchPhase, SwitchReport  # noqa: E402
from workstation.ui import theme  # noqa: E402
from workstation.ui.icons_fallback import safe_icon  # noqa: E402
from workstation.ui.tasks import TaskOwner
from workstation.ui.tuning_jobs import TuningJobs  # noqa: E402
from workstation.ui.tuning_views import ResultsView, ShapesView, plain_label  # noqa: E402

Checker = Callable[[Profile, Mapping[str, Profile]], CheckReport]
"""Blocking: a profile (with the catalogue its parents come from) → the check report."""

STEPS = (SwitchPhase.STARTING_NEW, SwitchPhase.PROBING, SwitchPhase.RETARGETING,
         SwitchPhase.DRAINING, SwitchPhase.STOPPING_OLD, SwitchPhase.DONE)
STEP_WORDS = {
    SwitchPhase.STARTING_NEW: "start new", SwitchPhase.PROBING: "probe",
    SwitchPhase.RETARGETING: "move sessions", SwitchPhase.DRAINING: "drain old",
    SwitchPhase.STOPPING_OLD: "stop old", SwitchPhase.DONE: "done",
    SwitchPhase.ROLLING_BACK: "rolling back", SwitchPhase.ROLLED_BACK: "rolled back",
    SwitchPhase.FAILED: "failed",
}
CANCELLABLE = (SwitchPhase.STARTING_NEW, SwitchPhase.PROBING)
RESULTS_LIMIT = 50


@dataclass(frozen=True, slots=True)
class StoreView:
    catalogue: dict[str, Profile]
    problems: list[str]
    shapes: dict[str, TrafficShape | str]
    """A shape, or why it could not be read."""
    results: list[BenchResult]


def read_store(store: TuningStore) -> StoreView:
    """Everything the dock shows (blocking: small files)."""
    catalogue = store.catalogue()
    problems = list(store.problems)
    shapes: dict[str, TrafficShape | str] = {}
    for name in store.shapes():
        try:
            shapes[name] = store.load_shape(name)
        except UserError as exc:
            shapes[name] = str(exc)
    results = store.results(limit=RESULTS_LIMIT)
    results.reverse()  # newest first
    return StoreView(catalogue, problems, shapes, results)


class TuningDock(QDockWidget):
    def __init__(self, settings: Settings, parent: QWidget | None = None, *, tasks: TaskOwner | None = None,
                 store: TuningStore | None = None) -> None:
        super().__init__("Tuning", parent)
        self.setObjectName("tuning-dock")
        self.store = store or TuningStore(settings.data_dir)
        self.tasks = tasks or TaskOwner("tuning", on_error=self._show_error)
        self.view: StoreView | None = None
        self.checks: dict[str, CheckReport | str] = {}
        self._checker: Checker | None = None
        self._checker_reason = "no engine to check against"
        self._switch: LiveSwitch | None = None
        self._switch_reason = "the engine is not managed by the app"
        self.switch_task: asyncio.Task[Any] | None = None
        self.confirm_dialog: QMessageBox | None = None
        self._ask_task: asyncio.Task[Any] | None = None
        self._load_task: asyncio.Task[Any] | None = None
        pal = self.palette()
        pg.setConfigOptions(antialias=True, background=pal.color(QPalette.ColorRole.Base),
                            foreground=pal.color(QPalette.ColorRole.Text))
        self.tabs = QTabWidget()
        self.tabs.setDocumentMode(True)
        self.tabs.addTab(self._build_profiles(), "Profiles")
        self.shapes_view = ShapesView()
        self.results_view = ResultsView()
        self.tabs.addTab(self.shapes_view, "Traffic shapes")
        self.tabs.addTab(self.results_view, "Results")
        self.refresh_button = QPushButton("Refresh")
        self.refresh_button.setToolTip("Read profiles, shapes and results from the data folder again")
        self.refresh_button.clicked.connect(self.refresh)
        self.tabs.setCornerWidget(self.refresh_button)
        self.jobs = TuningJobs(self.tasks)  # Capture and Bench, with progress and Cancel
        self.jobs.finished.connect(lambda _said, made: self.refresh() if made else None)
        body = QWidget()
        column = QVBoxLayout(body)
        column.setContentsMargins(0, 0, 0, 0)
        column.addWidget(self.jobs)
        column.addWidget(self.tabs, 1)
        self.setWidget(body)
        self.setMinimumHeight(300)
        self._update_switch_button()

    # ----- construction -----
    def _build_profiles(self) -> QWidget:
        split = QSplitter(Qt.Orientation.Horizontal)
        left = QWidget()
        col = QVBoxLayout(left)
        col.setContentsMargins(4, 4, 4, 4)
        self.profile_list = QListWidget()
        self.profile_list.currentItemChanged.connect(lambda *_: self._show_profile())
        col.addWidget(self.profile_list, 1)
        self.problems_label = plain_label()
        self.problems_label.setStyleSheet(f"color: {theme.AMBER.name()}")
        self.problems_label.hide()
        col.addWidget(self.problems_label)
        split.addWidget(left)

        right = QWidget()
        col = QVBoxLayout(right)
        col.setContentsMargins(8, 4, 8, 4)
        self.profile_title = QLabel("Select a profile")
        self.profile_title.setFont(theme.ui_font(bold=True))
        self.profile_title.setTextFormat(Qt.TextFormat.PlainText)
        col.addWidget(self.profile_title)
        self.profile_description = plain_label()
        col.addWidget(self.profile_description)
        self.diff_header = plain_label()
        col.addWidget(self.diff_header)
        self.diff_label = plain_label(mono=True)
        self.diff_label.setIndent(12)
        col.addWidget(self.diff_label)
        check_row = QHBoxLayout()
        self.check_icon = QLabel()
        self.check_icon.setFixedWidth(18)
        check_row.addWidget(self.check_icon)
        self.check_label = plain_label()
        check_row.addWidget(self.check_label, 1)
        col.addLayout(check_row)
        self.findings = QListWidget()
        self.findings.setWordWrap(True)
        self.findings.setSelectionMode(QAbstractItemView.SelectionMode.NoSelection)
        self.findings.setFocusPolicy(Qt.FocusPolicy.NoFocus)
        col.addWidget(self.findings, 1)

        switch_row = QHBoxLayout()
        self.switch_button = QPushButton(safe_icon("engine"), "Switch live engine to this profile")
        self.switch_button.clicked.connect(self.ask_switch)
        switch_row.addWidget(self.switch_button)
        self.cancel_button = QPushButton(safe_icon("stop"), "Cancel")
        self.cancel_button.setToolTip("Stop the new engine; the live one keeps serving")
        self.cancel_button.clicked.connect(self.cancel_switch)
        self.cancel_button.hide()
        switch_row.addWidget(self.cancel_button)
        self.switch_progress = QProgressBar()
        self.switch_progress.setRange(0, len(STEPS))
        self.switch_progress.setTextVisible(False)
        self.switch_progress.setMaximumWidth(160)
        self.switch_progress.hide()
        switch_row.addWidget(self.switch_progress)
        self.stepper = QLabel()
        self.stepper.setTextFormat(Qt.TextFormat.RichText)
        switch_row.addWidget(self.stepper, 1)
        col.addLayout(switch_row)
        self.switch_status = plain_label()
        col.addWidget(self.switch_status)
        self.switch_report = plain_label(mono=True)
        self.switch_report.hide()
        col.addWidget(self.switch_report)
        col.addStretch(1)
        split.addWidget(right)
        split.setStretchFactor(0, 1)
        split.setStretchFactor(1, 3)
        split.setSizes([260, 900])
        return split

    # ----- what the app lends -----
    def set_checker(self, checker: Checker | None, reason: str = "") -> None:
        """Checks against the installed engine (None: ``reason`` says why there are none)."""
        self._checker = checker
        self._checker_reason = reason or "no engine to check against"
        self.checks.clear()
        self._show_profile()

    def set_switch(self, switch: LiveSwitch | None, reason: str = "") -> None:
        """The live engine's safe switch; None: not possible here, and ``reason`` says why (the
        button's tooltip)."""
        if self._switch is not None:
            self._switch.state_changed.disconnect(self._on_phase)
        self._switch = switch
        self._switch_reason = reason or "the engine is not managed by the app"
        if switch is not None:
            switch.state_changed.connect(self._on_phase)
        self._update_switch_button()

    # ----- loading -----
    def showEvent(self, event: QShowEvent) -> None:  # noqa: N802
        super().showEvent(event)
        if self.view is None and self._load_task is None:
            self.refresh()

    def refresh(self) -> None:
        if self._load_task is None or self._load_task.done():
            self._load_task = self.tasks.spawn(self.reload(), "tuning-load")

    async def reload(self) -> None:
        """Read the store in a worker thread and redraw every tab."""
        view = await asyncio.to_thread(read_store, self.store)
        self.view = view
        self.checks.clear()
        self._fill_profiles()
        self.shapes_view.set_shapes(view.shapes)
        self.results_view.set_results(view.results)

    # ----- profiles -----
    def _fill_profiles(self) -> None:
        assert self.view is not None
        current = self.selected_profile()
        self.profile_list.blockSignals(True)
        self.profile_list.clear()
        live = self._live_profile_name()
        for name, profile in self.view.catalogue.items():
            tags = []
            if name not in PRESETS:
                tags.append("yours")
            if profile.platforms == frozenset({"cuda"}):
                tags.append("CUDA only")
            if name == live:
                tags.append("live")
            item = QListWidgetItem(name + (f"   · {' · '.join(tags)}" if tags else ""))
            item.setData(Qt.ItemDataRole.UserRole, name)
            item.setToolTip(profile.description)
            self.profile_list.addItem(item)
            if name == (current or live):
                self.profile_list.setCurrentItem(item)
        self.profile_list.blockSignals(False)
        if self.profile_list.currentItem() is None and self.profile_list.count():
            self.profile_list.setCurrentRow(0)
        problems = self.view.problems
        self.problems_label.setText("Could not read: " + "; ".join(problems) if problems else "")
        self.problems_label.setVisible(bool(problems))
        self._show_profile()

    def selected_profile(self) -> str | None:
        item = self.profile_list.currentItem()
        return None if item is None else str(item.data(Qt.ItemDataRole.UserRole))

    def select_profile(self, name: str) -> None:
        for row in range(self.profile_list.count()):
            if self.profile_list.item(row).data(Qt.ItemDataRole.UserRole) == name:
                self.profile_list.setCurrentRow(row)
                return
        raise KeyError(name)

    def _show_profile(self) -> None:
        name = self.selected_profile()
        view = self.view
        if name is None or view is None or name not in view.catalogue:
            self._update_switch_button()
            return
        profile = view.catalogue[name]
        self.profile_title.setText(name + ("" if name in PRESETS else "  (your profile)"))
        self.profile_description.setText(profile.description)
        lines = diff_against_parent(profile)
        parent = f"its parent '{profile.parent}'" if profile.parent else "vLLM's defaults"
        if lines:
            self.diff_header.setText(f"Changes against {parent}:")
            self.diff_label.setText("\n".join(lines))
        else:
            self.diff_header.setText(f"No changes against {parent}.")
            self.diff_label.setText("")
        self.diff_label.setVisible(bool(lines))
        self._show_check(name)
        if name not in self.checks and self._checker is not None:
            self.tasks.spawn(self._run_check(name, profile, dict(view.catalogue)), f"check-{name}")
        self._update_switch_button()

    async def _run_check(self, name: str, profile: Profile, catalogue: dict[str, Profile]) -> None:
        checker = self._checker
        assert checker is not None
        self.checks[name] = "checking"
        try:
            report: CheckReport | str = await asyncio.to_thread(checker, profile, catalogue)
        except UserError as exc:
            report = f"cannot check: {str(exc).splitlines()[0]}"
        except Exception as exc:  # noqa: BLE001 - shown in the panel, not a crash
            report = f"cannot check: {exc}"
        self.checks[name] = report
        if self.selected_profile() == name:
            self._show_check(name)
            self._update_switch_button()

    def _show_check(self, name: str) -> None:
        self.findings.clear()
        report = self.checks.get(name)
        if self._checker is None:
            self._set_check_line("note", f"Not checked: {self._checker_reason}.")
        elif report is None or report == "checking":
            self._set_check_line("queued", "Checking against the installed engine and the model…")
        elif isinstance(report, str):
            self._set_check_line("warning", report)
        else:
            where = f"vLLM {report.engine_version} ({report.platform}) with {report.model.describe()}"
            if report.ok:
                extra = "" if report.findings else " No problems found."
                self._set_check_line("check", f"Can launch on {where}.{extra}")
            else:
                self._set_check_line("error", f"Cannot launch on {where}:")
            icons = {Severity.ERROR: ("error", theme.RED), Severity.WARNING: ("warning", theme.AMBER),
                     Severity.NOTE: ("check", theme.GREY)}
            for finding in report.findings:
                icon_name, colour = icons[finding.severity]
                item = QListWidgetItem(safe_icon(icon_name, colour), finding.message[:1].upper() + finding.message[1:])
                item.setToolTip(finding.line())
                self.findings.addItem(item)
        self.findings.setVisible(self.findings.count() > 0)

    def _set_check_line(self, kind: str, text: str) -> None:
        colour = {"check": theme.GREEN, "error": theme.RED, "warning": theme.AMBER}.get(kind, theme.GREY)
        self.check_icon.setPixmap(safe_icon(kind, colour).pixmap(16, 16))
        self.check_label.setText(text)

    # ----- the switch -----
    def _live_profile_name(self) -> str | None:
        return self._switch.live_profile if self._switch is not None else None

    def switch_blocker(self) -> str | None:
        """Why the switch button is disabled now (None: it is enabled)."""
        if self._switch is None:
            return self._switch_reason
        if self.switch_task is not None:
            return "a switch is running"
        blocker = self._switch.blocker()
        if blocker is not None:
            return blocker
        name = self.selected_profile()
        if name is None:
            return "select a profile first"
        report = self.checks.get(name)
        if isinstance(report, CheckReport) and not report.ok:
            return "the checks found errors in this profile; fix them first"
        if name == self._live_profile_name():
            return "the live engine already runs this profile"
        return None

    def _update_switch_button(self) -> None:
        blocker = self.switch_blocker()
        self.switch_button.setEnabled(blocker is None)
        shared = self._switch is not None and self._switch.host.shares_devices
        self.switch_button.setToolTip(
            f"Not possible: {blocker}." if blocker else
            "Restart every engine with this profile (they share a GPU: no new one fits beside them); "
            "starts the one running now again if it fails" if shared else
            "Start an engine with this profile, move the sessions to it once it serves, then stop the old "
            "one; rolls back if the new engine fails")

    def ask_switch(self) -> None:
        """Confirm, then switch (the dialog is opened, never exec'd). The box says what the
        switch will do, which takes a look at where the engines would run first (the profile
        folded, the host's layout: worker threads), so it opens a moment after the click."""
        name = self.selected_profile()
        switch = self._switch
        if name is None or switch is None or self.switch_blocker() is not None:
            return
        if self._ask_task is not None and not self._ask_task.done():
            return
        self.confirm_dialog = None
        self._ask_task = self.tasks.spawn(self._ask_switch(switch, name), "engine-switch-ask")

    async def _ask_switch(self, switch: LiveSwitch, name: str) -> None:
        try:
            restarts = await self._restarts_every_engine(switch, name)
        except UserError as exc:  # the profile cannot be placed: the switch would refuse it too
            self._say(str(exc).splitlines()[0], error=True)
            return
        if restarts:
            text = (f"Switch the live engine to profile '{name}'?\n\nEvery engine restarts with it: engines "
                    "share a GPU (now, or under this profile), so no new engine can start beside them. "
                    "Sessions wait until the first engine serves again; requests cut by the stop are "
                    "retried. If the new profile fails, the engines start again with the one running now.")
        else:
            text = (f"Switch the live engine to profile '{name}'?\n\nA new engine starts with it; "
                    "sessions move to it once it answers and see only a short pause. If it fails, "
                    "the engine running now keeps serving.")
        box = QMessageBox(QMessageBox.Icon.Question, "Switch the live engine", text,
                          QMessageBox.StandardButton.Ok | QMessageBox.StandardButton.Cancel, self)
        box.button(QMessageBox.StandardButton.Ok).setText("Restart every engine" if restarts else "Switch")
        box.accepted.connect(lambda: self.start_switch(name))
        box.finished.connect(box.deleteLater)
        self.confirm_dialog = box
        box.open()

    async def _restarts_every_engine(self, switch: LiveSwitch, name: str) -> bool:
        """Whether switching to ``name`` restarts every engine instead of a safe switch: the
        test :meth:`LiveSwitch.run` makes (engines share a GPU now, or the profile places them
        otherwise). A placement that cannot work is the host's ``UserError``."""
        host = switch.host
        if host.shares_devices:
            return True
        profile, _ = await asyncio.to_thread(functools.partial(self.store.resolve, name, platform=switch.platform))
        return await host.plans_for(profile) != host.plans

    def start_switch(self, name: str) -> asyncio.Task[Any] | None:
        if self._switch is None or self.switch_task is not None:
            return None
        self.switch_task = self.tasks.spawn(self._run_switch(self._switch, name), "engine-switch")
        self._set_running(True)
        return self.switch_task

    def cancel_switch(self) -> None:
        if self.switch_task is not None and self._switch is not None and self._switch.phase in CANCELLABLE:
            self.switch_task.cancel()

    def _set_running(self, running: bool) -> None:
        self.switch_progress.setVisible(running)
        self.cancel_button.setVisible(running)
        self.cancel_button.setEnabled(False)
        if running:
            self.switch_progress.setValue(0)
            self.switch_report.hide()
            self._draw_stepper(None)
        self._update_switch_button()

    async def _run_switch(self, switch: LiveSwitch, name: str) -> None:
        try:
            # folded for the platform the new engine runs on (the live one's)
            profile, _ = await asyncio.to_thread(functools.partial(self.store.resolve, name, platform=switch.platform))
            report = await switch.run(profile, say=self._say)
        except asyncio.CancelledError:
            self._say("Switch cancelled; the engine running before keeps serving.", error=True)
            raise
        except UserError as exc:
            self._say(str(exc).splitlines()[0], error=True)
            return
        finally:
            self.switch_task = None
            self._set_running(False)
        if report is None:
            self._say("The engine is not running; start it first.", error=True)
            return
        self._show_report(report)
        if self.view is not None:
            self._fill_profiles()  # the "live" tag moved

    def _on_phase(self, phase: SwitchPhase, detail: str) -> None:
        self._draw_stepper(phase)
        if phase in STEPS:
            self.switch_progress.setValue(STEPS.index(phase) + 1)
        self.cancel_button.setEnabled(phase in CANCELLABLE and self._switch is not None and self._switch.side_by_side)
        if detail:
            self._say(f"{STEP_WORDS.get(phase, phase.value)}: {detail}",
                      error=phase in (SwitchPhase.ROLLING_BACK, SwitchPhase.ROLLED_BACK, SwitchPhase.FAILED))

    def _draw_stepper(self, phase: SwitchPhase | None) -> None:
        if phase is None:
            self.stepper.setText("")
            return
        if phase not in STEPS:
            colour = theme.RED.name()
            self.stepper.setText(f"<b style='color:{colour}'>{html.escape(STEP_WORDS[phase])}</b>")
            return
        at = STEPS.index(phase)
        parts = []
        for i, step in enumerate(STEPS):
            word = html.escape(STEP_WORDS[step])
            if i == at:
                parts.append(f"<b>{word}</b>")
            elif i < at:
                parts.append(f"<span style='color:{theme.GREEN.name()}'>{word}</span>")
            else:
                parts.append(f"<span style='color:{theme.GREY.name()}'>{word}</span>")
        self.stepper.setText(" → ".join(parts))

    def _say(self, message: str, *, error: bool = False) -> None:
        self.switch_status.setText(message)
        self.switch_status.setStyleSheet(f"color: {theme.RED.name()}" if error else "")

    def _show_report(self, report: SwitchReport) -> None:
        if report.ok:
            gap = "n/a" if report.largest_gap_s is None else f"{report.largest_gap_s:.2f} s"
            self._say(f"Switched to '{report.to_profile}': sessions paused at most {gap}.")
        else:
            self._say(f"Not switched: {report.reason}. "
                      + ("The engine running before keeps serving." if report.rolled_back else ""), error=True)
        self.switch_report.setText("\n".join(report.lines()))
        self.switch_report.show()

    def _show_error(self, message: str) -> None:
        self._say(message, error=True)
