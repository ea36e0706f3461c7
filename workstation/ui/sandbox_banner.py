"""The strip across the top of the window while agents' commands are not confined.

It shows :meth:`SandboxStatus.banner` — no bubblewrap, so every command waits for your
approval; the sandbox required but unusable, so no command runs; or the sandbox turned off
in settings (the user's choice, a risk) — with a button to the settings. Hidden while
commands are confined. The status comes from the composition root, which asks
``agent.sandbox_status`` once at start-up with the policy the sessions run under.
"""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPushButton, QWidget

from workstation.agent.sandbox_status import Confinement, SandboxStatus
from workstation.ui import theme


class SandboxBanner(QFrame):
    settings_requested = Signal()
    """The user wants the settings dialog (the Sandbox tab)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("sandbox-banner")
        self.setFrameShape(QFrame.Shape.StyledPanel)
        row = QHBoxLayout(self)
        row.setContentsMargins(8, 3, 4, 3)
        self.label = QLabel("")
        self.label.setWordWrap(True)
        self.label.setTextFormat(Qt.TextFormat.PlainText)
        self.label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        row.addWidget(self.label, 1)
        self.settings_button = QPushButton("Sandbox settings…")
        self.settings_button.clicked.connect(self.settings_requested.emit)
        row.addWidget(self.settings_button)
        self.status: SandboxStatus | None = None
        self.hide()

    def show_status(self, status: SandboxStatus) -> None:
        self.status = status
        text = status.banner()
        self.label.setText(text)
        colour = theme.AMBER if status.confinement is Confinement.ATTENDED else theme.RED
        self.setStyleSheet(f"#sandbox-banner {{ border: 1px solid {colour.name()}; "
                           f"background: {theme.mix(colour, self.palette().window().color(), 0.82).name()}; }}")
        self.setVisible(bool(text))
