"""Grabbing pictures of the window, one pane or a region, cheaply, on the GUI thread.

Three ways, cheapest first:

- **backing store**: the top-level window's ``QBackingStore.paintDevice()`` is the raster
  image Qt paints every widget into; copying a rectangle of it is one ``memcpy``
  (~0.4 ms at 1920×1080) and shows what the widgets painted even where another window
  covers them. Real pixels on every raster platform (offscreen, xcb, wayland, cocoa).
- **screen**: ``QScreen.grabWindow`` — on the offscreen platform a copy of the same
  backing store; on X11 a read-back from the X server (covered parts show what covers
  them); on Wayland it gives nothing.
- **render**: ``QWidget.grab`` re-renders every widget (~25 ms at 1080p with 32 panes) —
  the fallback where neither of the others gives pixels (e.g. native GL children).

``AUTO`` takes the backing store where it is a raster image and falls back otherwise.
"""

from __future__ import annotations

import enum
import sys
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from PySide6.QtCore import QPoint, QRect, QSize, Qt
from PySide6.QtGui import QImage
from PySide6.QtWidgets import QWidget

_LITTLE = sys.byteorder == "little"
_PIX_FMT = {
    QImage.Format.Format_RGB32: "bgra" if _LITTLE else "argb",
    QImage.Format.Format_ARGB32: "bgra" if _LITTLE else "argb",
    QImage.Format.Format_ARGB32_Premultiplied: "bgra" if _LITTLE else "argb",
    QImage.Format.Format_RGBX8888: "rgba",
    QImage.Format.Format_RGBA8888: "rgba",
    QImage.Format.Format_RGBA8888_Premultiplied: "rgba",
}
"""4-byte formats the encoder reads as they are; anything else is converted to RGB32."""
_BYTES_PER_PIXEL = 4


@dataclass(frozen=True, slots=True)
class GrabbedPicture:
    """Where :meth:`FrameGrabber.grab_into` put a picture: tightly packed rows."""

    width_px: int
    height_px: int
    bytes_per_line: int
    pix_fmt: str
    qimage_format: QImage.Format


class GrabMethod(enum.Enum):
    AUTO = "auto"
    BACKING_STORE = "backing-store"
    SCREEN = "screen"
    RENDER = "render"


class FrameGrabber:
    """Pictures of ``target`` (a top-level window or any widget in one), or of ``region``
    (in ``target``'s coordinates). Each :meth:`grab` is a fresh, unshared QImage."""

    def __init__(self, target: QWidget, *, region: QRect | None = None,
                 method: GrabMethod = GrabMethod.AUTO) -> None:
        self.target = target
        self.region = QRect(region) if region is not None else None
        self.method = method
        self.last_method: GrabMethod | None = None

    def logical_rect(self) -> QRect:
        """The captured area in the top-level window's coordinates (logical pixels)."""
        target = self.target
        window = target.window()
        area = target.rect() if self.region is None else self.region.intersected(target.rect())
        if target is not window:
            area = area.translated(target.mapTo(window, QPoint(0, 0)))
        return area.intersected(window.rect())

    def grab(self) -> QImage | None:
        """A picture of the area now, or None when there is nothing to see (not shown,
        zero size)."""
        if not self.target.isVisible():
            return None
        area = self.logical_rect()
        if area.isEmpty():
            return None
        order = (
            (GrabMethod.BACKING_STORE, GrabMethod.SCREEN, GrabMethod.RENDER)
            if self.method is GrabMethod.AUTO else (self.method,)
        )
        for method in order:
            image = self._grab_with(method, area)
            if image is not None and not image.isNull():
                self.last_method = method
                return _supported(image)
        return None

    def grab_into(self, buffer_for: Callable[[int], memoryview],
                  max_bytes: int) -> GrabbedPicture | None:
        """Copy a picture straight into the buffer ``buffer_for(nbytes)`` gives (one copy
        of the backing store's rows; no QImage in between where it can be avoided).
        Pictures over ``max_bytes`` (the window grew) are scaled down to fit."""
        if not self.target.isVisible():
            return None
        area = self.logical_rect()
        if area.isEmpty():
            return None
        source: QImage | None = None
        pixels: QRect | None = None
        if self.method in (GrabMethod.AUTO, GrabMethod.BACKING_STORE):
            store = self.target.window().backingStore()
            device = store.paintDevice() if store is not None else None
            if isinstance(device, QImage) and not device.isNull() and device.format() in _PIX_FMT:
                ratio = device.devicePixelRatio()
                pixels = QRect(round(area.x() * ratio), round(area.y() * ratio),
                               round(area.width() * ratio), round(area.height() * ratio))
                pixels = pixels.intersected(device.rect())
                if not pixels.isEmpty():
                    source = device
                    self.last_method = GrabMethod.BACKING_STORE
        if source is None:
            if self.method is GrabMethod.BACKING_STORE:
                return None
            image = self.grab()
            if image is None:
                return None
            source, pixels = _supported(image), QRect(0, 0, image.width(), image.height())
        width, height = pixels.width(), pixels.height()
        if width * height * _BYTES_PER_PIXEL > max_bytes:
            source = source.copy(pixels).scaled(
                _fit(width, height, max_bytes), Qt.AspectRatioMode.KeepAspectRatio,
                Qt.TransformationMode.FastTransformation)
            pixels = QRect(0, 0, source.width(), source.height())
            width, height = source.width(), source.height()
        row_bytes = width * _BYTES_PER_PIXEL
        rows = np.frombuffer(source.constBits(), np.uint8, count=source.bytesPerLine() * source.height())
        rows = rows.reshape(source.height(), source.bytesPerLine())
        target = np.frombuffer(buffer_for(row_bytes * height), np.uint8).reshape(height, row_bytes)
        x0 = pixels.x() * _BYTES_PER_PIXEL
        np.copyto(target, rows[pixels.y():pixels.y() + height, x0:x0 + row_bytes])
        return GrabbedPicture(width, height, row_bytes, _PIX_FMT[source.format()], source.format())

    def _grab_with(self, method: GrabMethod, area: QRect) -> QImage | None:
        window = self.target.window()
        if method is GrabMethod.BACKING_STORE:
            store = window.backingStore()
            device = store.paintDevice() if store is not None else None
            if not isinstance(device, QImage) or device.isNull():
                return None
            ratio = device.devicePixelRatio()
            pixels = QRect(round(area.x() * ratio), round(area.y() * ratio),
                           round(area.width() * ratio), round(area.height() * ratio))
            pixels = pixels.intersected(device.rect())
            return device.copy(pixels) if not pixels.isEmpty() else None
        if method is GrabMethod.SCREEN:
            screen = window.screen()
            if screen is None:
                return None
            pixmap = screen.grabWindow(window.winId(), area.x(), area.y(), area.width(), area.height())
            return pixmap.toImage() if not pixmap.isNull() else None
        local = area.translated(-self.target.mapTo(window, QPoint(0, 0)))
        return self.target.grab(local).toImage()


def _supported(image: QImage) -> QImage:
    if image.format() in _PIX_FMT:
        return image
    return image.convertToFormat(QImage.Format.Format_RGB32)


def _fit(width: int, height: int, max_bytes: int) -> QSize:
    scale = (max_bytes / (width * height * _BYTES_PER_PIXEL)) ** 0.5
    return QSize(max(2, int(width * scale)), max(2, int(height * scale)))
