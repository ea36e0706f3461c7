"""Reading and changing files: ``read_file``, ``write_to_file``, ``replace_in_file``.

Plain blocking functions (the agent runs them on its tool executor), each taking the
session's :class:`PathJail` and returning the text the model sees, or raising
:class:`ToolError` with a message the model can act on. Writes are atomic (temp file in
the same directory + ``os.replace``) and keep the file's mode, encoding and line endings.
"""

from __future__ import annotations

import codecs
import difflib
import os
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path

from workstation.agent.diff_blocks import DiffError, apply_blocks, parse_blocks
from workstation.agent.jail import JailError, PathJail
from workstation.agent.tool_api import ToolError

BINARY_SNIFF_BYTES = 8192
HARD_READ_LIMIT_BYTES = 64 << 20


@dataclass(frozen=True, slots=True)
class Decoded:
    text: str
    encoding: str
    """``utf-8``, ``utf-8-sig``, ``utf-16`` or ``latin-1`` (the fallback that never fails)."""


def looks_binary(data: bytes) -> bool:
    head = data[:BINARY_SNIFF_BYTES]
    if head.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return False
    return b"\x00" in head


def decode_text(data: bytes) -> Decoded:
    """Decode file bytes: BOMs first, then UTF-8, then Latin-1."""
    if data.startswith(codecs.BOM_UTF8):
        return Decoded(data[len(codecs.BOM_UTF8):].decode("utf-8", errors="replace"), "utf-8-sig")
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return Decoded(data.decode("utf-16", errors="replace"), "utf-16")
    try:
        return Decoded(data.decode("utf-8"), "utf-8")
    except UnicodeDecodeError:
        return Decoded(data.decode("latin-1"), "latin-1")


def _resolve(jail: PathJail, path: str, *, for_write: bool = False) -> Path:
    try:
        return jail.resolve(path, for_write=for_write)
    except JailError as exc:
        raise ToolError(str(exc)) from None


def _missing(jail: PathJail, real: Path, shown: str) -> ToolError:
    parent = real.parent
    hint = ""
    if parent.is_dir() and jail.contains(str(parent)):
        try:
            names = [p.name for p in parent.iterdir()]
        except OSError:
            names = []
        close = difflib.get_close_matches(real.name, names, n=3, cutoff=0.6)
        if close:
            rel = jail.relative(parent)
            shown_close = ", ".join(n if rel == "." else f"{rel}/{n}" for n in close)
            hint = f" Did you mean: {shown_close}?"
        else:
            hint = " Use list_files to see which files exist."
    else:
        hint = " Its directory does not exist either; use list_files to look around."
    return ToolError(f"{shown} does not exist.{hint}")


def read_file(
    jail: PathJail, path: str, start_line: int | None = None, end_line: int | None = None,
    *, max_bytes: int, max_chars: int,
) -> str:
    real = _resolve(jail, path)
    shown = jail.relative(real)
    if real.is_dir():
        raise ToolError(f"{shown} is a directory; use list_files to see what it holds")
    if not real.exists():
        raise _missing(jail, real, shown)
    try:
        size = real.stat().st_size
        if size > HARD_READ_LIMIT_BYTES:
            raise ToolError(f"{shown} is {size:,} bytes, too large to read")
        ranged = start_line is not None or end_line is not None
        if size > max_bytes and not ranged:
            raise ToolError(
                f"{shown} is {size:,} bytes (limit {max_bytes:,}); read a part of it with "
                f"start_line and end_line"
            )
        data = real.read_bytes()
    except OSError as exc:
        raise ToolError(f"cannot read {shown}: {exc.strerror or exc}") from None
    if looks_binary(data):
        raise ToolError(f"{shown} is a binary file ({len(data):,} bytes); it cannot be shown as text")
    decoded = decode_text(data)
    lines = decoded.text.splitlines(keepends=True)
    total = len(lines)
    first = 1 if start_line is None else start_line
    last = total if end_line is None else min(end_line, total)
    if first < 1:
        raise ToolError(f"start_line must be 1 or more (got {first})")
    if total == 0:
        return f"[{shown} is empty]"
    if first > total:
        raise ToolError(f"{shown} has only {total} lines; start_line {first} is past the end")
    if last < first:
        raise ToolError(f"end_line ({end_line}) is before start_line ({first})")
    chosen = lines[first - 1:last]
    out: list[str] = []
    used = 0
    shown_last = first - 1
    for line in chosen:
        if used + len(line) > max_chars and out:
            break
        out.append(line)
        used += len(line)
        shown_last += 1
    body = "".join(out)
    notes: list[str] = []
    if decoded.encoding not in ("utf-8",):
        notes.append(f"encoding {decoded.encoding}")
    if (first, shown_last) != (1, total):
        notes.append(f"lines {first}-{shown_last} of {total}")
    if shown_last < last:
        notes.append(f"cut at {max_chars:,} characters; read on with start_line={shown_last + 1}")
    header = f"[{shown}: {'; '.join(notes)}]\n" if notes else ""
    return header + body


def strip_code_fence(path: str, content: str) -> tuple[str, bool]:
    """Remove a Markdown fence wrapped around a whole file (weak models add one)."""
    if path.lower().endswith((".md", ".markdown", ".rst", ".txt")):
        return content, False
    lines = content.strip("\n").split("\n")
    if len(lines) >= 2 and lines[0].startswith("```") and lines[-1].strip() == "```":
        return "\n".join(lines[1:-1]) + "\n", True
    return content, False


def atomic_write(real: Path, data: bytes) -> None:
    """Write ``data`` to ``real`` through a temp file in the same directory and a rename."""
    real.parent.mkdir(parents=True, exist_ok=True)
    mode: int | None = None
    try:
        mode = stat.S_IMODE(real.stat().st_mode)
    except FileNotFoundError:
        pass
    fd, tmp = tempfile.mkstemp(dir=real.parent, prefix=".ws-tmp-")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        if mode is not None:
            os.chmod(tmp, mode)
        else:
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, real)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_to_file(jail: PathJail, path: str, content: str) -> str:
    real = _resolve(jail, path, for_write=True)
    shown = jail.relative(real)
    if real.is_dir():
        raise ToolError(f"{shown} is a directory; give a file path")
    content, stripped = strip_code_fence(shown, content)
    existed = real.exists()
    try:
        atomic_write(real, content.encode("utf-8"))
    except OSError as exc:
        raise ToolError(f"cannot write {shown}: {exc.strerror or exc}") from None
    lines = content.count("\n") + (0 if content.endswith("\n") or not content else 1)
    note = " (removed the ``` fence around it)" if stripped else ""
    return f"{'Overwrote' if existed else 'Created'} {shown} ({lines} lines){note}."


def replace_in_file(jail: PathJail, path: str, diff: str) -> str:
    real = _resolve(jail, path, for_write=True)
    shown = jail.relative(real)
    if real.is_dir():
        raise ToolError(f"{shown} is a directory; give a file path")
    if not real.exists():
        raise ToolError(f"{shown} does not exist; create it with write_to_file")
    try:
        data = real.read_bytes()
    except OSError as exc:
        raise ToolError(f"cannot read {shown}: {exc.strerror or exc}") from None
    if looks_binary(data):
        raise ToolError(f"{shown} is a binary file; it cannot be edited with replace_in_file")
    decoded = decode_text(data)
    try:
        blocks = parse_blocks(diff)
        new_text = apply_blocks(decoded.text, blocks, path=shown)
    except DiffError as exc:
        raise ToolError(str(exc)) from None
    if new_text == decoded.text:
        return f"{shown} is unchanged (the REPLACE parts equal the SEARCH parts)."
    try:
        encoded = new_text.encode(decoded.encoding)  # keeps a BOM for utf-8-sig / utf-16
    except UnicodeEncodeError:
        encoded = new_text.encode("utf-8")
    try:
        atomic_write(real, encoded)
    except OSError as exc:
        raise ToolError(f"cannot write {shown}: {exc.strerror or exc}") from None
    return f"Applied {len(blocks)} SEARCH/REPLACE block{'s' if len(blocks) > 1 else ''} to {shown}."
