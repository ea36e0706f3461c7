"""The optional caption burnt into recorded frames: REC time, clock, sessions, tok/s, savings.

The app passes a callable that returns :class:`OverlayValues` (it reads numbers the
meters already hold; it must not block). The recorder asks it at most twice a second and
keeps drawing the last answer; a callable that raises is logged once and the caption
goes on without its numbers. The caption is rendered once per change of its text and
then blitted, so a frame costs one small ``drawImage``.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from PySide6.QtCore import QPoint, QRectF, Qt
from PySide6.QtGui import QColor, QFont, QFontMetrics, QImage, QPainter

log = logging.getLogger(__name__)

REFRESH_S = 0.5
_REC_RED = QColor(220, 38, 38)


@dataclass(frozen=True, slots=True)
class OverlayValues:
    """Numbers for the caption; None leaves a field out."""

    sessions: int | None = None
    sessions_running: int | None = None
    tokens_per_s: float | None = None
    savings_pct: float | None = None
    """Saving against the paid API, in percent (66 means "66% cheaper")."""
    note: str | None = None
    """Free text at the end, e.g. the model or the engine profile."""


OverlaySource = Callable[[], OverlayValues]


def caption_text(values: OverlayValues | None, elapsed_s: float, wall: dt.datetime) -> str:
    whole = int(elapsed_s)
    parts = [f"REC {whole // 3600:02d}:{whole // 60 % 60:02d}:{whole % 60:02d}",
             wall.strftime("%H:%M:%S")]
    if values is not None:
        if values.sessions is not None:
            running = (f" ({values.sessions_running} running)"
                       if values.sessions_running is not None else "")
            parts.append(f"{values.sessions} sessions{running}")
        if values.tokens_per_s is not None:
            parts.append(f"{values.tokens_per_s:,.0f} tok/s")
        if values.savings_pct is not None:
            parts.append(f"saving {values.savings_pct:.0f}% vs API")
        if values.note:
            parts.append(values.note)
    return "  ·  ".join(parts)


class OverlayPainter:
    """Draws the caption into the bottom-right corner of grabbed frames."""

    def __init__(self, source: OverlaySource | None, *, refresh_s: float = REFRESH_S) -> None:
        self._source = source
        self._refresh_s = refresh_s
        self._values: OverlayValues | None = None
        self._asked_at = float("-inf")
        self._source_broken = False
        self._cached_key: tuple[str, int] | None = None
        self._cached: QImage | None = None

    def values(self, now_s: float) -> OverlayValues | None:
        if self._source is None or self._source_broken:
            return self._values
        if now_s - self._asked_at >= self._refresh_s:
            self._asked_at = now_s
            try:
                self._values = self._source()
            except Exception:  # noqa: BLE001 - the app's callable must never stop a recording
                log.exception("overlay values callable failed; the caption goes on without them")
                self._source_broken = True
        return self._values

    def paint(self, image: QImage, elapsed_s: float, *, now_s: float | None = None,
              wall: dt.datetime | None = None) -> None:
        now_s = time.monotonic() if now_s is None else now_s
        text = caption_text(self.values(now_s), elapsed_s, wall or dt.datetime.now())
        font_px = max(11, min(28, image.height() // 45))
        caption = self._caption(text, font_px)
        margin = font_px
        corner = QPoint(max(0, image.width() - caption.width() - margin),
                        max(0, image.height() - caption.height() - margin))
        painter = QPainter(image)
        try:
            painter.drawImage(corner, caption)
        finally:
            painter.end()

    def _caption(self, text: str, font_px: int) -> QImage:
        key = (text, font_px)
        if self._cached is not None and self._cached_key == key:
            return self._cached
        font = QFont()
        font.setPixelSize(font_px)
        font.setBold(True)
        metrics = QFontMetrics(font)
        pad = font_px // 2
        dot = font_px * 0.7
        width = int(pad * 3 + dot + metrics.horizontalAdvance(text))
        height = int(metrics.height() + pad * 2)
        caption = QImage(width, height, QImage.Format.Format_ARGB32_Premultiplied)
        caption.fill(Qt.GlobalColor.transparent)
        painter = QPainter(caption)
        try:
            painter.setRenderHint(QPainter.RenderHint.Antialiasing)
            painter.setPen(Qt.PenStyle.NoPen)
            painter.setBrush(QColor(0, 0, 0, 170))
            painter.drawRoundedRect(QRectF(0, 0, width, height), pad, pad)
            painter.setBrush(_REC_RED)
            painter.drawEllipse(QRectF(pad, (height - dot) / 2, dot, dot))
            painter.setFont(font)
            painter.setPen(QColor(255, 255, 255))
            painter.drawText(QRectF(pad * 2 + dot, 0, width, height),
                             int(Qt.AlignmentFlag.AlignVCenter | Qt.AlignmentFlag.AlignLeft), text)
        finally:
            painter.end()
        self._cached_key, self._cached = key, caption
        return caption
