"""A draft of one function checked alone: whether the file parses with it in place
(:func:`parses_in_place`) and the undefined names it adds (:func:`draft_undefined_names`).

The whole-file rule (:func:`~workstation.agent.guided.symbols.new_undefined_names`) runs
pyflakes on the file with the draft applied and subtracts what the file as read leaves
undefined: ~10 ms a draft on a 500-line file, 19 drafts a turn, on the cores a CPU engine
needs. A draft changes one function, and pyflakes checks a function's body after the whole
module (every module-level binding is then known; a class's names are not seen from its
methods), so the names that body leaves undefined depend on the module's final bindings
alone. :func:`draft_undefined_names` runs pyflakes on a small module instead: the module's
final bindings (from one pyflakes run of the file as read, cached) bound to ``None``, then
the draft's function (in a class of its own for a method). Same answer, a fraction of the
work; it answers None (the caller then uses the whole-file rule) wherever that reasoning
does not hold:

- ``global`` / ``nonlocal`` anywhere in the file or the draft (they add module bindings
  while functions are checked, and remove reports already made), or a star import (pyflakes
  then reports star usage, not undefined names), or ``PYFLAKES_DOCTEST``;
- a rewrite whose signature (arguments, defaults, annotations, return annotation) differs
  from the one in the file, or that brings decorators of its own (those are evaluated where
  the function stands, with the names bound up to there or the class's), or that is not one
  function of the same name and kind; a rewrite of a class or an assignment;
- a draft that does not parse alone, or whose lines would not move as one block when indented
  into the file (tabs, form feeds, other line breaks than ``\\n``), a file indented with tabs.

The file is then parsed only where the draft is not one function that parses alone (the
syntax error's line is the file's) or only the whole-file rule answers: parsing a 500-line
file took 3 ms a draft. ``tests/agent/guided/test_names.py`` holds the whole-file rule and
this one to the same answers over a corpus of drafts, these cases included.
"""

from __future__ import annotations

import ast
import functools
import os
import re
from dataclasses import dataclass

from pyflakes import checker as pyflakes_checker
from pyflakes import messages as pyflakes_messages

from workstation.agent.guided.symbols import Symbol, parse_quietly

_TABBED = re.compile(r"^[ ]*[\t\f]", re.M)


@dataclass(frozen=True, slots=True)
class _Signature:
    kind: type
    args: str
    returns: str


@dataclass(frozen=True, slots=True)
class ModuleNames:
    """What pyflakes makes of a whole file, for checking one function against it."""

    undefined: frozenset[str]
    """The names the file leaves undefined (as :func:`~.symbols.undefined_names`)."""
    bound: tuple[str, ...]
    """The module's bindings at the end (imports, functions, classes, assignments…), builtins left out."""
    annotated: tuple[str, ...]
    """Names only annotated at module level (``x: int``): pyflakes counts them as no definition."""
    futures: tuple[str, ...]
    """The ``from __future__`` names (``annotations`` changes how annotations are checked)."""
    signatures: dict[tuple[str, int], _Signature]
    """(symbol name, header line) → each function's and method's signature."""
    whole_file_only: bool
    """``global``/``nonlocal``, a star import or tab indentation: only the whole-file rule answers."""


def _signature(node: ast.FunctionDef | ast.AsyncFunctionDef) -> _Signature:
    return _Signature(type(node), ast.dump(node.args), ast.dump(node.returns) if node.returns else "")


def _binds_module_names(tree: ast.AST) -> bool:
    """``global``/``nonlocal`` or a star import somewhere in ``tree``: only the whole file answers."""
    return any(isinstance(node, (ast.Global, ast.Nonlocal))
               or (isinstance(node, ast.ImportFrom) and any(a.name == "*" for a in node.names))
               for node in ast.walk(tree))


def _one_function(code: str) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    """``code`` parsed alone, when it is one function (a fresh tree: the caller may change it)."""
    try:
        body = parse_quietly(code).body
    except (SyntaxError, ValueError):
        return None
    return body[0] if len(body) == 1 and isinstance(body[0], (ast.FunctionDef, ast.AsyncFunctionDef)) else None


@functools.lru_cache(maxsize=64)
def module_names(text: str) -> ModuleNames | None:
    """The file's pyflakes analysis (one run, cached per text: every draft of a turn is
    checked against the same file); None when it does not parse."""
    try:
        tree = parse_quietly(text)
    except (SyntaxError, ValueError):
        return None
    only = bool(_TABBED.search(text)) or _binds_module_names(tree)
    signatures: dict[tuple[str, int], _Signature] = {}
    futures: list[str] = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            signatures[(node.name, node.lineno)] = _signature(node)
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    signatures[(f"{node.name}.{item.name}", item.lineno)] = _signature(item)
        elif isinstance(node, ast.ImportFrom) and node.module == "__future__":
            futures += [a.name for a in node.names]
    checker = pyflakes_checker.Checker(tree, filename="draft.py")
    undefined = frozenset(str(m.message_args[0]) for m in checker.messages
                          if isinstance(m, pyflakes_messages.UndefinedName))
    module = next(s for s in checker.deadScopes if type(s) is pyflakes_checker.ModuleScope)
    bound: list[str] = []
    annotated: list[str] = []
    for name, binding in module.items():
        if isinstance(binding, pyflakes_checker.Builtin) or not name.isidentifier():
            continue  # the small module's checker has the builtins; a dotted key is never looked up
        (annotated if isinstance(binding, pyflakes_checker.Annotation) else bound).append(name)
    return ModuleNames(undefined, tuple(bound), tuple(annotated), tuple(futures), signatures, only)


def _lines_move_as_one(code: str) -> bool:
    """Indenting ``code`` into the file shifts every line alike (spaces added after each ``\\n``)."""
    return "\t" not in code and len(code.splitlines()) == code.count("\n") + (not code.endswith("\n"))


def _may_check_alone(current: str, code: str, symbol: Symbol | None) -> bool:
    """What both questions ask first of a draft looked at alone in ``current`` (in place of
    ``symbol``; appended when None): ``symbol`` is a ``def``, the file parses and holds
    nothing only the whole file answers for, and ``code``'s lines move as one block."""
    if symbol is not None and symbol.kind != "def":
        return False
    context = module_names(current)
    return context is not None and not context.whole_file_only and _lines_move_as_one(code)


def _strip_signature(node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
    """Keep the parameters' names, drop what is evaluated where the function is defined
    (checked the same in the file before and after: the signature is the file's own)."""
    node.decorator_list = []
    node.returns = None
    args = node.args
    for arg in (*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg):
        if arg is not None:
            arg.annotation = None
    args.defaults = [ast.Constant(None) for _ in args.defaults]
    args.kw_defaults = [None if d is None else ast.Constant(None) for d in args.kw_defaults]


MAX_INDENT_COLUMNS = 80
"""A draft indented deeper on some line is parsed in the file (Python allows 100 levels of
indentation: the file adds a class's at most, ``code`` at 80 columns has 80 at most)."""


def parses_in_place(current: str, code: str, symbol: Symbol | None) -> bool:
    """True when ``current`` (which parses) with the function ``code`` applied (in place of
    ``symbol``, a ``def`` of ``current``; appended when None) parses too, known from ``code``
    alone: it is one undecorated function that parses, its lines move as one block when
    indented (no tabs, ``\n`` line breaks only) and the file is indented with spaces. The
    file's lines before it end a statement (a ``def`` starts a logical line), the lines after
    it start one at an indentation the lines before opened (they followed the old function),
    and the draft closes every bracket, string and line continuation it opens, so the file's
    tokens are the old file's with one function statement for another. False: parse the file."""
    if not _may_check_alone(current, code, symbol):
        return False
    if max(len(line) - len(line.lstrip(" ")) for line in code.split("\n")) > MAX_INDENT_COLUMNS:
        return False
    function = _one_function(code)
    return function is not None and not function.decorator_list


def draft_undefined_names(current: str, code: str, symbol: Symbol | None) -> list[str] | None:
    """What :func:`~.symbols.new_undefined_names` answers for ``current`` with the function
    ``code`` applied (in place of ``symbol``, a ``def`` of ``current``; appended at the end
    of the file when ``symbol`` is None), sorted; None where only the whole-file rule can
    answer (see the module's docstring). ``current`` must parse, and so must the file with
    ``code`` applied (the caller parsed it, or :func:`parses_in_place` said it parses)."""
    if not _may_check_alone(current, code, symbol) or "PYFLAKES_DOCTEST" in os.environ:
        return None
    found = _draft_names(current, code, symbol)
    return None if found is None else list(found)


@functools.lru_cache(maxsize=256)
def _draft_names(current: str, code: str, symbol: Symbol | None) -> tuple[str, ...] | None:
    """Cached by the function's text and the file's (a small model's drafts of one function
    often repeat one another, across draws and sessions of the same file)."""
    context = module_names(current)
    assert context is not None
    draft = _one_function(code)
    if draft is None or _binds_module_names(draft):
        return None
    stub: list[ast.stmt] = []
    if context.futures:
        stub.append(ast.ImportFrom("__future__", [ast.alias(name) for name in context.futures], 0))
    stub += [ast.AnnAssign(ast.Name(name, ast.Store()), ast.Constant(None), None, 1) for name in context.annotated]
    if context.bound:
        stub.append(ast.Assign([ast.Name(name, ast.Store()) for name in context.bound], ast.Constant(None)))
    if symbol is None:  # appended: its signature is evaluated after every module-level binding
        stub.append(draft)
    else:
        old = context.signatures.get((symbol.name, symbol.start_line))
        if old is None or draft.decorator_list or draft.name != symbol.name.rsplit(".", 1)[-1] \
                or _signature(draft) != old:
            return None
        _strip_signature(draft)
        stub.append(ast.ClassDef("_Class", [], [], [draft], []) if "." in symbol.name else draft)
    module = ast.fix_missing_locations(ast.Module(body=stub, type_ignores=[]))
    found = pyflakes_checker.Checker(module, filename="draft.py").messages
    now = {str(m.message_args[0]) for m in found if isinstance(m, pyflakes_messages.UndefinedName)}
    return tuple(sorted(now - context.undefined))


__all__ = ["MAX_INDENT_COLUMNS", "ModuleNames", "draft_undefined_names", "module_names", "parses_in_place"]
