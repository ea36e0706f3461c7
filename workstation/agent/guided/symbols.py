"""Python symbols as edit targets: where a function, method, class or top-level
assignment sits in a file, its source, and the file with it rewritten.

The guided protocol lets a small model rewrite one symbol at a time (it copies code well
and writes JSON-escaped code badly). Pure functions over text; no I/O.
"""

from __future__ import annotations

import ast
import functools
import re
import textwrap
import warnings
from dataclasses import dataclass

from pyflakes import checker as pyflakes_checker
from pyflakes import messages as pyflakes_messages

_FILENAME = "<guided-draft>"
"""What the texts are compiled as: the warnings filter below matches it alone."""
_QUIET = [("ignore", category, re.escape(_FILENAME) + r"\Z") for category in (SyntaxWarning, DeprecationWarning)]


def _quiet() -> None:
    for action, category, module in _QUIET:  # added again where someone reset the filters (pytest does)
        if not any(f[0] == action and f[2] is category and f[3] is not None and f[3].pattern == module
                   for f in warnings.filters):
            warnings.filterwarnings(action, category=category, module=module)


def parse_quietly(text: str) -> ast.Module:
    """``ast.parse`` without its SyntaxWarnings ("invalid decimal literal" in a draft's ``1st``
    or a stray backslash) on stderr: a model's draft is data, not code we run. A filter for
    the texts' own file name, not ``warnings.catch_warnings()``: that swaps the process's
    filters and is not thread-safe."""
    _quiet()
    return ast.parse(text, filename=_FILENAME)


WHOLE_FILE = "(whole file)"
"""The edit target that rewrites a whole file (any text file, or Python that does not parse)."""
NEW_FUNCTION_PREFIX = "(new function "
"""The edit target that appends a function the task asks for, ``(new function sub(a, b))``:
the model writes only its body under the signature the task gave (a small model asked for
the whole file with one function more renames, drops and invents the others)."""


def new_function_target(signature: str) -> str:
    return f"{NEW_FUNCTION_PREFIX}{signature})"


def new_function_signature(target: str) -> str | None:
    """``sub(a, b)`` of ``(new function sub(a, b))``; None for any other target."""
    if target.startswith(NEW_FUNCTION_PREFIX) and target.endswith(")"):
        return target[len(NEW_FUNCTION_PREFIX):-1]
    return None


def append_function(text: str, code: str) -> str:
    """``text`` with the function ``code`` after its last line, two blank lines between."""
    return (text.rstrip("\n") + "\n\n\n" if text.strip() else "") + code.rstrip("\n") + "\n"


@dataclass(frozen=True, slots=True)
class Symbol:
    name: str
    """``median``, ``Inventory.total_value``, ``SYMBOLS``."""
    kind: str
    """``def`` (function or method), ``class`` or ``assign``."""
    start_line: int
    """1-based line of the header (``def``/``class``/the assignment), after decorators."""
    end_line: int
    """1-based last line, inclusive."""
    indent: int
    """Column of the header."""


def python_symbols(text: str) -> list[Symbol] | None:
    """Functions, classes, methods (``Class.method``) and top-level ``NAME = …`` of ``text``,
    in file order; None when the text is not valid Python."""
    found = _symbols(text)
    return None if found is None else list(found)


@functools.lru_cache(maxsize=64)
def _symbols(text: str) -> tuple[Symbol, ...] | None:
    """Cached (immutable, each check process its own): a turn looks the file up four times
    and a fleet's sessions read the same files."""
    try:
        tree = parse_quietly(text)
    except (SyntaxError, ValueError):
        return None
    found: list[Symbol] = []

    def add(node: ast.AST, name: str, kind: str) -> None:
        end = getattr(node, "end_lineno", None) or node.lineno  # type: ignore[attr-defined]
        found.append(Symbol(name, kind, node.lineno, end, node.col_offset))  # type: ignore[attr-defined]

    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            add(node, node.name, "def")
        elif isinstance(node, ast.ClassDef):
            add(node, node.name, "class")
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    add(item, f"{node.name}.{item.name}", "def")
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names = [t.id for t in targets if isinstance(t, ast.Name)]
            if names:
                add(node, names[0], "assign")
    found.sort(key=lambda s: s.start_line)
    return tuple(found)


def find_symbol(text: str, name: str) -> Symbol | None:
    for symbol in python_symbols(text) or ():
        if symbol.name == name:
            return symbol
    return None


def symbol_lines(text: str, symbol: Symbol) -> list[str]:
    """The symbol's lines as they are in the file (indented, no line ends)."""
    return text.splitlines()[symbol.start_line - 1: symbol.end_line]


def symbol_source(text: str, symbol: Symbol) -> str:
    """The symbol's source, dedented to column 0 (what the model sees and rewrites)."""
    return textwrap.dedent("\n".join(symbol_lines(text, symbol)))


def header_line(text: str, symbol: Symbol) -> str:
    """The first line of the dedented source: ``def median(values):``."""
    return symbol_source(text, symbol).split("\n", 1)[0]


def indent_code(code: str, columns: int) -> list[str]:
    """``code`` (column 0) moved right by ``columns`` spaces; blank lines stay empty."""
    pad = " " * columns
    return [(pad + line if line.strip() else "") for line in code.rstrip("\n").split("\n")]


def replace_symbol(text: str, symbol: Symbol, new_code: str) -> str:
    """``text`` with the symbol's lines replaced by ``new_code`` (given at column 0)."""
    lines = text.splitlines()
    ending = "\n" if text.endswith("\n") or not text else ""
    new = lines[: symbol.start_line - 1] + indent_code(new_code, symbol.indent) + lines[symbol.end_line:]
    return "\n".join(new) + ending


def parsed(text: str) -> tuple[ast.Module | None, str | None]:
    """(its syntax tree, None) when ``text`` is valid Python, else (None, the error in one line)."""
    try:
        return parse_quietly(text), None
    except SyntaxError as exc:
        return None, f"line {exc.lineno}: {exc.msg}"
    except ValueError as exc:
        return None, str(exc)


def parses(text: str) -> str | None:
    """None when ``text`` is valid Python, else the error in one line."""
    return parsed(text)[1]


def _undefined_in(tree: ast.Module) -> frozenset[str]:
    found = pyflakes_checker.Checker(tree, filename="draft.py").messages
    return frozenset(str(m.message_args[0]) for m in found if isinstance(m, pyflakes_messages.UndefinedName))


@functools.lru_cache(maxsize=64)
def undefined_names(text: str) -> frozenset[str] | None:
    """The names Python ``text`` uses and neither defines, imports nor has as a builtin
    (pyflakes' scope rules); None when it does not parse. Cached (immutable, each check
    process its own): every draft of a turn is compared with the same file as read (pyflakes ~1 ms
    per 20 lines). Drafts themselves go through :func:`new_undefined_names` uncached."""
    tree, _ = parsed(text)
    return None if tree is None else _undefined_in(tree)


def new_undefined_names(before: str, after: str | ast.Module) -> list[str]:
    """The undefined names ``after`` (a text, or its syntax tree, which pyflakes then
    annotates) has that ``before`` did not (a draft that calls ``np.add`` in a file that never
    imports numpy, or ``m(calc.plro, b)``), sorted."""
    tree = after if isinstance(after, ast.Module) else parsed(after)[0]
    now = _undefined_in(tree) if tree is not None else None
    if not now:
        return []
    return sorted(now - (undefined_names(before) or frozenset()))


def twin_function(code: str, text: str) -> str | None:
    """The function of ``text`` (top level) whose body does what the function ``code`` does,
    its name or None: a new ``sub(a, b)`` whose body is ``add``'s copied (``return a + b``)
    is no new function."""
    try:
        new = parse_quietly(textwrap.dedent(code)).body
    except (SyntaxError, ValueError):
        return None
    bodies = _function_bodies(text)
    if bodies is None or len(new) != 1 or not isinstance(new[0], (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None
    key = program_key(ast.unparse(ast.Module(body=new[0].body, type_ignores=[])))
    for name, body in bodies:
        if name != new[0].name and body == key:
            return name
    return None


@functools.lru_cache(maxsize=64)
def _function_bodies(text: str) -> tuple[tuple[str, str | None], ...] | None:
    """(name, :func:`program_key` of its body) of each top-level function of ``text``; None
    when it does not parse. Cached: every draft of a new function is compared with the same file."""
    try:
        old = parse_quietly(text).body
    except (SyntaxError, ValueError):
        return None
    return tuple((node.name, program_key(ast.unparse(ast.Module(body=node.body, type_ignores=[]))))
                 for node in old if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)))


def program_key(code: str) -> str | None:
    """What Python ``code`` does, to tell drafts apart: its syntax tree without docstrings
    (comments, layout and quoting are not in it either); None when it does not parse. A
    small model's drafts often differ from the code as read, or from each other, only there."""
    try:
        tree = parse_quietly(textwrap.dedent(code))
    except (SyntaxError, ValueError):
        return None
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body \
                and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                and isinstance(body[0].value.value, str):
            node.body = body[1:] or [ast.Pass()]
    return ast.dump(tree)
