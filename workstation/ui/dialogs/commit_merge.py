"""Commit and merge one session in one step: the commit message is drawn from its actual
changes (editable), the target branch is chosen from the repository's, merge or rebase, an
optional test gate; it names what it affects (the files, the commits, a checked-out target
whose files will change) and, after a refusal, the conflicting files. Opened with ``open()``.

``mode="commit"`` is the same dialog for committing only (the message and the files)."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QRadioButton,
    QVBoxLayout,
    QWidget,
)

from workstation.ui import theme
from workstation.ui.backend import MergeOutcome, ReviewPlan
from workstation.ui.dialogs.new_session import validate_branch


class CommitMergeDialog(QDialog):
    merge_requested = Signal(str, str, bool, str)
    """(message, target branch, rebase, gate)."""
    commit_requested = Signal(str)

    def __init__(self, plan: ReviewPlan, parent: QWidget | None = None, *, mode: str = "merge") -> None:
        super().__init__(parent)
        self.plan = plan
        self.mode = mode
        merging = mode == "merge"
        self.setWindowTitle(f"Commit and merge {plan.name}" if merging else f"Commit {plan.name}")
        self.setMinimumWidth(620)
        layout = QVBoxLayout(self)
        what = QLabel(f"{plan.branch}: {len(plan.files)} file{'s' if len(plan.files) != 1 else ''} changed"
                      + (f", {len(plan.commits)} commit{'s' if len(plan.commits) != 1 else ''} not in {plan.base}"
                         if plan.commits else ""))
        what.setTextFormat(Qt.TextFormat.PlainText)
        layout.addWidget(what)
        self.files = QPlainTextEdit("\n".join([*plan.files, *(f"commit {c}" for c in plan.commits)]))
        self.files.setReadOnly(True)
        self.files.setFont(theme.mono_font(8.5))
        self.files.setFixedHeight(min(8, max(2, len(plan.files) + len(plan.commits))) * 16 + 12)
        layout.addWidget(self.files)
        form = QFormLayout()
        self.message = QPlainTextEdit(plan.message)
        self.message.setFont(theme.mono_font(9.0))
        self.message.setMinimumHeight(120)
        form.addRow("Commit message", self.message)
        self.into = QComboBox()
        self.into.setEditable(True)
        self.into.addItems(list(plan.branches) or [plan.base])
        self.into.setCurrentText(plan.base)
        self.merge = QRadioButton("Merge (a merge commit)")
        self.rebase = QRadioButton("Rebase (its commits on top, then fast-forward)")
        self.merge.setChecked(True)
        self.gate = QLineEdit(plan.gate)
        self.gate.setPlaceholderText("a test command run on the merged result first, e.g. pytest -q (empty: none)")
        self.archive = QCheckBox("Mark it merged: it leaves the grid for the archive")
        self.archive.setChecked(True)
        self.archive.setEnabled(False)  # a merged session always goes; the box says so
        if merging:
            form.addRow("Into branch", self.into)
            form.addRow("", self.merge)
            form.addRow("", self.rebase)
            form.addRow("Gate", self.gate)
            form.addRow("", self.archive)
        layout.addLayout(form)
        self.warning = QLabel()
        self.warning.setWordWrap(True)
        self.warning.setTextFormat(Qt.TextFormat.PlainText)
        self.warning.setStyleSheet(f"color: {theme.AMBER.darker(130).name()};")
        layout.addWidget(self.warning)
        self.problem = QLabel()
        self.problem.setWordWrap(True)
        self.problem.setTextFormat(Qt.TextFormat.PlainText)
        self.problem.setStyleSheet(f"color: {theme.RED.name()};")
        self.problem.hide()
        layout.addWidget(self.problem)
        self.conflicts = QPlainTextEdit()
        self.conflicts.setReadOnly(True)
        self.conflicts.setFont(theme.mono_font(8.5))
        self.conflicts.hide()
        layout.addWidget(self.conflicts)
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Cancel)
        label = "Commit and merge" if merging else "Commit"
        self.go_button = self.buttons.addButton(label, QDialogButtonBox.ButtonRole.AcceptRole)
        self.buttons.accepted.connect(self._go)
        self.buttons.rejected.connect(self.reject)
        layout.addWidget(self.buttons)
        self.into.currentTextChanged.connect(self._check)
        self.message.textChanged.connect(self._check)
        self._busy = False
        self._check()

    def problem_text(self) -> str:
        plan = self.plan
        if plan.working:
            return f"{plan.name} is generating; pause it first (Ctrl+P) or wait until it finishes."
        if not self.message.toPlainText().strip() and plan.uncommitted:
            return "The changes need a commit message."
        if self.mode == "commit":
            return "" if plan.uncommitted else "Nothing to commit: every change is committed."
        if not plan.files and not plan.commits:
            return "Nothing to merge: the session changed nothing."
        into = self.into.currentText().strip()
        if not into:
            return "Choose the branch to merge into."
        return validate_branch(into)

    def _check(self) -> None:
        problem = self.problem_text()
        self.problem.setText(problem)
        self.problem.setVisible(bool(problem))
        self.go_button.setEnabled(not problem and not self._busy)
        notes = []
        into = self.into.currentText().strip()
        checkouts = dict(self.plan.checkouts)
        if self.mode == "merge" and into in checkouts:
            notes.append(f"{into} is checked out in {checkouts[into]}: its files there change to the merged "
                         "result (refused if it has uncommitted changes).")
        if self.mode == "merge" and self.plan.waiting_action:
            notes.append(f"It waits for approval of {self.plan.waiting_action}: merging pauses it and "
                         "withdraws that action.")
        if self.plan.uncommitted:
            notes.append(f"{self.plan.uncommitted} uncommitted file(s) are committed on {self.plan.branch} first.")
        self.warning.setText("\n".join(notes))
        self.warning.setVisible(bool(notes))

    def _go(self) -> None:
        if self.problem_text() or self._busy:
            return
        self._busy = True
        self.go_button.setEnabled(False)
        self.go_button.setText("Merging…" if self.mode == "merge" else "Committing…")
        message = self.message.toPlainText().strip()
        if self.mode == "merge":
            self.merge_requested.emit(message, self.into.currentText().strip(), self.rebase.isChecked(),
                                      self.gate.text().strip())
        else:
            self.commit_requested.emit(message)

    def show_outcome(self, outcome: MergeOutcome) -> None:
        """Merged: close. Refused: say why, with the conflicting files, and stay open."""
        if outcome.ok:
            self.accept()
            return
        self._busy = False
        self.go_button.setText("Commit and merge" if self.mode == "merge" else "Commit")
        self.problem.setText(outcome.message)
        self.problem.show()
        self.conflicts.setPlainText("\n".join(outcome.conflicts))
        self.conflicts.setVisible(bool(outcome.conflicts))
        self.go_button.setEnabled(not self.problem_text())
