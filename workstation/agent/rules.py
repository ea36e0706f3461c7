"""The repository's own rules for agents: ``AGENTS.md``, ``CLAUDE.md`` and ``.clinerules``.

Found from the session's worktree root down to its working folder — at each level, in this
order, ``AGENTS.md``, ``CLAUDE.md`` and ``.clinerules`` (a file, or a folder whose ``.md`` and
``.txt`` files are read in name order). Nested files all apply; where two disagree the one
nearer to the working folder wins, so they are given top-down and the model is told that the
later one wins (the habit of Codex's ``AGENTS.md``). Extra files named by the session
(``rules = [...]`` in a task file, ``--rules FILE``) come last.

The rules go into the system prompt after its constant part (``prompts.py``), as one section
whose text depends only on the files' contents and their paths relative to the worktree root:
every session of one repository gets a byte-identical system prompt, so vLLM's prefix cache
hits across them.

A size cap (``AgentConfig.rules_max_chars``, also bounded by the context window) keeps them
from eating the window: the budget goes to the nearest files first; a file that does not fit
is cut at a line end with a note saying so, one that gets nothing is left out (and named).
A link that leads out of the worktree is not followed (a repository cannot make the app send
``~/.ssh/id_rsa`` to the model); duplicates (``CLAUDE.md`` → ``AGENTS.md``) are read once.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

RULE_NAMES: tuple[str, ...] = ("AGENTS.md", "CLAUDE.md", ".clinerules")
"""The names looked for at each level, in the order they are given."""
RULES_FOLDER_SUFFIXES = (".md", ".txt")
"""Files read from a ``.clinerules`` folder."""
MAX_FILE_BYTES = 1 << 20
"""A rules file is read up to this size (the cap cuts far earlier)."""
MAX_FOLDER_FILES = 64

SECTION_HEAD = (
    "# Project rules\n"
    "The project's own instructions for agents, from its rules files. Follow them. Where two "
    "disagree, the later one (nearer to your working folder) wins."
)


@dataclass(frozen=True, slots=True)
class RuleFile:
    """One rules file a session follows."""

    path: str
    """Relative to the worktree root (``src/AGENTS.md``), or as given for an extra file."""
    chars: int
    """Characters of it in the system prompt."""
    total_chars: int

    @property
    def cut(self) -> bool:
        return self.chars < self.total_chars


@dataclass(frozen=True, slots=True)
class Rules:
    """What one session follows, and the system prompt's section that says it."""

    files: tuple[RuleFile, ...] = ()
    left_out: tuple[str, ...] = ()
    """Files that got nothing of the cap (named so the user can see why)."""
    skipped: tuple[str, ...] = ()
    """Files not read, with why (a link out of the worktree, unreadable)."""
    section: str = ""
    """The system prompt's rules section; empty when there are none."""

    @property
    def cut(self) -> tuple[str, ...]:
        return tuple(f.path for f in self.files if f.cut)


@dataclass(frozen=True, slots=True)
class _Found:
    label: str
    text: str


def _levels(top: Path, workdir: Path) -> list[Path]:
    """``top`` and each folder below it down to ``workdir`` (just ``workdir`` when it is
    not inside ``top``)."""
    try:
        rel = workdir.relative_to(top)
    except ValueError:
        return [workdir]
    levels = [top]
    for part in rel.parts:
        levels.append(levels[-1] / part)
    return levels


def _inside(path: str, top: str) -> bool:
    return path == top or path.startswith(top.rstrip("/") + "/")


def _read(path: Path, top_real: str, skipped: list[str], label: str) -> str | None:
    real = os.path.realpath(path)
    if not _inside(real, top_real):
        skipped.append(f"{label} (a link out of the worktree, not followed)")
        return None
    try:
        with open(real, "rb") as fh:
            data = fh.read(MAX_FILE_BYTES)
    except OSError as exc:
        skipped.append(f"{label} (cannot be read: {exc.strerror or exc})")
        return None
    return data.decode("utf-8", "replace").replace("\r\n", "\n").strip()


def find_rule_files(top: Path, workdir: Path) -> tuple[list[_Found], list[str]]:
    """The rules files from ``top`` down to ``workdir``, top-down, read; and what was skipped."""
    top_real = os.path.realpath(top)
    found: list[_Found] = []
    skipped: list[str] = []
    seen_paths: set[str] = set()
    seen_text: set[str] = set()

    def add(path: Path, label: str) -> None:
        real = os.path.realpath(path)
        if real in seen_paths:
            return
        seen_paths.add(real)
        text = _read(path, top_real, skipped, label)
        if not text:
            return
        digest = hashlib.sha256(text.encode()).hexdigest()
        if digest in seen_text:
            return
        seen_text.add(digest)
        found.append(_Found(label, text))

    for level in _levels(top, workdir):
        for name in RULE_NAMES:
            path = level / name
            label = path.relative_to(top).as_posix() if _inside(str(path), str(top)) else str(path)
            if path.is_dir() and not path.is_symlink():
                entries = sorted(p for p in path.iterdir()
                                 if p.suffix.lower() in RULES_FOLDER_SUFFIXES and p.is_file())
                for entry in entries[:MAX_FOLDER_FILES]:
                    add(entry, f"{label}/{entry.name}")
            elif path.is_file():
                add(path, label)
    return found, skipped


def _cut(text: str, keep: int) -> str:
    if len(text) <= keep:
        return text
    head = text[:keep]
    if "\n" in head:
        head = head.rsplit("\n", 1)[0]
    return head.rstrip()


def cut_note(label: str, kept: int, total: int) -> str:
    return (f"[… {label} was cut here: {kept:,} of its {total:,} characters fit the rules cap; "
            f"the rest is not shown]")


def load_rules(top: Path | str, workdir: Path | str | None = None, *, max_chars: int,
               extra: tuple[str, ...] = (), repository: bool = True) -> Rules:
    """The rules a session in ``workdir`` (default ``top``) follows, capped at ``max_chars``.

    ``extra``: further files (absolute paths) given by the user, read after the repository's;
    ``repository=False`` reads only those."""
    top_path = Path(top)
    work = Path(workdir) if workdir is not None else top_path
    found: list[_Found] = []
    skipped: list[str] = []
    if repository:
        found, skipped = find_rule_files(top_path, work)
    for name in extra:
        path = Path(name).expanduser()
        try:
            text = path.read_text(encoding="utf-8", errors="replace").replace("\r\n", "\n").strip()
        except OSError as exc:
            skipped.append(f"{name} (cannot be read: {exc.strerror or exc})")
            continue
        if text:
            found.append(_Found(path.name if path.is_absolute() else name, text))
    if not found:
        return Rules(skipped=tuple(skipped))
    # the budget goes to the nearest files first (they win), then upward
    budget = max(0, max_chars)
    kept: dict[int, str] = {}
    for index in range(len(found) - 1, -1, -1):
        item = found[index]
        if budget <= 0:
            continue
        if len(item.text) <= budget:
            kept[index] = item.text
            budget -= len(item.text)
            continue
        head = _cut(item.text, budget)
        if head:
            kept[index] = head
        budget = 0
    files: list[RuleFile] = []
    parts = [SECTION_HEAD]
    left_out: list[str] = []
    for index, item in enumerate(found):
        text = kept.get(index)
        if text is None:
            left_out.append(item.label)
            continue
        files.append(RuleFile(item.label, len(text), len(item.text)))
        body = text if len(text) == len(item.text) else f"{text}\n{cut_note(item.label, len(text), len(item.text))}"
        parts.append(f"## {item.label}\n{body}")
    if left_out:
        parts.append(f"[Left out for the rules cap: {', '.join(left_out)}]")
    if not files:
        return Rules(left_out=tuple(left_out), skipped=tuple(skipped))
    return Rules(tuple(files), tuple(left_out), tuple(skipped), "\n\n".join(parts))


def rules_cap(max_chars: int, context_window_tokens: int) -> int:
    """The cap a session gets: the setting, but at most ~15 % of the context window."""
    by_window = int(context_window_tokens * 0.15 * 3)
    return max(0, min(max_chars, max(1_000, by_window)))
