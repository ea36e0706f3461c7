"""What the guided protocol knows of a session's worktree, looked at fresh each turn: the
files that exist (the paths a small model may name), the folders a new file may go in,
the project's test command, and the paths a task mentions.

Blocking (a directory walk and a few small reads): run :func:`look` off the event loop.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

MAX_FILES = 200
"""Paths offered to the model at most (an enum of thousands helps nobody)."""
MAX_TEXT_BYTES = 200_000
_SKIP_DIRS = {".git", "__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache", "node_modules",
              ".venv", "venv", ".tox", "dist", "build", ".idea", ".vscode", ".eggs"}
_BINARY_SUFFIXES = {".png", ".jpg", ".jpeg", ".gif", ".ico", ".pdf", ".zip", ".gz", ".tar", ".whl",
                    ".so", ".dll", ".pyc", ".bin", ".sqlite3", ".db", ".woff", ".woff2", ".ttf"}
_PATH_IN_TEXT = re.compile(r"(?<![\w/.-])((?:[\w.-]+/)*[\w-][\w.-]*\.[A-Za-z0-9]{1,8})(?![\w/])")
_SAFE_PATH = re.compile(r"^[A-Za-z0-9_./+@ -]+$")
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_NEW_FUNCTION = re.compile(r"\b(?:add|adds|adding|plus|write|create|new)\b[^.\n]{0,40}?\bfunction\s+`?"
                           r"([A-Za-z_][A-Za-z0-9_]*\s*\([^()\n]{0,80}\))", re.I)
_NEW_FILE_WORDS = re.compile(r"\b(create|new file|add a (?:new )?(?:test )?file|write a (?:new )?file)\b", re.I)


@dataclass(frozen=True, slots=True)
class Workspace:
    files: tuple[str, ...]
    """Text files (POSIX, relative), those the task names first, at most :data:`MAX_FILES`."""
    folders: tuple[str, ...]
    """Folders (relative; ``.`` is the root) that hold at least one of ``files``."""
    test_command: str | None
    """The command that runs the project's tests; None when none is recognised."""
    new_paths: tuple[str, ...]
    """Paths the task names that do not exist yet, in an existing folder."""
    wants_new_file: bool = False
    """The task asks for a new file without naming it (any name in an existing folder)."""
    mentioned: tuple[str, ...] = ()
    """Files of ``files`` the task names."""
    words: frozenset[str] = frozenset()
    """The identifiers the task uses (``total_value``, ``Inventory``): the functions it names."""
    new_functions: tuple[str, ...] = ()
    """Module-level functions the task asks to add, as it writes them ("plus a function
    sub(a, b)": ``sub(a, b)``), in order; whether a file has them already is the caller's to see."""


_FILE_SUFFIXES = {".py", ".pyi", ".md", ".rst", ".txt", ".toml", ".json", ".cfg", ".ini", ".yaml", ".yml",
                  ".js", ".jsx", ".ts", ".tsx", ".rs", ".go", ".c", ".h", ".cpp", ".hpp", ".java", ".kt",
                  ".rb", ".sh", ".html", ".css", ".csv", ".sql", ".lock"}


def mentioned_paths(task: str) -> list[str]:
    """File paths written in ``task`` (``textkit/core.py``, ``README.md``), in order; words
    like ``item.price`` are not taken for files (their suffix is no file type)."""
    seen: list[str] = []
    for match in _PATH_IN_TEXT.finditer(task):
        path = match.group(1)[2:] if match.group(1).startswith("./") else match.group(1)
        if path in seen or path[0].isdigit() or Path(path).suffix.lower() not in _FILE_SUFFIXES:
            continue
        seen.append(path)
    return seen


def _walk(root: Path) -> list[str]:
    out: list[str] = []
    for current, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS and not d.startswith(".ws-"))
        rel_dir = Path(current).relative_to(root)
        for name in sorted(names):
            if name.startswith(".") or Path(name).suffix.lower() in _BINARY_SUFFIXES:
                continue
            rel = (rel_dir / name).as_posix()
            if not _SAFE_PATH.match(rel):
                continue  # a path the JSON/regex of a call cannot carry plainly
            try:
                if (root / rel).stat().st_size > MAX_TEXT_BYTES:
                    continue
            except OSError:
                continue
            out.append(rel)
            if len(out) >= MAX_FILES * 5:
                return out
    return out


def detect_test_command(root: Path, task: str = "") -> str | None:
    """The project's test command: Python (pytest), npm, cargo, go or ``make test``."""
    named = re.search(r"\b((?:python3? -m )?pytest(?: -[\w-]+| [\w/.:-]+\.py(?:::\w+)?)*)", task)
    if (root / "pyproject.toml").is_file() or (root / "pytest.ini").is_file() or (root / "setup.cfg").is_file() \
            or (root / "tests").is_dir() or any(root.glob("test_*.py")):
        if named and named.group(1).startswith(("python -m pytest", "python3 -m pytest")):
            return named.group(1).strip()
        return "python -m pytest -q"
    package = root / "package.json"
    if package.is_file():
        try:
            scripts = json.loads(package.read_text(encoding="utf-8")).get("scripts") or {}
        except (OSError, ValueError, AttributeError):
            scripts = {}
        if isinstance(scripts, dict) and "test" in scripts:
            return "npm test --silent"
    if (root / "Cargo.toml").is_file():
        return "cargo test -q"
    if (root / "go.mod").is_file():
        return "go test ./..."
    makefile = root / "Makefile"
    if makefile.is_file():
        try:
            if re.search(r"^test\s*:", makefile.read_text(encoding="utf-8", errors="replace"), re.M):
                return "make test"
        except OSError:
            pass
    return None


def look(root: Path, task: str) -> Workspace:
    """The worktree as it is now (blocking)."""
    root = Path(root)
    every = _walk(root)
    named = mentioned_paths(task)
    existing = set(every)
    first = [p for p in named if p in existing]
    rest = [p for p in every if p not in first]
    files = tuple((first + rest)[:MAX_FILES])
    folders = sorted({str(Path(p).parent.as_posix()) for p in every} | {"."})
    new_paths = tuple(
        p for p in named
        if p not in existing and _SAFE_PATH.match(p) and (Path(p).parent.as_posix() in folders)
        and not (root / p).exists()
    )
    return Workspace(files=files, folders=tuple(folders), test_command=detect_test_command(root, task),
                     new_paths=new_paths, wants_new_file=bool(_NEW_FILE_WORDS.search(task)),
                     mentioned=tuple(first), words=frozenset(_WORD.findall(task)),
                     new_functions=tuple(dict.fromkeys(re.sub(r"\s+\(", "(", f) for f in _NEW_FUNCTION.findall(task))))


def is_test_command(command: str, test_command: str | None) -> bool:
    """Whether ``command`` ran the tests (the guided call, or the model's own in free mode)."""
    if test_command and command.strip() == test_command:
        return True
    try:
        words = shlex.split(command)
    except ValueError:
        words = command.split()
    return any(w in ("pytest", "test") or w.endswith("pytest") for w in words[:4])
