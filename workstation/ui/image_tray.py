"""Images attached to a task or an answer in the window: a row of thumbnails with an
"Attach image…" button, and paste (Ctrl+V of a screenshot) into the text box it serves.

A pasted image has no file, so it is saved as PNG under the app's data folder
(``<data>/attachments/<sha256>.png``): the session's spec and its transcript refer to paths
that stay. Where the model does not take images the tray is off and says why (the same
words the agent would refuse with).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from PySide6.QtCore import QBuffer, QByteArray, QEvent, QIODevice, QObject, Qt, Signal
from PySide6.QtGui import QGuiApplication, QImage, QKeySequence, QPixmap
from PySide6.QtWidgets import QFileDialog, QHBoxLayout, QLabel, QPushButton, QToolButton, QWidget

from workstation.agent.images import MAX_IMAGES, load_image
from workstation.core.errors import UserError

THUMB_PX = 48
IMAGE_FILTER = "Images (*.png *.jpg *.jpeg *.gif *.webp)"


def save_pasted(image: QImage, folder: Path) -> Path:
    """A pasted image as a PNG file named by its content (the same paste is one file)."""
    data = QByteArray()
    buffer = QBuffer(data)
    buffer.open(QIODevice.OpenModeFlag.WriteOnly)
    image.save(buffer, "PNG")
    raw = bytes(data.data())
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{hashlib.sha256(raw).hexdigest()[:24]}.png"
    if not path.exists():
        path.write_bytes(raw)
    return path


class ImageTray(QWidget):
    """Thumbnails of the images to send, an attach button, and the reason when images are off."""

    changed = Signal()
    problem = Signal(str)
    """Something the user should read (a file that is not an image, too many)."""

    def __init__(self, attachments_dir: Path | None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.attachments_dir = attachments_dir
        self._paths: list[str] = []
        self._row = QHBoxLayout(self)
        self._row.setContentsMargins(0, 0, 0, 0)
        self._row.setSpacing(4)
        self.attach_button = QPushButton("Attach image…")
        self.attach_button.setToolTip("Or paste a screenshot into the text box (Ctrl+V)")
        self.attach_button.clicked.connect(self._browse)
        self._row.addWidget(self.attach_button)
        self._thumbs = QHBoxLayout()
        self._row.addLayout(self._thumbs)
        self.note = QLabel("")
        self.note.setTextFormat(Qt.TextFormat.PlainText)
        self._row.addWidget(self.note, 1)
        self._allowed = True

    def paths(self) -> tuple[str, ...]:
        return tuple(self._paths)

    def set_allowed(self, allowed: bool, reason: str = "") -> None:
        self._allowed = allowed
        self.attach_button.setEnabled(allowed)
        self.note.setText("" if allowed else reason)
        self.note.setToolTip(reason)
        if not allowed:
            self.clear()

    def clear(self) -> None:
        self._paths.clear()
        while self._thumbs.count():
            item = self._thumbs.takeAt(0)
            if item.widget() is not None:
                item.widget().deleteLater()
        self.changed.emit()

    def add_path(self, path: str | Path) -> bool:
        if not self._allowed:
            self.problem.emit(self.note.text())
            return False
        if len(self._paths) >= MAX_IMAGES:
            self.problem.emit(f"at most {MAX_IMAGES} images go with one message")
            return False
        try:
            image = load_image(path)
        except UserError as exc:
            self.problem.emit(str(exc))
            return False
        if image.path in self._paths:
            return True
        self._paths.append(image.path)
        button = QToolButton()
        pixmap = QPixmap()
        pixmap.loadFromData(image.data)
        button.setIcon(pixmap.scaled(THUMB_PX, THUMB_PX, Qt.AspectRatioMode.KeepAspectRatio,
                                     Qt.TransformationMode.SmoothTransformation))
        button.setIconSize(pixmap.size().scaled(THUMB_PX, THUMB_PX, Qt.AspectRatioMode.KeepAspectRatio))
        button.setToolTip(f"{image.name} — click to remove")
        button.clicked.connect(lambda _=False, p=image.path, b=button: self._remove(p, b))
        self._thumbs.addWidget(button)
        self.changed.emit()
        return True

    def add_image(self, image: QImage) -> bool:
        if image.isNull() or self.attachments_dir is None:
            return False
        return self.add_path(save_pasted(image, self.attachments_dir))

    def install_paste(self, widget: QWidget) -> None:
        """Ctrl+V of an image into ``widget`` attaches it (text pastes as before)."""
        self._paste_filter = _PasteFilter(self)
        widget.installEventFilter(self._paste_filter)

    def _remove(self, path: str, button: QToolButton) -> None:
        if path in self._paths:
            self._paths.remove(path)
        button.deleteLater()
        self.changed.emit()

    def _browse(self) -> None:
        dialog = QFileDialog(self, "Attach images", "", IMAGE_FILTER)
        dialog.setFileMode(QFileDialog.FileMode.ExistingFiles)
        dialog.filesSelected.connect(lambda files: [self.add_path(f) for f in files])
        dialog.open()


class _PasteFilter(QObject):
    def __init__(self, tray: ImageTray) -> None:
        super().__init__(tray)
        self.tray = tray

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt API
        if event.type() == QEvent.Type.KeyPress and event.matches(QKeySequence.StandardKey.Paste):
            mime = QGuiApplication.clipboard().mimeData()
            if mime is not None and mime.hasImage():
                self.tray.add_image(QImage(mime.imageData()))
                return True
        return False
