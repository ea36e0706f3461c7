"""The pane header's two lines fitted to its width. Row 1: the name, and its figures on the
right (tok/s, tokens, cost); row 2: ``repo · branch · mode · marks`` on the left, the state
(or why the session waits) on the right.

Row 1 keeps the name whole before the figures: the cost goes first, then the token count;
the first figure shown (the live rate while it streams) stays.

At 32 panes on a 1920-px screen a tile is about 236 px wide: both halves never fit whole.
The state comes first — it is what the user reads the grid for — so it keeps its full text
when that leaves the left side room to say which repository, a short form otherwise: the
engine left out as its subject ("engine queue: 158 waiting" → "queue: 158 waiting"), else the
reason's headline, the words before its colon ("engine near full: holding at 24 generating"
→ "engine near full"). The left side then gives way part by part, the least telling first:
the branch (``ws/<session name>``, the name again), the rules files, the adapter, the
protocol, the mode, and the repository last (at 200 px, with a dock open, "inventory ·
slow first token" says more than "Act · guided · slow first token"); the marks that ask
for something (✓ ready, a dev server) or say how it is scheduled (background) stay.
The header's tooltip holds every word.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from PySide6.QtCore import Qt
from PySide6.QtGui import QFontMetrics

SEPARATOR = " · "
GAP_PX = 8
"""Between the left side and the state."""
MIN_PART_CHARS = 3
"""A part elided to fewer characters than this (plus "…"), or to half of its own or less
("ws/…", "gui…"), is dropped instead: it would say nothing."""


@dataclass(frozen=True, slots=True)
class WherePart:
    text: str
    gives_way: int
    """Lower gives way first (elided, then dropped); parts of ``KEEP`` never do by themselves."""


KEEP = 99


FIGURES_SEPARATOR = "  "
NAME_GAP_PX = 10
"""Between the name and the figures."""


@dataclass(frozen=True, slots=True)
class FirstLine:
    name: str
    figures: str


def fit_first_line(name: str, figures: Sequence[str], name_fm: QFontMetrics, fm: QFontMetrics,
                   width_px: int) -> FirstLine:
    """The name and as many of ``figures`` (most telling first) as leave it whole; the first
    figure always shows, the name elided where even that leaves too little."""
    shown = [f for f in figures if f]
    name_w = name_fm.horizontalAdvance(name)

    def room(parts: Sequence[str]) -> int:
        text = FIGURES_SEPARATOR.join(parts)
        return width_px - (fm.horizontalAdvance(text) + NAME_GAP_PX if text else 0)

    while len(shown) > 1 and name_w > room(shown):
        shown.pop()
    return FirstLine(name_fm.elidedText(name, Qt.TextElideMode.ElideRight, max(10, room(shown))),
                     FIGURES_SEPARATOR.join(shown))


@dataclass(frozen=True, slots=True)
class SecondLine:
    where: str
    state: str


def short_forms(reason: str) -> tuple[str, ...]:
    """Shorter ways to say ``reason``, longest first: without the engine as its subject
    ("engine queue: 158 waiting" → "queue: 158 waiting": the tile is on the engine's wait
    anyway), then its headline ("engine near full")."""
    forms = [reason]
    if reason.startswith("engine ") and ":" in reason:
        forms.append(reason.removeprefix("engine "))
    forms.append(short_reason(reason))
    return tuple(dict.fromkeys(forms))


def short_reason(reason: str) -> str:
    """A reason's headline: the words before its first colon ("engine full: KV 97 %" →
    "engine full"); the reason itself when it has none."""
    head, colon, _ = reason.partition(":")
    return head.strip() if colon and head.strip() else reason


def joined(parts: Sequence[str]) -> str:
    return SEPARATOR.join(part for part in parts if part)


def fit_where(parts: Sequence[WherePart], fm: QFontMetrics, room_px: int) -> str:
    """``parts`` joined within ``room_px``: whole when they fit, else the parts that give way
    first elided or dropped, one at a time, and what is left elided at its end."""
    texts = [p.text for p in parts]
    if fm.horizontalAdvance(joined(texts)) <= room_px:
        return joined(texts)
    order = sorted((i for i, p in enumerate(parts) if p.text and p.gives_way < KEEP), key=lambda i: parts[i].gives_way)
    for i in order:
        texts[i] = ""
        rest = joined(texts)
        left = room_px - fm.horizontalAdvance(rest) - (fm.horizontalAdvance(SEPARATOR) if rest else 0)
        elided = fm.elidedText(parts[i].text, Qt.TextElideMode.ElideRight, max(0, left))
        kept = len(elided.rstrip("…"))
        if elided == parts[i].text or (kept >= MIN_PART_CHARS and 2 * kept > len(parts[i].text)):
            texts[i] = elided
            return joined(texts)
        if fm.horizontalAdvance(rest) <= room_px:
            return rest
    return fm.elidedText(joined(texts), Qt.TextElideMode.ElideRight, max(0, room_px))


def fit_second_line(parts: Sequence[WherePart], state: str, fm: QFontMetrics, state_fm: QFontMetrics,
                    width_px: int) -> SecondLine:
    """The line for ``width_px``; ``state_fm``: the state's font (bold when it needs the user)."""
    where_w = fm.horizontalAdvance(joined([p.text for p in parts]))
    if state_fm.horizontalAdvance(state) + GAP_PX + where_w <= width_px:
        return SecondLine(joined([p.text for p in parts]), state)
    keep_left = min(where_w, width_px // 3)  # enough to say which repository
    fits = [form for form in short_forms(state) if state_fm.horizontalAdvance(form) + GAP_PX + keep_left <= width_px]
    shown = fits[0] if fits else short_reason(state)
    if state_fm.horizontalAdvance(shown) + GAP_PX + keep_left > width_px:
        shown = state_fm.elidedText(shown, Qt.TextElideMode.ElideRight, max(10, width_px - GAP_PX - keep_left))
    room = width_px - (state_fm.horizontalAdvance(shown) + GAP_PX if shown else 0)
    return SecondLine(fit_where(parts, fm, room), shown)
