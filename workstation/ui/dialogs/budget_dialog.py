"""A session's budget: tokens (prompt + completion over its life) and/or money at the chosen
paid API's prices. Opened with ``open()``; Set emits ``budget_set(tokens, usd)`` (0 for
none) and closes. A session over its budget pauses in "budget reached"; raising it (or
clearing it) lets the session go on."""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QDialog, QDialogButtonBox, QDoubleSpinBox, QFormLayout, QLabel, QSpinBox, QWidget

from workstation.ui.backend import SessionTools


class BudgetDialog(QDialog):
    budget_set = Signal(int, float)
    """(tokens, dollars); 0 means no budget of that kind."""

    def __init__(self, name: str, tools: SessionTools, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle(f"Budget of {name}")
        form = QFormLayout(self)
        used = QLabel(tools.spent or "nothing yet")
        used.setWordWrap(True)
        form.addRow("Used so far", used)
        self.tokens = QSpinBox()
        self.tokens.setRange(0, 2_000_000_000)
        self.tokens.setSingleStep(10_000)
        self.tokens.setSpecialValueText("no token budget")
        self.tokens.setValue(tools.budget_tokens or 0)
        self.usd = QDoubleSpinBox()
        self.usd.setRange(0.0, 1_000_000.0)
        self.usd.setDecimals(3)
        self.usd.setPrefix("$")
        self.usd.setSpecialValueText("no money budget")
        self.usd.setValue(tools.budget_usd or 0.0)
        form.addRow("Tokens", self.tokens)
        form.addRow("Money", self.usd)
        if not tools.priced:
            note = QLabel("No paid API is chosen in the cost panel: a money budget is not counted until one is.")
            note.setWordWrap(True)
            form.addRow(note)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Cancel)
        buttons.addButton("Set", QDialogButtonBox.ButtonRole.AcceptRole)
        buttons.accepted.connect(self._set)
        buttons.rejected.connect(self.reject)
        form.addRow(buttons)

    def _set(self) -> None:
        self.budget_set.emit(self.tokens.value(), self.usd.value())
        self.accept()
