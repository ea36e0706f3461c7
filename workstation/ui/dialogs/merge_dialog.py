"""Merge ready sessions: the queue's order, the target branch and the gate (the repository's
test command), merge commits or a rebase. Opened with ``open()``; Merge emits
``merge_requested`` and closes (the queue runs as a task; the status bar says how it went)."""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QLabel,
    QLineEdit,
    QVBoxLayout,
    QWidget,
)

from workstation.ui.backend import MergePlan
from workstation.ui.dialogs.new_session import validate_branch


class MergeDialog(QDialog):
    merge_requested = Signal(str, str, bool)
    """(target branch, gate command, rebase)."""

    def __init__(self, plan: MergePlan, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Merge ready sessions")
        layout = QVBoxLayout(self)
        order = " → ".join(plan.names) if plan.names else "none — mark sessions ready from their menu"
        self.order = QLabel(f"In this order: {order}")
        self.order.setWordWrap(True)
        layout.addWidget(self.order)
        form = QFormLayout()
        self.into = QLineEdit(plan.into)
        self.into.setPlaceholderText("main")
        self.gate = QLineEdit(plan.gate)
        self.gate.setPlaceholderText("the repository's test command, e.g. pytest -q")
        self.rebase = QCheckBox("Rebase each session's commits instead of merge commits")
        form.addRow("Into branch", self.into)
        form.addRow("Gate", self.gate)
        form.addRow("", self.rebase)
        layout.addLayout(form)
        self.problem = QLabel()
        self.problem.setWordWrap(True)
        layout.addWidget(self.problem)
        note = QLabel("Runs in a temporary worktree; the target branch moves only when every "
                      "session merged and passed the gate.")
        note.setWordWrap(True)
        layout.addWidget(note)
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Cancel)
        self.merge_button = self.buttons.addButton("Merge", QDialogButtonBox.ButtonRole.AcceptRole)
        self.buttons.accepted.connect(self._merge)
        self.buttons.rejected.connect(self.reject)
        layout.addWidget(self.buttons)
        self._has_sessions = bool(plan.names)
        for field in (self.into, self.gate):
            field.textChanged.connect(self._check)
        self._check()

    def problem_text(self) -> str:
        if not self._has_sessions:
            return "No session is marked ready."
        if not self.into.text().strip():
            return "Name the branch to merge into."
        bad = validate_branch(self.into.text())
        if bad:
            return bad
        if not self.gate.text().strip():
            return "Give the test command that gates each merge."
        return ""

    def _check(self) -> None:
        problem = self.problem_text()
        self.problem.setText(problem)
        self.merge_button.setEnabled(not problem)

    def _merge(self) -> None:
        if self.problem_text():
            return
        self.merge_requested.emit(self.into.text().strip(), self.gate.text().strip(), self.rebase.isChecked())
        self.accept()
