"""SEARCH/REPLACE blocks (Cline's ``replace_in_file`` format): parse and apply, exactly.

::

    ------- SEARCH
    exact lines from the file
    =======
    new lines
    +++++++ REPLACE

The older ``<<<<<<< SEARCH`` / ``>>>>>>> REPLACE`` markers are accepted too. Blocks apply in
order, all or nothing. A SEARCH part must match whole lines exactly once; when it does not,
the error says what was found instead (a whitespace-only difference, the place where the
first line occurs, or every place it matched) so the model can correct the block.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_START = re.compile(r"^\s*[-<]{3,}\s*SEARCH\s*>?\s*$")
_DIVIDER = re.compile(r"^\s*={3,}\s*$")
_END = re.compile(r"^\s*[+>]{3,}\s*REPLACE\s*>?\s*$")

FORMAT_HELP = "------- SEARCH\n<exact lines from the file>\n=======\n<new lines>\n+++++++ REPLACE"


class DiffError(Exception):
    """The blocks are malformed or do not apply; ``str()`` is the message for the model."""


@dataclass(frozen=True, slots=True)
class Block:
    search: str
    replace: str


def parse_blocks(diff: str) -> list[Block]:
    """The blocks of ``diff``; lines outside blocks (code fences, prose) are ignored."""
    return [Block("\n".join(search), "\n".join(replace)) for search, replace in _scan(diff, strict=True)]


def count_changed_lines(diff: str) -> tuple[int, int]:
    """(added, removed): the lines of the REPLACE and SEARCH parts of ``diff``, read by the
    same parser as :func:`parse_blocks` in its forgiving mode; never fails (what a pane shows
    of a proposed edit, malformed or not)."""
    blocks = _scan(diff, strict=False)
    return sum(len(r) for _, r in blocks), sum(len(s) for s, _ in blocks)


def _scan(diff: str, *, strict: bool) -> list[tuple[list[str], list[str]]]:
    """Each block's (SEARCH lines, REPLACE lines). ``strict``: a malformed block raises
    :class:`DiffError` with a message for the model; otherwise it ends where the next
    marker or the text does, with what it has (a diff still streaming, a slip of the model)."""
    blocks: list[tuple[list[str], list[str]]] = []
    search: list[str] | None = None
    replace: list[str] | None = None
    for line in diff.replace("\r\n", "\n").split("\n"):
        if search is None:
            if _START.match(line):
                search = []
            continue
        if replace is None:
            if _DIVIDER.match(line):
                replace = []
            elif _END.match(line):
                if strict:
                    raise DiffError(
                        f"block {len(blocks) + 1} has no ======= line between SEARCH and REPLACE. "
                        f"Each block looks like:\n{FORMAT_HELP}"
                    )
                blocks.append((search, []))
                search = None
            else:
                search.append(line)
            continue
        if _END.match(line):
            blocks.append((search, replace))
            search = replace = None
        elif _START.match(line):
            if strict:
                raise DiffError(f"block {len(blocks) + 1} is not closed with +++++++ REPLACE")
            blocks.append((search, replace))
            search, replace = [], None
        else:
            replace.append(line)
    if search is not None:
        if strict:
            raise DiffError(
                f"block {len(blocks) + 1} is not finished (missing "
                f"{'=======' if replace is None else '+++++++ REPLACE'}). Each block looks like:\n{FORMAT_HELP}"
            )
        tail = search if replace is None else replace
        if tail and tail[-1] == "" and diff.endswith("\n"):
            tail.pop()  # the text's last newline ends a line; no empty line follows it
        blocks.append((search, replace or []))
    if strict and not blocks:
        raise DiffError(f"no SEARCH/REPLACE block found in diff. Each block looks like:\n{FORMAT_HELP}")
    return blocks


def _whole_line_matches(content: str, needle: str) -> list[int]:
    found: list[int] = []
    start = 0
    while True:
        i = content.find(needle, start)
        if i == -1:
            return found
        end = i + len(needle)
        if (i == 0 or content[i - 1] == "\n") and (end == len(content) or content[end] in "\r\n"):
            found.append(i)
        start = i + 1


def _line_no(content: str, offset: int) -> int:
    return content.count("\n", 0, offset) + 1


def _diagnose(content: str, search: str, number: int, path: str) -> str:
    lines = content.split("\n")
    want = search.split("\n")
    squeeze = [w.strip() for w in want]
    n = len(want)
    for i in range(len(lines) - n + 1):
        if [line.strip() for line in lines[i:i + n]] == squeeze:
            actual = "\n".join(lines[i:i + n])
            return (
                f"SEARCH block {number} does not match {path} exactly, but lines {i + 1}-{i + n} match "
                f"when whitespace is ignored. Copy them exactly as they are:\n{actual}"
            )
    first = next((w for w in want if w.strip()), "")
    if first:
        hits = [i + 1 for i, line in enumerate(lines) if line.strip() == first.strip()]
        if hits:
            where = ", ".join(map(str, hits[:5]))
            return (
                f"SEARCH block {number} does not match {path}. Its first line occurs at line {where}, "
                f"but the lines after it differ. Use read_file to see the current content and copy "
                f"the lines exactly."
            )
    return (
        f"SEARCH block {number} does not match anything in {path}. Use read_file to see the "
        f"current content and copy the lines to replace exactly."
    )


def apply_blocks(content: str, blocks: list[Block], *, path: str = "the file") -> str:
    """``content`` with every block applied in order; raises :class:`DiffError` otherwise."""
    crlf = "\r\n" in content
    text = content.replace("\r\n", "\n") if crlf else content
    for number, block in enumerate(blocks, 1):
        if block.search == "":
            if text.strip() == "":
                text = block.replace + ("\n" if block.replace and not block.replace.endswith("\n") else "")
                continue
            raise DiffError(
                f"SEARCH block {number} is empty, but {path} is not. Put the exact lines to replace "
                f"in the SEARCH part (to rewrite the whole file, use write_to_file)."
            )
        found = _whole_line_matches(text, block.search)
        if not found:
            raise DiffError(_diagnose(text, block.search, number, path))
        if len(found) > 1:
            where = ", ".join(str(_line_no(text, i)) for i in found[:6])
            raise DiffError(
                f"SEARCH block {number} matches {len(found)} places in {path} (lines {where}). "
                f"Add unchanged lines around it so that it matches exactly one place."
            )
        i = found[0]
        end = i + len(block.search)
        replacement = block.replace
        if replacement == "" and end < len(text) and text[end] == "\n":
            end += 1  # deleting whole lines: take their newline along
        text = text[:i] + replacement + text[end:]
    return text.replace("\n", "\r\n") if crlf else text
