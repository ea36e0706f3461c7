"""The document behind one pane: a bounded list of styled lines, fed by coalesced deltas.

Token deltas only land in a pending list (``stream``: a list append, nothing else);
the window's flush tick moves them into lines (``flush``) at 15–30 Hz, so the cost
of a token on the GUI thread is constant and tiny. The document keeps at most
``max_lines`` lines (the full history stays in the fleet's store). Views observe it:
the tile paints its tail, the focus view mirrors it into a ``QPlainTextEdit``.

Qt-free on purpose: it is the part the benchmark and the tests count on.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable
from enum import Enum

FENCE = "```"
TAB = "    "


class LineStyle(Enum):
    TEXT = "text"
    """Assistant prose."""
    CODE = "code"
    """Inside a fenced code block."""
    FENCE = "fence"
    """A code fence line (```python)."""
    ADDED = "added"
    """A ``+`` line of a diff."""
    REMOVED = "removed"
    """A ``-`` line of a diff."""
    HUNK = "hunk"
    """A diff's ``@@`` line or file header."""
    USER = "user"
    """What the person typed (task, follow-ups, feedback)."""
    TOOL = "tool"
    """One compact line per tool call: icon, tool, target, ``+a −r``; expandable."""
    OUTPUT = "output"
    """Tool or command output (the expanded part of a tool line)."""
    NOTICE = "notice"
    """Quiet status lines (session started, checkpoint saved…)."""
    ERROR = "error"
    """Failures."""
    REASONING = "reasoning"
    """The model's thinking, when the engine streams it."""
    IMAGE = "image"
    """Images that went with the task or a message: a compact line in a tile, thumbnails in
    the focus view (``Line.images`` holds their paths)."""


_uid = itertools.count(1)


class Line:
    """One logical line; views wrap it to their width."""

    __slots__ = ("uid", "text", "style", "detail", "expanded", "tool", "wrap_key", "wrapped", "images")

    def __init__(self, text: str, style: LineStyle, *, detail: str = "", tool: str = "",
                 images: tuple[str, ...] = ()) -> None:
        self.uid = next(_uid)
        self.images = images
        """Paths of the images an ``IMAGE`` line shows."""
        self.text = text
        self.style = style
        self.detail = detail
        """Lines shown under a tool line when expanded (arguments, output)."""
        self.expanded = False
        self.tool = tool
        self.wrap_key: tuple[int, int, bool] | None = None  # (cols, len(text), expanded) of the wrap
        self.wrapped: tuple[str, ...] = ()
        """Cached rows; a tuple of str, which the garbage collector stops tracking."""

    @property
    def expandable(self) -> bool:
        return bool(self.detail)

    def __repr__(self) -> str:
        return f"Line({self.style.value}, {self.text[:40]!r})"


Observer = Callable[[list[Line]], None]
"""Called after a change with the lines appended or extended by it, oldest first."""


class TranscriptDoc:
    """A pane's bounded transcript, fed by ``stream`` (tokens) and ``add_*`` (whole lines)."""

    def __init__(self, *, max_lines: int = 2000) -> None:
        self.max_lines = max(10, max_lines)
        self.lines: deque[Line] = deque()
        self.revision = 0
        """Bumped by every change; a view repaints when it differs from what it drew."""
        self.tokens_flushed = 0
        """Streamed tokens that reached the document (what the benchmark counts)."""
        self.chars_flushed = 0
        self.trimmed_lines = 0
        self._pending: list[str] = []
        self._pending_tokens = 0
        self._pending_style = LineStyle.TEXT
        self._streaming: Line | None = None  # the line streamed text extends
        self._in_code = False
        self._code_lang = ""
        self._observers: list[Observer] = []

    # ----- the hot path -----
    def stream(self, text: str, tokens: int = 1, *, reasoning: bool = False) -> None:
        """Queue streamed assistant text; it reaches the lines at the next ``flush``."""
        style = LineStyle.REASONING if reasoning else LineStyle.TEXT
        if style is not self._pending_style and self._pending:
            self.flush()
        self._pending_style = style
        self._pending.append(text)
        self._pending_tokens += tokens

    @property
    def has_pending(self) -> bool:
        return bool(self._pending)

    @property
    def pending_tokens(self) -> int:
        return self._pending_tokens

    def flush(self) -> bool:
        """Move pending deltas into lines; True when anything changed."""
        if not self._pending:
            return False
        text = "".join(self._pending).replace("\t", TAB)
        self._pending.clear()
        tokens, self._pending_tokens = self._pending_tokens, 0
        reasoning = self._pending_style is LineStyle.REASONING
        touched: list[Line] = []
        parts = text.split("\n")
        line = self._streaming
        if line is None or (line.style is LineStyle.REASONING) != reasoning:
            line = self._new_stream_line(reasoning)
        line.text += parts[0]
        self._restyle(line, reasoning)
        touched.append(line)
        for part in parts[1:]:
            self._close_stream_line(line)
            line = self._new_stream_line(reasoning)
            line.text = part
            self._restyle(line, reasoning)
            touched.append(line)
        self.tokens_flushed += tokens
        self.chars_flushed += len(text)
        self._changed(touched)
        return True

    # ----- whole lines -----
    def end_stream(self) -> None:
        """The current assistant message ended: the next streamed text starts a new line."""
        self.flush()
        if self._streaming is not None:
            self._close_stream_line(self._streaming)
        self._streaming = None
        self._in_code = False
        self._code_lang = ""

    def add_line(
        self, text: str, style: LineStyle, *, detail: str = "", tool: str = ""
    ) -> Line:
        """Append one whole line (tool call, user message, notice…)."""
        self.end_stream()
        line = Line(text.replace("\t", TAB), style, detail=detail, tool=tool)
        self._append(line)
        self._changed([line])
        return line

    def add_images(self, paths: tuple[str, ...], names: tuple[str, ...] = ()) -> Line:
        """Append the images that went with a message (thumbnails where the view can draw them)."""
        shown = names or tuple(p.rsplit("/", 1)[-1] for p in paths)
        self.end_stream()
        line = Line(f"▣ {', '.join(shown)}", LineStyle.IMAGE, images=tuple(paths))
        self._append(line)
        self._changed([line])
        return line

    def add_block(self, text: str, style: LineStyle) -> list[Line]:
        """Append several lines of one style (a user message, an error with details)."""
        self.end_stream()
        lines = [Line(part.replace("\t", TAB), style) for part in text.split("\n")]
        for line in lines:
            self._append(line)
        self._changed(lines)
        return lines

    def toggle(self, line: Line) -> None:
        """Expand or collapse a tool line's details."""
        if line.expandable:
            line.expanded = not line.expanded
            self.revision += 1

    def clear(self) -> None:
        self.flush()
        self.lines.clear()
        self._streaming = None
        self._in_code = False
        self.revision += 1
        self._changed([])

    # ----- observers (views) -----
    def subscribe(self, observer: Observer) -> None:
        self._observers.append(observer)

    def unsubscribe(self, observer: Observer) -> None:
        if observer in self._observers:
            self._observers.remove(observer)

    def text(self) -> str:
        """The whole document as plain text (tests, copy)."""
        return "\n".join(line.text for line in self.lines)

    def tail(self, count: int) -> list[Line]:
        start = max(0, len(self.lines) - count)
        return list(itertools.islice(self.lines, start, None))

    # ----- internals -----
    def _new_stream_line(self, reasoning: bool) -> Line:
        style = LineStyle.REASONING if reasoning else (
            LineStyle.CODE if self._in_code else LineStyle.TEXT
        )
        line = Line("", style)
        self._streaming = line
        self._append(line)
        return line

    def _restyle(self, line: Line, reasoning: bool) -> None:
        if reasoning:
            return
        stripped = line.text.lstrip()
        if stripped.startswith(FENCE):
            line.style = LineStyle.FENCE
        elif self._in_code:
            line.style = code_style(line.text, self._code_lang)
        else:
            line.style = LineStyle.TEXT

    def _close_stream_line(self, line: Line) -> None:
        if line.style is LineStyle.FENCE:
            if self._in_code:
                self._in_code = False
                self._code_lang = ""
            else:
                self._in_code = True
                self._code_lang = line.text.strip()[3:].strip().lower()

    def _append(self, line: Line) -> None:
        self.lines.append(line)
        while len(self.lines) > self.max_lines:
            old = self.lines.popleft()
            self.trimmed_lines += 1
            if old is self._streaming:
                self._streaming = None

    def _changed(self, lines: list[Line]) -> None:
        self.revision += 1
        for observer in tuple(self._observers):
            observer(lines)


def diff_style(line: str) -> LineStyle:
    if line.startswith(("+++", "---", "@@", "diff ", "index ")):
        return LineStyle.HUNK
    if line.startswith("+"):
        return LineStyle.ADDED
    if line.startswith("-"):
        return LineStyle.REMOVED
    return LineStyle.CODE


def code_style(line: str, lang: str) -> LineStyle:
    if lang in ("diff", "patch"):
        return diff_style(line)
    return LineStyle.CODE


def wrap_line(text: str, cols: int) -> list[str]:
    """Wrap one line to ``cols`` monospace cells, at spaces where one is near the end."""
    if cols <= 1:
        cols = 1
    if len(text) <= cols:
        return [text]
    out: list[str] = []
    start = 0
    n = len(text)
    half = cols // 2
    while n - start > cols:
        cut = text.rfind(" ", start + half, start + cols + 1)
        if cut <= start:
            out.append(text[start:start + cols])
            start += cols
        else:
            out.append(text[start:cut])
            start = cut + 1
    out.append(text[start:])
    return out


def diff_counts(diff_text: str) -> tuple[int, int]:
    """(+added, −removed) lines of a unified diff."""
    added = removed = 0
    for line in diff_text.splitlines():
        if line.startswith("+") and not line.startswith("+++"):
            added += 1
        elif line.startswith("-") and not line.startswith("---"):
            removed += 1
    return added, removed
