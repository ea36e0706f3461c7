"""Render the app icon's PNG sizes from its SVG (the SVG is the source; PNGs are committed).

    .venv/bin/python packaging/render_icons.py          # rewrite the PNGs
    .venv/bin/python packaging/render_icons.py --check  # exit 1 if a PNG is missing or stale

Uses Qt's own SVG renderer (PySide6's QtSvg), offscreen, so no display and no extra tool is
needed. "Stale" means a PNG's size is wrong or it differs from a fresh rendering by more than
a rounding error (renderers of other Qt versions may differ by a level or two per channel).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PySide6.QtCore import QRectF, Qt  # noqa: E402
from PySide6.QtGui import QGuiApplication, QImage, QPainter  # noqa: E402
from PySide6.QtSvg import QSvgRenderer  # noqa: E402

APP_ICON_DIR = Path(__file__).resolve().parent.parent / "workstation" / "resources" / "icons" / "app"
SOURCE = APP_ICON_DIR / "workstation.svg"
SIZES_PX = (16, 22, 24, 32, 48, 64, 128, 256, 512)
MAX_CHANNEL_DIFF = 8


def png_path(size_px: int) -> Path:
    return APP_ICON_DIR / f"workstation-{size_px}.png"


def render(renderer: QSvgRenderer, size_px: int) -> QImage:
    image = QImage(size_px, size_px, QImage.Format.Format_ARGB32_Premultiplied)
    image.fill(Qt.GlobalColor.transparent)
    painter = QPainter(image)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    painter.setRenderHint(QPainter.RenderHint.SmoothPixmapTransform)
    renderer.render(painter, QRectF(0, 0, size_px, size_px))
    painter.end()
    return image.convertToFormat(QImage.Format.Format_ARGB32)


def max_difference(a: QImage, b: QImage) -> int:
    if a.size() != b.size():
        return 255
    a = a.convertToFormat(QImage.Format.Format_ARGB32)
    b = b.convertToFormat(QImage.Format.Format_ARGB32)
    worst = 0
    for y in range(a.height()):
        for x in range(a.width()):
            pa, pb = a.pixel(x, y), b.pixel(x, y)
            for shift in (0, 8, 16, 24):
                worst = max(worst, abs(((pa >> shift) & 0xFF) - ((pb >> shift) & 0xFF)))
    return worst


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only check the committed PNGs")
    args = parser.parse_args(argv)
    _app = QGuiApplication.instance() or QGuiApplication(sys.argv[:1])
    renderer = QSvgRenderer(str(SOURCE))
    if not renderer.isValid():
        print(f"cannot read {SOURCE}", file=sys.stderr)
        return 1
    stale: list[str] = []
    for size_px in SIZES_PX:
        fresh = render(renderer, size_px)
        path = png_path(size_px)
        if args.check:
            committed = QImage(str(path))
            if committed.isNull() or max_difference(committed, fresh) > MAX_CHANNEL_DIFF:
                stale.append(path.name)
            continue
        if not fresh.save(str(path), "PNG"):
            print(f"cannot write {path}", file=sys.stderr)
            return 1
        print(f"wrote {path.name}")
    if stale:
        print("stale or missing: " + ", ".join(stale) + " (run packaging/render_icons.py)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
