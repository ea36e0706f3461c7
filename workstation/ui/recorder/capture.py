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

from PySide6.QtCore import QPoint, QRect
from PySide6.QtGui import QImage
from PySide6.QtWidgets import QWidget

from workstation.ui.recorder.encoder import RawFrame

_LITTLE = sys.byteorder == "little"
_PIX_FMT = {
    QImage.Format.Format_RGB32: "bgra" if _LITTLE else "argb",
    QImage.Format.Format_ARGB32: "bgra" if _LITTLE else "argb",
    QImage.Format.Format_ARGB32_Premultiplied: "bgra" if _LITTLE else "argb",
    QImage.Format.Format_RGBX8888: "rgba",
    QImage.Format.Format_RGBA8888: "rgba",
    QImage.Format.Format_RGBA8888_Premultiplied: "rgba",
    QImage.Format.Format_RGB888: "rgb24",
}


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


def raw_frame(image: QImage, slot: int) -> RawFrame:
    """Wrap a grabbed picture for the encoder without copying its pixels."""
    return RawFrame(
        slot=slot,
        pixels=image.constBits(),
        width_px=image.width(),
        height_px=image.height(),
        bytes_per_line=image.bytesPerLine(),
        pix_fmt=_PIX_FMT[image.format()],
        owner=image,
    )
