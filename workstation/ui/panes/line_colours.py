"""The pen colour of each transcript line style, from the palette (light and dark alike)."""

from __future__ import annotations

from PySide6.QtGui import QColor, QPalette

from workstation.ui import theme
from workstation.ui.panes.transcript_doc import LineStyle


def line_colours(pal: QPalette | None = None) -> dict[LineStyle, QColor]:
    """Pen colour for each transcript line style, derived from the palette."""
    pal = pal or theme.palette()
    text = pal.color(QPalette.ColorRole.Text)
    base = pal.color(QPalette.ColorRole.Base)
    dim = theme.mix(text, base, 0.45)
    dark = theme.is_dark(pal)
    code = QColor("#7fb4e0") if dark else QColor("#1f5f99")
    added = QColor("#6cc77a") if dark else QColor("#1f7a33")
    removed = QColor("#ef7b72") if dark else QColor("#b3261e")
    tool = QColor("#c9a6ef") if dark else QColor("#6a3fa0")
    return {
        LineStyle.TEXT: text,
        LineStyle.CODE: code,
        LineStyle.FENCE: dim,
        LineStyle.ADDED: added,
        LineStyle.REMOVED: removed,
        LineStyle.HUNK: dim,
        LineStyle.USER: theme.accent(pal) if not dark else theme.mix(theme.accent(pal), text, 0.35),
        LineStyle.TOOL: tool,
        LineStyle.OUTPUT: dim,
        LineStyle.NOTICE: dim,
        LineStyle.ERROR: removed,
        LineStyle.REASONING: dim,
        LineStyle.IMAGE: theme.accent(pal) if not dark else theme.mix(theme.accent(pal), text, 0.35),
    }
