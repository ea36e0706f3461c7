"""What a proposed file edit would change, as a unified diff: shown with its approval, so a
person sees the change before approving it (not the tool's raw JSON).

``write_to_file``: the file as it is against the new content (a new file is all ``+``).
``replace_in_file``: the file against the file with the SEARCH/REPLACE blocks applied; where
they do not apply, the blocks themselves as ``-``/``+`` lines under a note saying why (the
tool will refuse them the same way when it runs). Reads go through the session's path jail;
nothing is written. Blocking file I/O: call it on the tools' thread pool.
"""

from __future__ import annotations

import difflib
from typing import Any

from workstation.agent.diff_blocks import DiffError, apply_blocks, parse_blocks
from workstation.agent.file_tools import decode_text, looks_binary, strip_code_fence
from workstation.agent.jail import JailError, PathJail

PREVIEW_MAX_LINES = 400
PREVIEW_MAX_FILE_BYTES = 2_000_000


def write_preview(jail: PathJail, arguments: dict[str, Any]) -> str:
    """``write_to_file``'s change (the tool's spec carries it): the file against the content."""
    content = arguments.get("content")
    target = _target(jail, arguments) if isinstance(content, str) else None
    if target is None or isinstance(target, str):
        return target or ""
    shown, old, exists = target
    new, _ = strip_code_fence(str(arguments["path"]), str(content))
    return _unified(shown, old, new, exists)


def replace_preview(jail: PathJail, arguments: dict[str, Any]) -> str:
    """``replace_in_file``'s change: the file against the file with the blocks applied."""
    diff = arguments.get("diff")
    target = _target(jail, arguments) if isinstance(diff, str) else None
    if target is None or isinstance(target, str):
        return target or ""
    shown, old, exists = target
    try:
        new = apply_blocks(old, parse_blocks(str(diff)), path=shown)
    except DiffError as exc:
        return _blocks_as_diff(shown, str(diff), str(exc))
    return _unified(shown, old, new, exists)


def _target(jail: PathJail, arguments: dict[str, Any]) -> tuple[str, str, bool] | str | None:
    """(shown path, current text, exists); a note for a file that cannot be shown as text;
    None where nothing can be said (no path, or one outside the jail: the tool refuses it)."""
    path = arguments.get("path")
    if not isinstance(path, str) or not path.strip():
        return None
    try:
        real = jail.resolve(path, for_write=True)
        shown = jail.relative(real)
        old, exists = _current_text(real)
    except (JailError, OSError):
        return None
    if old is None:
        return f"# {shown} is a binary or very large file; the change cannot be shown as text\n"
    return shown, old, exists


def _current_text(real: Any) -> tuple[str | None, bool]:
    """(text, exists); text None for a binary or oversized file, "" for a missing one."""
    if not real.exists():
        return "", False
    if real.stat().st_size > PREVIEW_MAX_FILE_BYTES:
        return None, True
    data = real.read_bytes()
    if looks_binary(data):
        return None, True
    return decode_text(data).text, True


def _unified(shown: str, old: str, new: str, exists: bool) -> str:
    if old == new:
        return f"# {shown}: no change\n"
    lines = list(difflib.unified_diff(
        old.splitlines(keepends=True), new.splitlines(keepends=True),
        fromfile=f"a/{shown}" if exists else "/dev/null", tofile=f"b/{shown}", n=3))
    return _capped([ln if ln.endswith("\n") else ln + "\n" for ln in lines])


def _blocks_as_diff(shown: str, diff: str, why: str) -> str:
    out = [f"# the blocks do not apply to {shown} as it is now: {why.splitlines()[0]}\n",
           f"--- a/{shown}\n", f"+++ b/{shown}\n"]
    try:
        blocks = parse_blocks(diff)
    except DiffError:
        return "".join(out[:1])
    for block in blocks:
        out.append("@@ SEARCH / REPLACE @@\n")
        out += [f"-{ln}\n" for ln in block.search.splitlines()]
        out += [f"+{ln}\n" for ln in block.replace.splitlines()]
    return _capped(out)


def _capped(lines: list[str]) -> str:
    if len(lines) <= PREVIEW_MAX_LINES:
        return "".join(lines)
    return "".join(lines[:PREVIEW_MAX_LINES]) + f"# … {len(lines) - PREVIEW_MAX_LINES} more lines\n"
