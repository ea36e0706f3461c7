"""One tile of the grid: a painted two-line header, the transcript tail, and the
approval bar when the agent waits. The border turns amber while it waits."""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import QEvent, QRect, QRectF, QSize, Qt, Signal
from PySide6.QtGui import (
    QColor,
    QContextMenuEvent,
    QFontMetrics,
    QHelpEvent,
    QMouseEvent,
    QPainter,
    QPaintEvent,
    QPalette,
    QPixmap,
)
from PySide6.QtWidgets import QFrame, QSizePolicy, QToolTip, QVBoxLayout, QWidget

from workstation.core.session_state import SessionState
from workstation.ui import theme
from workstation.ui.icons_fallback import safe_icon
from workstation.ui.panes.approval_bar import ApprovalBar
from workstation.ui.panes.header_line import (
    KEEP,
    FirstLine,
    SecondLine,
    WherePart,
    fit_first_line,
    fit_second_line,
    joined,
)
from workstation.ui.panes.tail_view import TailView
from workstation.ui.panes.transcript_doc import TranscriptDoc


@dataclass(slots=True)
class PaneInfo:
    """What the header shows; updated from fleet events."""

    session_id: str
    name: str
    repo: str = ""
    branch: str = ""
    mode: str = ""
    protocol: str = ""
    """``guided`` (a small model, held to narrowed calls) or ``full``; empty until chosen."""
    state: SessionState = SessionState.READY
    tokens: int = 0
    """Prompt + completion tokens of its finished requests, as their ``usage`` counted them
    (what ``cost_usd`` prices); 0 until its first turn's usage arrives."""
    tokens_per_s: float = 0.0
    """From the fleet's one token rate (``SessionStatsChanged``)."""
    detail: str = ""
    """Why it failed or waits, in plain words."""
    ready: bool = False
    """Marked ready to merge."""
    server_url: str = ""
    """Where its dev server answers; empty when none runs."""
    rules: tuple[str, ...] = ()
    """The rules files it follows (``AGENTS.md``, ``src/AGENTS.md`` …), relative to its worktree."""
    adapter: str = ""
    """Its LoRA adapter; empty for the base model."""
    waiting_for: str = ""
    """What it waits for a person for: ``approval``, ``question`` or ``stuck`` (repeated
    mistakes); empty while it does not wait."""
    cost_usd: float | None = None
    """Its tokens at the chosen paid API's prices (None: no price chosen)."""
    background: bool = False
    """Marked background: its turns let the others' go first."""

    def look(self, pal: QPalette | None = None) -> theme.StateLook:
        return theme.state_look(self.state, self.waiting_for, pal)

    def rules_mark(self) -> str:
        """``§ AGENTS.md`` or ``§ AGENTS.md +2``; empty without rules."""
        if not self.rules:
            return ""
        return f"§ {self.rules[-1]}" + (f" +{len(self.rules) - 1}" if len(self.rules) > 1 else "")

    def where_parts(self) -> tuple[WherePart, ...]:
        """The header's second line by part, each with how soon it gives way in a narrow tile
        (``header_line``): the branch first (it repeats the name), the rules, the adapter, the
        protocol, the mode; the repository last of those, and never the marks of something to
        do (ready to merge, a dev server) or of how it is scheduled (background)."""
        server = f"▶ :{self.server_url.rstrip('/').rsplit(':', 1)[-1]}" if self.server_url else ""
        return (WherePart(self.repo, 5), WherePart(self.branch, 0), WherePart(self.mode, 4),
                WherePart(self.protocol, 3), WherePart(f"⧉ {self.adapter}" if self.adapter else "", 2),
                WherePart(self.rules_mark(), 1), WherePart("✓ ready" if self.ready else "", KEEP),
                WherePart(server, KEEP), WherePart("background" if self.background else "", KEEP))

    def where(self) -> str:
        """The header's second line in full: ``repo · branch · Act · guided · ⧉ adapter ·
        § AGENTS.md · ✓ ready · ▶ :8123``."""
        return joined([part.text for part in self.where_parts()])

    def header_tip(self) -> str:
        """The header's tooltip: every word a narrow tile elides."""
        said = state_text(self)
        state = f"{said}: {self.detail}" if self.detail and not self.detail.startswith(said) else self.detail or said
        return "\n".join(line for line in (self.name, self.where(), state) if line)


def compact_count(value: float) -> str:
    if value >= 1_000_000:
        return f"{value / 1_000_000:.1f}M"
    if value >= 10_000:
        return f"{value / 1000:.0f}k"
    if value >= 1000:
        return f"{value / 1000:.1f}k"
    return f"{value:.0f}"


def state_pixmap(name: str, colour: QColor, size_px: int) -> QPixmap:
    """A state icon in its colour (the icon set caches the rendering)."""
    return safe_icon(name, colour).pixmap(size_px, size_px)


def money(value: float) -> str:
    """``$0.031``, ``$1.24``, ``$1,204``: a cost a header can hold; ``<$0.001`` for a cost
    that rounds to nothing (a first turn's few hundred tokens read "$0.000", as if free)."""
    if 0 < value < 0.0005:
        return "<$0.001"
    if value >= 1000:
        return f"${value:,.0f}"
    return f"${value:.2f}" if value >= 1 else f"${value:.3f}"


def state_text(info: PaneInfo) -> str:
    """The header's state word; a queued session says why it waits ("engine full: KV 97 %")."""
    if info.state is SessionState.QUEUED and info.detail:
        return info.detail
    return info.look().word


FOCUS_TINT = 0.22
"""How far a focused tile's header moves toward the accent colour."""


class PaneHeader(QWidget):
    """Painted, not built from labels: 32 headers repaint at a few Hz for almost nothing.

    In the grid the focused tile's header is tinted with the accent: its border cannot say so
    where its state owns the border (waiting for a person, failed), and with every tile amber
    the user could not tell which request Ctrl+Enter approves, nor where the arrows stood."""

    def __init__(self, pane: SessionPane, *, marks_focus: bool = True) -> None:
        """``marks_focus``: tint while the pane has the grid's focus (not in the focus view,
        where the one pane shown is the focus)."""
        super().__init__(pane)
        self._pane = pane
        self._marks_focus = marks_focus
        self.setFont(theme.ui_font(8.5))
        fm = QFontMetrics(self.font())
        self._row_h = fm.height()
        self.setFixedHeight(self._row_h * 2 + 4)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.setAttribute(Qt.WidgetAttribute.WA_OpaquePaintEvent)

    def paintEvent(self, event: QPaintEvent) -> None:  # noqa: N802
        pane = self._pane
        info = pane.info
        pal = self.palette()
        p = QPainter(self)
        window = pal.color(QPalette.ColorRole.Window)
        if self._marks_focus and pane.focused:
            window = theme.mix(window, theme.accent(pal), FOCUS_TINT)
        p.fillRect(self.rect(), window)
        p.setRenderHint(QPainter.RenderHint.Antialiasing, True)
        w = self.width()
        row = self._row_h
        look = info.look(pal)
        colour = look.colour
        if look.tint:  # a failure: the whole header says so
            p.fillRect(self.rect(), theme.mix(window, colour, 0.16))
        # Row 1: state icon (a dot while it works), name, tok/s on the right.
        dot = max(6, row // 2)
        if look.icon:
            mark_w = row - 2
            p.drawPixmap(3, 2 + (row - mark_w) // 2, state_pixmap(look.icon, colour, mark_w))
        else:
            p.setPen(Qt.PenStyle.NoPen)
            p.setBrush(colour)
            p.drawEllipse(QRectF(5, 2 + (row - dot) / 2, dot, dot))
        text = pal.color(QPalette.ColorRole.WindowText)
        dim = theme.mix(text, pal.color(QPalette.ColorRole.Window), 0.45)
        bold = self.font()
        bold.setBold(True)
        name_x = self._name_x()
        first = self.first_line()
        p.setPen(dim)
        if first.figures:
            p.drawText(QRect(0, 2, w - 5, row), Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter,
                       first.figures)
        p.setFont(bold)
        p.setPen(text)
        p.drawText(QRect(name_x, 2, w - name_x, row), Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter,
                   first.name)
        p.setFont(self.font())
        # Row 2: repo · branch · mode · protocol, state on the right (coloured only when it means something).
        line = self.second_line()
        p.setPen(colour if info.state is not SessionState.RUNNING else dim)
        if self._state_bold():
            p.setFont(bold)
        p.drawText(QRect(0, 2 + row, w - 5, row), Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter, line.state)
        p.setFont(self.font())
        p.setPen(dim)
        p.drawText(QRect(5, 2 + row, w - 10, row), Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter, line.where)

    def _name_x(self) -> int:
        """Where the name starts: after the state icon, or the smaller dot."""
        mark_w = self._row_h - 2 if self._pane.info.look(self.palette()).icon else max(6, self._row_h // 2)
        return 5 + mark_w + 5

    def first_line(self) -> FirstLine:
        """What row 1 shows at the header's width (``header_line.fit_first_line``)."""
        bold = self.font()
        bold.setBold(True)
        return fit_first_line(self._pane.info.name, self.figures(), QFontMetrics(bold), QFontMetrics(self.font()),
                              self.width() - self._name_x() - 5)

    def figures(self) -> list[str]:
        """Row 1's figures, most telling first: live tok/s, tokens, what they would have cost
        at the chosen paid API (``header_line.fit_first_line`` drops from the end). All three
        are the fleet's (``SessionStatsChanged``), never the transcript's pieces, which count
        no generation (``fleet/stats.py``): before the first turn's usage the rate stands alone."""
        info = self._pane.info
        rate = self._pane.display_rate()
        return [f"{rate:.0f} t/s" if rate >= 0.5 else "", f"{compact_count(info.tokens)} tok" if info.tokens else "",
                money(info.cost_usd) if info.cost_usd else ""]

    def tip(self) -> str:
        """Every word the header may elide: name, second line, state and why, figures."""
        figures = [f for f in self.figures() if f]
        if self._pane.info.cost_usd:
            figures[-1] = f"{figures[-1]} at the paid API's prices"
        return "\n".join(line for line in (self._pane.info.header_tip(), " · ".join(figures)) if line)

    def _state_bold(self) -> bool:
        look = self._pane.info.look(self.palette())
        return look.tint or look.border_px > 1

    def second_line(self) -> SecondLine:
        """What row 2 shows at the header's width (``header_line.fit_second_line``)."""
        info = self._pane.info
        bold = self.font()
        bold.setBold(True)
        state_fm = QFontMetrics(bold if self._state_bold() else self.font())
        return fit_second_line(info.where_parts(), state_text(info), QFontMetrics(self.font()), state_fm,
                               self.width() - 10)

    def event(self, event: QEvent) -> bool:
        if event.type() is QEvent.Type.ToolTip and isinstance(event, QHelpEvent):
            QToolTip.showText(event.globalPos(), self.tip(), self)
            return True
        return super().event(event)

    def mouseDoubleClickEvent(self, event: QMouseEvent) -> None:  # noqa: N802
        self._pane.activated.emit()


class SessionPane(QFrame):
    """A live session in the grid."""

    activated = Signal()
    """Double-click or Enter: zoom into this pane."""
    focus_requested = Signal()
    approve = Signal()
    deny = Signal(str)
    edit = Signal(str)
    menu_requested = Signal(object)
    """A right-click: the ``QPoint`` (global) where the session's menu opens."""

    def __init__(self, info: PaneInfo, doc: TranscriptDoc, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.info = info
        self.doc = doc
        self.focused = False
        self.setFocusPolicy(Qt.FocusPolicy.NoFocus)
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Ignored)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(2, 2, 2, 2)
        layout.setSpacing(0)
        self.header = PaneHeader(self)
        self.view = TailView(doc, self)
        self.view.empty_text = "waiting for the first tokens…"
        self.approval = ApprovalBar(self)
        self.approval.hide()
        layout.addWidget(self.header)
        layout.addWidget(self.view, 1)
        layout.addWidget(self.approval)
        self.view.activated.connect(self.activated)
        self.view.line_toggled.connect(self.focus_requested)  # the tile clicked is the one focused
        self.approval.approved.connect(self.approve)
        self.approval.denied.connect(self.deny)
        self.approval.edited.connect(self.edit)

    # ----- updates -----
    def set_info(self, info: PaneInfo) -> None:
        old_state = self.info.state
        self.info = info
        if info.state is not old_state and not info.state.wants_user:
            self.approval.hide()
        self.header.update()
        if info.state is not old_state:
            self.update()

    def set_stats(self, tokens: int, tokens_per_s: float, cost_usd: float | None = None) -> None:
        self.info.tokens = tokens
        self.info.tokens_per_s = tokens_per_s
        self.info.cost_usd = cost_usd
        self.header.update()

    def show_approval(self, title: str, summary: str, arguments: str, preview: str = "") -> None:
        self.approval.show_request(title, summary, arguments, preview)
        self.update()

    def hide_approval(self) -> None:
        self.approval.hide()
        self.update()

    @property
    def waiting(self) -> bool:
        return self.info.state.wants_user

    def set_focused(self, focused: bool) -> None:
        if focused != self.focused:
            self.focused = focused
            self.update()
            self.header.update()

    def display_rate(self) -> float:
        """The session's tok/s as the fleet counts it (the status bar sums these)."""
        return self.info.tokens_per_s

    # ----- painting -----
    def paintEvent(self, event: QPaintEvent) -> None:  # noqa: N802
        p = QPainter(self)
        pal = self.palette()
        look = self.info.look(pal)
        if look.border_px > 1:  # waits for a person, or failed: its colour, whatever the focus
            colour, width = look.colour, look.border_px
        elif self.focused:
            colour, width = theme.accent(pal), 2
        else:
            colour, width = pal.color(QPalette.ColorRole.Mid), 1
        p.fillRect(self.rect(), colour)
        inner = self.rect().adjusted(width, width, -width, -width)
        p.fillRect(inner, pal.color(QPalette.ColorRole.Window))

    def mousePressEvent(self, event: QMouseEvent) -> None:  # noqa: N802
        self.focus_requested.emit()
        super().mousePressEvent(event)

    def mouseDoubleClickEvent(self, event: QMouseEvent) -> None:  # noqa: N802
        self.activated.emit()

    def contextMenuEvent(self, event: QContextMenuEvent) -> None:  # noqa: N802
        self.focus_requested.emit()
        self.menu_requested.emit(event.globalPos())

    def sizeHint(self) -> QSize:  # noqa: N802
        return QSize(240, 200)
