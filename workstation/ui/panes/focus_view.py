"""One pane zoomed to the whole grid area: tabs Transcript · Diff · Checkpoints · Output,
the approval bar, and a follow-up input. Esc goes back to the grid."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QKeyEvent, QTextCharFormat, QTextCursor
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from workstation.ui import theme
from workstation.ui.image_tray import ImageTray
from workstation.ui.panes.line_colours import line_colours
from workstation.ui.panes.approval_bar import ApprovalBar
from workstation.ui.panes.checkpoint_list import CheckpointList
from workstation.ui.panes.diff_view import DiffView
from workstation.ui.panes.session_pane import PaneHeader, SessionPane
from workstation.ui.panes.transcript_doc import LineStyle
from workstation.ui.panes.transcript_mirror import TranscriptMirror

OUTPUT_MAX_BLOCKS = 5000
FOCUS_PREVIEW_LINES = 24
IMAGES_ONLY_TEXT = "See the attached images."
"""What a follow-up of images alone says (the model needs some text)."""


class FocusView(QWidget):
    """Shows one :class:`SessionPane`'s session in full."""

    back_requested = Signal()
    follow_up = Signal(str, str)
    """(session id, text) typed into the input box."""
    follow_up_images = Signal(str, str, object)
    """(session id, text, image paths): a follow-up with images attached or pasted."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.pane: SessionPane | None = None
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 4, 6, 6)
        layout.setSpacing(4)
        top = QHBoxLayout()
        self.back_button = QPushButton("Back to grid")
        self.back_button.setToolTip("Esc")
        self.back_button.clicked.connect(self.back_requested)
        top.addWidget(self.back_button)
        self.header_host = QVBoxLayout()
        top.addLayout(self.header_host, 1)
        layout.addLayout(top)
        self._header: PaneHeader | None = None
        self.tabs = QTabWidget()
        self.transcript = TranscriptMirror()
        self.diff = DiffView()
        self.checkpoints = CheckpointList()
        self.output = QPlainTextEdit()
        self.output.setReadOnly(True)
        self.output.setFont(theme.mono_font(9.5))
        self.output.setMaximumBlockCount(OUTPUT_MAX_BLOCKS)
        self.tabs.addTab(self.transcript, "Transcript")
        self.tabs.addTab(self.diff, "Diff")
        self.tabs.addTab(self.checkpoints, "Checkpoints")
        self.tabs.addTab(self.output, "Output")
        layout.addWidget(self.tabs, 1)
        self.approval = ApprovalBar(preview_lines=FOCUS_PREVIEW_LINES)
        self.approval.hide()
        layout.addWidget(self.approval)
        row = QHBoxLayout()
        self.input = QLineEdit()
        self.input.setPlaceholderText("Follow-up for this session — Enter sends")
        self.send_button = QPushButton("Send")
        row.addWidget(self.input, 1)
        row.addWidget(self.send_button)
        layout.addLayout(row)
        self.images = ImageTray(None)
        self.images.install_paste(self.input)
        self.images.problem.connect(self.input.setPlaceholderText)
        layout.addWidget(self.images)
        self.input.returnPressed.connect(self._send)
        self.send_button.clicked.connect(self._send)

    def show_pane(self, pane: SessionPane) -> None:
        self.leave()
        self.pane = pane
        self._header = PaneHeader(pane, marks_focus=False)
        self._header.setParent(self)
        self.header_host.addWidget(self._header)
        self.transcript.attach(pane.doc)
        self.sync_approval()
        self.tabs.setCurrentWidget(self.transcript)
        self.input.setFocus()

    def leave(self) -> None:
        self.transcript.detach()
        if self._header is not None:
            self.header_host.removeWidget(self._header)
            self._header.deleteLater()
            self._header = None
        self.pane = None
        self.approval.hide()

    def refresh(self) -> None:
        """Flush tick: the header follows the pane."""
        if self._header is not None:
            self._header.update()

    def sync_approval(self) -> None:
        pane = self.pane
        if pane is not None and pane.approval.isVisibleTo(pane) and pane.waiting:
            self.approval.show_request(pane.approval._title, pane.approval.summary.text(),
                                       pane.approval._arguments, pane.approval.preview_text)
        else:
            self.approval.hide()

    def append_output(self, text: str, style: LineStyle = LineStyle.OUTPUT) -> None:
        fmt = QTextCharFormat()
        fmt.setForeground(line_colours(self.palette())[style])
        cursor = QTextCursor(self.output.document())
        cursor.movePosition(QTextCursor.MoveOperation.End)
        cursor.insertText(text, fmt)

    def set_checkpoints(self, items: list[tuple[str, str]]) -> None:
        """(label, commit) of each checkpoint, oldest first."""
        self.checkpoints.set_items(items)

    def configure_images(self, attachments_dir: str, refusal: str) -> None:
        """Where pasted images are kept, and why images cannot go (empty: they can)."""
        self.images.attachments_dir = Path(attachments_dir) if attachments_dir else None
        self.images.set_allowed(not refusal, refusal)

    def _send(self) -> None:
        text = self.input.text().strip()
        images = self.images.paths()
        if images and not text:
            text = IMAGES_ONLY_TEXT
        if text and self.pane is not None:
            self.input.clear()
            if images:
                self.images.clear()
                self.follow_up_images.emit(self.pane.info.session_id, text, images)
            else:
                self.follow_up.emit(self.pane.info.session_id, text)

    def keep_unsent(self, session_id: str, text: str, images: tuple[str, ...] = ()) -> None:
        """A follow-up that was not sent goes back: its text into the input, its images into
        the tray (if it still shows that session and the user has not begun another message:
        typed or attached anew). Images alone go back without the words ``_send`` gave them."""
        if self.pane is None or self.pane.info.session_id != session_id or self.input.text() or self.images.paths():
            return
        self.input.setText("" if images and text == IMAGES_ONLY_TEXT else text)
        for path in images:
            self.images.add_path(path)

    def keyPressEvent(self, event: QKeyEvent) -> None:  # noqa: N802
        if event.key() == Qt.Key.Key_Escape:
            self.back_requested.emit()
            return
        super().keyPressEvent(event)
