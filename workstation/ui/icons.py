"""The app's icons: one monochrome SVG set that follows the palette, and the app icon.

    from workstation.ui.icons import icon, app_icon
    action.setIcon(icon("start"))                      # follows light / dark palette
    badge.setPixmap(icon("warning", "#d97706").pixmap(16, 16))   # a state colour

The symbolic SVGs in ``resources/icons/symbolic/`` draw with ``currentColor``. An icon made
here paints that colour at paint time from the application palette (``WindowText``; the
disabled and selected variants use the palette's disabled text and ``HighlightedText``), so
a theme switch recolours every icon without re-creating it. A fixed colour (state colours)
can be passed instead. Rendered pixmaps are cached per size, scale, mode and colour, and
``QIcon`` objects per name and colour.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

from PySide6.QtCore import QByteArray, QRect, QRectF, QSize, Qt
from PySide6.QtGui import QColor, QGuiApplication, QIcon, QIconEngine, QPainter, QPalette, QPixmap
from PySide6.QtSvg import QSvgRenderer

ICONS_DIR = Path(__file__).resolve().parent.parent / "resources" / "icons"
SYMBOLIC_DIR = ICONS_DIR / "symbolic"
APP_ICON_DIR = ICONS_DIR / "app"
APP_ICON_SIZES_PX = (16, 22, 24, 32, 48, 64, 128, 256, 512)
DISABLED_OPACITY = 0.45
_PIXMAP_CACHE_LIMIT = 48


def icon_names() -> tuple[str, ...]:
    """Names of the symbolic icons, sorted (``start``, ``pause``, ``warning``, …)."""
    return tuple(sorted(p.stem for p in SYMBOLIC_DIR.glob("*.svg")))


@cache
def _svg_text(name: str) -> str:
    path = SYMBOLIC_DIR / f"{name}.svg"
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise KeyError(f"no icon named {name!r} (known: {', '.join(icon_names())})") from None


class _SymbolicIconEngine(QIconEngine):
    """Paints one symbolic SVG in a palette colour (or a fixed one), at any size and scale."""

    def __init__(self, name: str, svg_text: str, color: QColor | None) -> None:
        super().__init__()
        self._name = name
        self._svg_text = svg_text
        self._color = QColor(color) if color is not None else None
        self._pixmaps: dict[tuple[int, int, float, int, int], QPixmap] = {}

    # --- what Qt calls ---
    def clone(self) -> QIconEngine:
        return _SymbolicIconEngine(self._name, self._svg_text, self._color)

    def key(self) -> str:
        return "workstation-symbolic"

    def iconName(self) -> str:
        return self._name

    def actualSize(self, size: QSize, mode: QIcon.Mode, state: QIcon.State) -> QSize:
        side = min(size.width(), size.height())
        return QSize(side, side)

    def pixmap(self, size: QSize, mode: QIcon.Mode, state: QIcon.State) -> QPixmap:
        return self.scaledPixmap(size, mode, state, 1.0)

    def scaledPixmap(
        self, size: QSize, mode: QIcon.Mode, state: QIcon.State, scale: float
    ) -> QPixmap:
        color, opacity = self._paint_color(mode)
        key = (size.width(), size.height(), round(scale, 3), color.rgba(), round(opacity * 100))
        cached = self._pixmaps.get(key)
        if cached is not None:
            return cached
        pixmap = self._render(size, scale, color, opacity)
        if len(self._pixmaps) >= _PIXMAP_CACHE_LIMIT:
            self._pixmaps.clear()
        self._pixmaps[key] = pixmap
        return pixmap

    def paint(self, painter: QPainter, rect: QRect, mode: QIcon.Mode, state: QIcon.State) -> None:
        scale = painter.device().devicePixelRatioF() if painter.device() is not None else 1.0
        painter.drawPixmap(rect, self.scaledPixmap(rect.size(), mode, state, scale))

    # --- our own ---
    def _paint_color(self, mode: QIcon.Mode) -> tuple[QColor, float]:
        if self._color is not None:
            return self._color, DISABLED_OPACITY if mode == QIcon.Mode.Disabled else 1.0
        palette = QGuiApplication.palette()
        if mode == QIcon.Mode.Disabled:
            return palette.color(QPalette.ColorGroup.Disabled, QPalette.ColorRole.WindowText), 1.0
        if mode == QIcon.Mode.Selected:
            return palette.color(QPalette.ColorGroup.Active, QPalette.ColorRole.HighlightedText), 1.0
        return palette.color(QPalette.ColorGroup.Active, QPalette.ColorRole.WindowText), 1.0

    def _render(self, size: QSize, scale: float, color: QColor, opacity: float) -> QPixmap:
        width_px = max(1, round(size.width() * scale))
        height_px = max(1, round(size.height() * scale))
        pixmap = QPixmap(width_px, height_px)
        pixmap.fill(Qt.GlobalColor.transparent)
        svg = self._svg_text.replace("currentColor", color.name(QColor.NameFormat.HexRgb))
        renderer = QSvgRenderer(QByteArray(svg.encode("utf-8")))
        side = min(width_px, height_px)
        target = QRectF((width_px - side) / 2, (height_px - side) / 2, side, side)
        painter = QPainter(pixmap)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        painter.setOpacity(opacity * color.alphaF())
        renderer.render(painter, target)
        painter.end()
        pixmap.setDevicePixelRatio(scale)
        return pixmap


_icons: dict[tuple[str, int | None], QIcon] = {}


def icon(name: str, color: QColor | str | None = None) -> QIcon:
    """The symbolic icon ``name``; palette-coloured unless ``color`` (a QColor or "#rrggbb")."""
    fixed = QColor(color) if color is not None else None
    if fixed is not None and not fixed.isValid():
        raise ValueError(f"not a colour: {color!r}")
    key = (name, fixed.rgba() if fixed is not None else None)
    found = _icons.get(key)
    if found is None:
        found = QIcon(_SymbolicIconEngine(name, _svg_text(name), fixed))
        _icons[key] = found
    return found


@cache
def app_icon() -> QIcon:
    """The application icon (window, taskbar, about box), from its PNG sizes 16–512 px."""
    result = QIcon()
    for size_px in APP_ICON_SIZES_PX:
        path = APP_ICON_DIR / f"workstation-{size_px}.png"
        if path.is_file():
            result.addFile(str(path), QSize(size_px, size_px))
    return result
