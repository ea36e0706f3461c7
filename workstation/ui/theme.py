"""Colours and fonts: the system palette everywhere, fixed colours only where they mean
something (session states, diff signs). Light and dark both follow from the palette."""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtGui import QColor, QFont, QFontDatabase, QGuiApplication, QPalette

from workstation.core.session_state import SessionState

AMBER = QColor("#e0a100")
GREEN = QColor("#2e9e44")
RED = QColor("#d0453b")
GREY = QColor("#8a8f98")
VIOLET = QColor("#8e5bd6")
"""A question the agent asked."""
ORANGE = QColor("#d9640b")
"""Stuck after repeated mistakes."""

_STATE_COLOURS: dict[SessionState, QColor] = {
    SessionState.PREPARING: GREY,
    SessionState.READY: GREY,
    SessionState.QUEUED: GREY,
    SessionState.AWAITING_APPROVAL: AMBER,
    SessionState.NEEDS_INPUT: AMBER,
    SessionState.ENGINE_WAIT: AMBER,
    SessionState.BUDGET_REACHED: AMBER,
    SessionState.DONE: GREEN,
    SessionState.FAILED: RED,
    SessionState.STOPPED: GREY,
}


def palette() -> QPalette:
    return QGuiApplication.palette()


def is_dark(pal: QPalette | None = None) -> bool:
    pal = pal or palette()
    return pal.color(QPalette.ColorRole.Window).lightness() < 128


def accent(pal: QPalette | None = None) -> QColor:
    pal = pal or palette()
    return pal.color(QPalette.ColorRole.Highlight)


def state_colour(state: SessionState, pal: QPalette | None = None) -> QColor:
    """Grey queued, accent running, amber waiting for a person, green done, red failed,
    dim paused."""
    if state is SessionState.RUNNING:
        return accent(pal)
    if state is SessionState.PAUSED:
        pal = pal or palette()
        return pal.color(QPalette.ColorRole.PlaceholderText)
    return _STATE_COLOURS.get(state, GREY)


@dataclass(frozen=True, slots=True)
class StateLook:
    """How a session's state shows on its tile: colour, icon, word, border and tint."""

    colour: QColor
    icon: str
    """A symbolic icon (``resources/icons/symbolic``); empty: a plain dot."""
    word: str
    border_px: int = 1
    """0: the ordinary frame."""
    tint: bool = False
    """The header is tinted with the colour (a failure stands out above all)."""


WAITING_LOOKS = {
    "approval": (AMBER, "warning", "needs approval"),
    "question": (VIOLET, "question", "asked you"),
    "stuck": (ORANGE, "stuck", "stuck · mistakes"),
}
"""What a session waiting for a person waits for (``PaneInfo.waiting_for``)."""


def state_look(state: SessionState, waiting_for: str = "", pal: QPalette | None = None) -> StateLook:
    """Each state its own colour and icon, at a glance on 32 tiles: needs approval (amber ⚠),
    asked a question (violet ?), stuck after mistakes (orange ↻), failed (red ✗, thicker
    border and a tinted header: it must stand out more than stuck), done (green ✓)."""
    if state.wants_user:
        key = waiting_for or ("approval" if state is SessionState.AWAITING_APPROVAL else "question")
        colour, icon_name, word = WAITING_LOOKS.get(key, WAITING_LOOKS["question"])
        return StateLook(colour, icon_name, word, 2)
    if state is SessionState.FAILED:
        return StateLook(RED, "error", "failed", 3, True)
    if state is SessionState.DONE:
        return StateLook(GREEN, "check", "done")
    if state is SessionState.PAUSED:
        return StateLook(state_colour(state, pal), "paused", "paused")
    if state is SessionState.ENGINE_WAIT:
        return StateLook(AMBER, "engine", "engine wait")
    if state is SessionState.BUDGET_REACHED:
        return StateLook(AMBER, "paused", "budget reached", 2)
    if state is SessionState.RUNNING:
        return StateLook(accent(pal), "", "running")
    return StateLook(state_colour(state, pal), "", state.label)


def mix(a: QColor, b: QColor, t: float) -> QColor:
    """``a`` moved ``t`` of the way to ``b``."""
    return QColor(
        round(a.red() + (b.red() - a.red()) * t),
        round(a.green() + (b.green() - a.green()) * t),
        round(a.blue() + (b.blue() - a.blue()) * t),
    )


def mono_font(point_size: float = 8.0) -> QFont:
    font = QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont)
    font.setPointSizeF(point_size)
    font.setStyleHint(QFont.StyleHint.Monospace)
    return font


def ui_font(point_size: float | None = None, *, bold: bool = False) -> QFont:
    font = QFontDatabase.systemFont(QFontDatabase.SystemFont.GeneralFont)
    if point_size is not None:
        font.setPointSizeF(point_size)
    font.setBold(bold)
    return font


DARK_PALETTE_COLOURS = {
    QPalette.ColorRole.Window: "#1f2226",
    QPalette.ColorRole.WindowText: "#dfe3e8",
    QPalette.ColorRole.Base: "#16181b",
    QPalette.ColorRole.AlternateBase: "#23272c",
    QPalette.ColorRole.Text: "#dfe3e8",
    QPalette.ColorRole.Button: "#2a2e34",
    QPalette.ColorRole.ButtonText: "#dfe3e8",
    QPalette.ColorRole.Highlight: "#3d8fd6",
    QPalette.ColorRole.HighlightedText: "#ffffff",
    QPalette.ColorRole.ToolTipBase: "#2a2e34",
    QPalette.ColorRole.ToolTipText: "#dfe3e8",
    QPalette.ColorRole.PlaceholderText: "#7b828c",
    QPalette.ColorRole.Mid: "#3a3f46",
    QPalette.ColorRole.Dark: "#111315",
    QPalette.ColorRole.Light: "#3a3f46",
    QPalette.ColorRole.Link: "#6fb0ea",
}

LIGHT_PALETTE_COLOURS = {
    QPalette.ColorRole.Window: "#f3f4f6",
    QPalette.ColorRole.WindowText: "#1d2127",
    QPalette.ColorRole.Base: "#ffffff",
    QPalette.ColorRole.AlternateBase: "#f0f2f5",
    QPalette.ColorRole.Text: "#1d2127",
    QPalette.ColorRole.Button: "#e9ebee",
    QPalette.ColorRole.ButtonText: "#1d2127",
    QPalette.ColorRole.Highlight: "#2f74c0",
    QPalette.ColorRole.HighlightedText: "#ffffff",
    QPalette.ColorRole.ToolTipBase: "#ffffff",
    QPalette.ColorRole.ToolTipText: "#1d2127",
    QPalette.ColorRole.PlaceholderText: "#8a9099",
    QPalette.ColorRole.Mid: "#c9cdd3",
    QPalette.ColorRole.Dark: "#9aa0a8",
    QPalette.ColorRole.Light: "#ffffff",
    QPalette.ColorRole.Link: "#2f74c0",
}


def apply_theme(app: QGuiApplication, theme: str) -> None:
    """``system`` keeps the desktop's palette; ``light`` / ``dark`` set one explicitly
    (also what screenshots use, where no desktop palette exists)."""
    if theme not in ("light", "dark"):
        return
    colours = DARK_PALETTE_COLOURS if theme == "dark" else LIGHT_PALETTE_COLOURS
    pal = QPalette()
    for role, value in colours.items():
        pal.setColor(role, QColor(value))
    for role in (QPalette.ColorRole.Text, QPalette.ColorRole.WindowText, QPalette.ColorRole.ButtonText):
        pal.setColor(QPalette.ColorGroup.Disabled, role, QColor(colours[QPalette.ColorRole.PlaceholderText]))
    app.setPalette(pal)
