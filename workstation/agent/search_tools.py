"""Looking around: ``list_files``, ``search_files``, ``list_code_definition_names``.

Blocking functions for the tool executor. Walks honour ``.gitignore`` files (the root's,
every ancestor's of the start directory, and nested ones), always skip ``.git`` and a few
tool caches, never follow directory symlinks, and skip file symlinks that leave the root.
"""

from __future__ import annotations

import ast
import fnmatch
import os
import re
from collections.abc import Iterator
from pathlib import Path

import pathspec

from workstation.agent.file_tools import decode_text, looks_binary
from workstation.agent.jail import JailError, PathJail
from workstation.agent.tool_api import ToolError

SKIP_DIRS = frozenset({".git", "node_modules", "__pycache__", ".venv", ".mypy_cache",
                       ".pytest_cache", ".tox", ".idea", ".ruff_cache"})
SEARCH_MAX_FILE_BYTES = 2 << 20
LINE_SHOW_CHARS = 200


def _resolve_dir(jail: PathJail, path: str) -> Path:
    try:
        real = jail.resolve(path or ".")
    except JailError as exc:
        raise ToolError(str(exc)) from None
    if not real.exists():
        raise ToolError(f"{path} does not exist; use list_files on '.' to look around")
    return real


def _load_ignore(directory: Path) -> pathspec.GitIgnoreSpec | None:
    try:
        lines = (directory / ".gitignore").read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    return pathspec.GitIgnoreSpec.from_lines(lines) if lines else None


class IgnoreRules:
    """``.gitignore`` rules along a walk: one spec per directory that has a ``.gitignore``."""

    def __init__(self, jail: PathJail) -> None:
        self.jail = jail
        self._specs: dict[str, pathspec.GitIgnoreSpec | None] = {}

    def _spec(self, rel_dir: str) -> pathspec.GitIgnoreSpec | None:
        if rel_dir not in self._specs:
            self._specs[rel_dir] = _load_ignore(self.jail.root / rel_dir if rel_dir != "." else self.jail.root)
        return self._specs[rel_dir]

    def ignored(self, rel_path: str, is_dir: bool) -> bool:
        parts = rel_path.split("/")
        if parts[-1] in SKIP_DIRS and is_dir:
            return True
        for depth in range(len(parts)):
            base = "/".join(parts[:depth]) or "."
            spec = self._spec(base)
            if spec is None:
                continue
            sub = "/".join(parts[depth:]) + ("/" if is_dir else "")
            if spec.match_file(sub):
                return True
        return False


def _entries(directory: Path) -> list[os.DirEntry[str]]:
    try:
        return sorted(os.scandir(directory), key=lambda e: e.name)
    except OSError:
        return []


def walk(jail: PathJail, start: Path, *, recursive: bool) -> Iterator[tuple[str, Path, bool]]:
    """``(relative path, real path, is_dir)`` under ``start``, depth first, sorted by name."""
    rules = IgnoreRules(jail)
    stack: list[Iterator[os.DirEntry[str]]] = [iter(_entries(start))]
    while stack:
        entry = next(stack[-1], None)
        if entry is None:
            stack.pop()
            continue
        rel = jail.relative(entry.path)
        try:
            is_link = entry.is_symlink()
            is_dir = entry.is_dir(follow_symlinks=False)
        except OSError:
            continue
        if is_link:
            real = os.path.realpath(entry.path)
            if not jail.contains(real) or not os.path.exists(real):
                continue
            if os.path.isdir(real):  # listed, never descended into (no loops, no escapes)
                if not rules.ignored(rel, True):
                    yield rel, Path(real), True
                continue
        if rules.ignored(rel, is_dir):
            continue
        yield rel, Path(entry.path), is_dir
        if is_dir and recursive:
            stack.append(iter(_entries(Path(entry.path))))


def list_files(jail: PathJail, path: str, recursive: bool = False, *, max_entries: int) -> str:
    real = _resolve_dir(jail, path)
    if not real.is_dir():
        raise ToolError(f"{jail.relative(real)} is a file, not a directory; use read_file to read it")
    base = jail.relative(real)
    lines: list[str] = []
    more = 0
    for rel, _real, is_dir in walk(jail, real, recursive=recursive):
        if len(lines) >= max_entries:
            more += 1
            continue
        shown = rel if base == "." else os.path.relpath(rel, base).replace(os.sep, "/")
        lines.append(shown + ("/" if is_dir else ""))
    if not lines:
        return f"{base} is empty (or holds only ignored files)"
    if more:
        lines.append(f"({more} more not shown; list a subdirectory to see them)")
    return "\n".join(lines)


def _matches_pattern(rel: str, pattern: str | None) -> bool:
    if not pattern:
        return True
    name = rel.rsplit("/", 1)[-1]
    pats = [p.strip() for p in re.split(r"[,\s]+", pattern) if p.strip()]
    return any(fnmatch.fnmatch(rel if "/" in p else name, p) for p in pats) if pats else True


def search_files(
    jail: PathJail, path: str, regex: str, file_pattern: str | None = None, *, max_results: int,
) -> str:
    real = _resolve_dir(jail, path)
    try:
        rx = re.compile(regex)
    except re.error as exc:
        raise ToolError(f"the regex {regex!r} is invalid: {exc}. Use Python regex syntax.") from None
    files: Iterator[tuple[str, Path, bool]]
    if real.is_file():
        files = iter([(jail.relative(real), real, False)])
    else:
        files = walk(jail, real, recursive=True)
    out: list[str] = []
    hits = 0
    searched = 0
    for rel, file, is_dir in files:
        if is_dir or not _matches_pattern(rel, file_pattern):
            continue
        try:
            if file.stat().st_size > SEARCH_MAX_FILE_BYTES:
                continue
            data = file.read_bytes()
        except OSError:
            continue
        if looks_binary(data):
            continue
        searched += 1
        for number, line in enumerate(decode_text(data).text.splitlines(), 1):
            if rx.search(line):
                hits += 1
                if len(out) < max_results:
                    shown = line if len(line) <= LINE_SHOW_CHARS else line[:LINE_SHOW_CHARS] + "…"
                    out.append(f"{rel}:{number}: {shown}")
    if not out:
        scope = f" in files matching {file_pattern}" if file_pattern else ""
        return f"No matches for /{regex}/ under {jail.relative(real)}{scope} ({searched} files searched)."
    if hits > len(out):
        out.append(f"({hits - len(out)} more matches not shown; narrow the regex or the path)")
    return "\n".join(out)


_DEFINITION_PATTERNS: dict[str, tuple[re.Pattern[str], ...]] = {
    ".js": (re.compile(r"^\s*(?:export\s+)?(?:async\s+)?function\s*\*?\s*(\w+)"),
            re.compile(r"^\s*(?:export\s+)?(?:default\s+)?class\s+(\w+)"),
            re.compile(r"^\s*(?:export\s+)?const\s+(\w+)\s*=\s*(?:async\s*)?\(?[^=]*\)?\s*=>")),
    ".go": (re.compile(r"^func\s+(?:\([^)]*\)\s*)?(\w+)"), re.compile(r"^type\s+(\w+)\s+(?:struct|interface)")),
    ".rs": (re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?(?:async\s+)?fn\s+(\w+)"),
            re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?(?:struct|enum|trait)\s+(\w+)"),
            re.compile(r"^\s*impl(?:<[^>]*>)?\s+(?:\w+\s+for\s+)?(\w+)")),
    ".java": (re.compile(r"^\s*(?:public|private|protected)?\s*(?:static\s+)?(?:final\s+)?"
                         r"(?:class|interface|enum|record)\s+(\w+)"),
              re.compile(r"^\s+(?:public|private|protected)\s+[\w<>\[\], ]+\s+(\w+)\s*\(")),
}
for _ext in (".ts", ".tsx", ".jsx", ".mjs"):
    _DEFINITION_PATTERNS[_ext] = _DEFINITION_PATTERNS[".js"]


def _python_definitions(text: str) -> list[str]:
    tree = ast.parse(text)
    out: list[str] = []

    def visit(nodes: list[ast.stmt], depth: int) -> None:
        for node in nodes:
            pad = "  " * depth
            if isinstance(node, ast.ClassDef):
                out.append(f"{node.lineno}: {pad}class {node.name}")
                visit(node.body, depth + 1)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                kind = "async def" if isinstance(node, ast.AsyncFunctionDef) else "def"
                args = ", ".join(a.arg for a in node.args.args)
                out.append(f"{node.lineno}: {pad}{kind} {node.name}({args})")

    visit(tree.body, 0)
    return out


def _file_definitions(file: Path) -> list[str] | None:
    ext = file.suffix.lower()
    if ext != ".py" and ext not in _DEFINITION_PATTERNS:
        return None
    try:
        data = file.read_bytes()
    except OSError:
        return None
    if looks_binary(data) or len(data) > SEARCH_MAX_FILE_BYTES:
        return None
    text = decode_text(data).text
    if ext == ".py":
        try:
            return _python_definitions(text)
        except SyntaxError as exc:
            return [f"(cannot parse: {exc.msg} at line {exc.lineno})"]
    out: list[str] = []
    for number, line in enumerate(text.splitlines(), 1):
        for rx in _DEFINITION_PATTERNS[ext]:
            m = rx.match(line)
            if m:
                out.append(f"{number}: {line.strip()[:LINE_SHOW_CHARS]}")
                break
    return out


def list_code_definition_names(jail: PathJail, path: str, *, max_chars: int) -> str:
    real = _resolve_dir(jail, path)
    if real.is_file():
        files = [(jail.relative(real), real)]
    else:
        files = [(rel, p) for rel, p, is_dir in walk(jail, real, recursive=False) if not is_dir]
    parts: list[str] = []
    for rel, file in files:
        defs = _file_definitions(file)
        if defs is None:
            continue
        parts.append(f"{rel}:\n" + ("\n".join(f"  {d}" for d in defs) if defs else "  (no definitions)"))
    if not parts:
        return (f"No source files with definitions in {jail.relative(real)} "
                f"(supported: Python, JavaScript/TypeScript, Go, Rust, Java).")
    text = "\n".join(parts)
    if len(text) > max_chars:
        text = text[:max_chars].rsplit("\n", 1)[0] + "\n(… more not shown; ask for one file)"
    return text
