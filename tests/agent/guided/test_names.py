"""The draft checks give the verdicts the whole-file rule gave: every draft checked with the
old order (every check, pyflakes on the whole file) and with today's (cheapest first, the
function alone against the module's names) over a corpus of drafts, the benchmark's kinds
on files of this repository and the edge cases where only the whole file can answer."""

from __future__ import annotations

import ast

import pytest

from tests.agent.guided.bench import bench
from workstation.agent.guided.checks import EditSite, _Checker, check_draw, edit_site
from workstation.agent.guided.drafts import Draft, extract_code, rank, same_code
from workstation.agent.guided.names import draft_undefined_names, parses_in_place
from workstation.agent.guided.symbols import (
    WHOLE_FILE, new_function_target, new_undefined_names, parsed, python_symbols, twin_function,
)

MODULE = '''"""A module with the scopes pyflakes tells apart."""
from __future__ import annotations

import sys
import os

LIMIT: int
SHAPE: tuple
SCALE = 3
registry: dict[str, int] = {}


def deco(fn):
    return fn


def add(a, b):
    return a + b


@deco
def scaled(a, b=SCALE, *, c: int = 1) -> int:
    return a * b * c


def where():
    return os.getcwd() + str(LIMIT)


class Box:
    SIZE = 2

    def __init__(self, items=None):
        self.items = items or []

    def total(self, factor=SIZE):
        return sum(self.items) * factor

    @property
    def size(self):
        return len(self.items)


def uses_later():
    return later()


def later():
    return SCALE


del sys
'''
GLOBALS = "COUNT = 0\n\n\ndef bump():\n    global COUNT\n    COUNT += 1\n    return COUNT\n\n\ndef add(a, b):\n    return a + b\n"
STAR = "from os.path import *\n\n\ndef add(a, b):\n    return join(a, b)\n"
TABS = "class Box:\n\tdef total(self):\n\t\treturn 1\n\n\ndef add(a, b):\n\treturn a + b\n"
BROKEN = "def add(a, b):\n    return a +\n"
NO_NEWLINE = "def add(a, b):\n    return a + b  # the last line, no line end \\"

BODIES = [
    "    return 1\n", "    return np.zeros(1)\n", "    return later() + SCALE + add(1, 2)\n",
    "    return LIMIT\n",  # only annotated: undefined, as in the file
    "    v: SHAPE = 1\n    return v\n",  # only annotated, and enough for a (postponed) annotation
    "    return sys.argv\n",  # deleted at module level: undefined, new
    "    return os.sep\n", "    return __class__\n", "    return SIZE\n", "    return __module__, __file__, __name__\n",
    "    global SCALE\n    SCALE = 4\n    return SCALE\n",
    "    global fresh\n    fresh = 1\n    return uses_fresh\n",
    "    def inner():\n        nonlocal a\n        a = 1\n    return inner\n",
    "    from os.path import *\n    return join\n",
    "    def inner(x):\n        return [y * x for y in range(3)] + [zz]\n    return inner\n",
    "    try:\n        return nowhere\n    except NameError:\n        return 0\n",
    "    v: Undef = 1\n    w: 'Later2' = 2\n    return v + w\n",
    "    f = lambda q=zzz: q\n    return f\n", "    return [(w := i) for i in range(3)], w\n",
    "    class K:\n        z = q\n        y = z\n    return K\n", "    return (1\n", "    return a + b\n",
    "    return a + b  # the same\n", '    """Docs."""\n    return a + b\n', "    del a\n    del nothere\n    return 0\n",
    "    import math\n    return math.pi + registry['x']\n", "    return 1 \\\n",
    '    """never closed\n', "    x = 1\x0c\n    return x\n", "    return 1\nx = 2\n", "    return (\n1)\n",
    "    x = 1\n# a comment at column 0\n    return x\n", '    x = """\n  a string\'s lines\n"""\n    return x\n',
    "".join(" " * (4 * i) + "if a:\n" for i in range(1, 25)) + " " * 100 + "return np\n",
]


def _fence(code: str) -> str:
    return f"```python\n{code}```"


def drafts_for(header: str, extra_headers: tuple[str, ...] = ()) -> list[str]:
    out = [_fence(header + "\n" + body) for body in BODIES]
    out += ["```python\n" + header + "\n    x = 1\n",  # cut off
            _fence(header + "\n\treturn 1\n"), _fence(header + "\n    x = 1\r    return x\n"),
            _fence("@deco\n" + header + "\n    return 1\n"), _fence("def other(a, b):\n    return 1\n"),
            _fence(header + "\n    return 1\n\n\ndef extra():\n    return zz\n"),
            _fence("async " + header + "\n    return 1\n"), "```python\n```", "no fence at all"]
    out += [_fence(h + "\n    return np\n") for h in extra_headers]
    return out


def whole_file_rule(checker: _Checker, text: str) -> Draft:
    """The checks as they were: every check, in this order, pyflakes on the whole file."""
    site = checker.site
    code = extract_code(text)
    new_text = site.apply(code)
    problem = tree = None
    if same_code(new_text, site.current):
        problem = "changes nothing"
    elif site.python:
        tree, problem = parsed(new_text)
    if tree is not None and problem is None and (unknown := new_undefined_names(site.current or site.original,
                                                                                tree)):
        problem = f"uses names nothing defines: {', '.join(unknown[:5])}"
    if site.signature is not None and problem is None and site.current and (
            twin := twin_function(code, site.current)):
        problem = f"does what {twin} does"
    mine = checker.ident_of(code)
    if checker.before_ident is not None and mine == checker.before_ident:
        problem = problem or "the code as read"
    if not text.rstrip().endswith("```") or text.count("\n") < 2:
        problem = "cut off"
    if any(ident == mine for other, ident in checker.tried.items() if not (checker.queued and other == text)):
        problem = problem or "tried before"
    return Draft(text, new_text, problem, ident=mine)


def _verdicts(site: EditSite, texts: list[str], task: str) -> list[tuple[str, str | None]]:
    """Old and new verdicts of each draft, asserted equal; (text, problem) of each."""
    tried = frozenset(texts[2:4])
    old_checker = _Checker(site, tried)
    old = [whole_file_rule(old_checker, t) for t in texts]
    new = check_draw(site, texts, task, tried)
    for before, after in zip(old, new.drafts, strict=True):
        assert (after.text, after.new_text, after.problem, after.ident) == \
               (before.text, before.new_text, before.problem, before.ident), before.text
    assert [d.text for d in new.ranked] == [d.text for d in rank(old, site.before, task)]
    queued_old = _Checker(site, tried, queued=True)
    queued_new = _Checker(site, tried, queued=True)
    for text in texts:
        assert queued_new.draft(text).problem == whole_file_rule(queued_old, text).problem
    return [(d.text, d.problem) for d in new.drafts]


def _targets(text: str) -> list[str]:
    return [s.name for s in python_symbols(text) or ()] + [WHOLE_FILE, new_function_target("sub(a, b)")]


def _header(site: EditSite) -> str:
    return site.header or "def add(a, b):"


@pytest.mark.parametrize("name,text", [("module", MODULE), ("globals", GLOBALS), ("star", STAR), ("tabs", TABS),
                                       ("broken", BROKEN), ("no_newline", NO_NEWLINE)])
def test_every_draft_of_every_target_gets_the_whole_file_verdict(name: str, text: str) -> None:
    problems: set[str] = set()
    for target in _targets(text) if name != "broken" else [WHOLE_FILE, new_function_target("sub(a, b)"), "add"]:
        site = edit_site(f"{name}.py", target, text, text, False)
        texts = drafts_for(_header(site), extra_headers=(_header(site).replace("(", "(\n        ", 1),))
        texts.append(_fence(site.before) if site.before else _fence("def sub(a, b):\n    return a + b\n"))
        texts.append(texts[0])  # drawn twice in one batch
        problems |= {"a syntax error" if str(p).startswith("line ") else str(p).split(":")[0] for _, p in _verdicts(site, texts, "Make it count its calls.")}
    if name == "module":  # the corpus reaches every verdict
        assert {"None", "changes nothing", "a syntax error", "uses names nothing defines", "does what add does",
                "the code as read", "cut off", "tried before"} <= problems, problems


def test_the_function_alone_answers_as_the_whole_file_and_says_where_it_cannot() -> None:
    answered = declined = in_place = 0
    for target in _targets(MODULE):
        site = edit_site("module.py", target, MODULE, MODULE, False)
        for text in drafts_for(_header(site)):
            code = extract_code(text)
            applied = site.apply(code)
            if site.target != WHOLE_FILE and parses_in_place(MODULE, code, site.sym_now if site.signature is None
                                                            else None):
                in_place += 1
                assert parsed(applied)[0] is not None, (target, code)
            if parsed(applied)[0] is None or site.target == WHOLE_FILE:
                continue
            symbol = None if site.signature is not None else site.sym_now
            if symbol is None and site.signature is None:
                continue
            found = draft_undefined_names(MODULE, code, symbol)
            if found is None:
                declined += 1
                continue
            answered += 1
            assert found == new_undefined_names(MODULE, applied), (target, code)
    assert answered > 150 and declined > 20 and in_place > 150, (answered, declined, in_place)
    add = next(s for s in python_symbols(MODULE) or () if s.name == "add")
    total = next(s for s in python_symbols(MODULE) or () if s.name == "Box.total")
    assert draft_undefined_names(MODULE, "def add(a, b):\n    return sys.argv, np, later, LIMIT\n", add) == ["np", "sys"]
    assert draft_undefined_names(MODULE, "def total(self, factor=SIZE):\n    return __class__, SIZE\n", total) == ["SIZE"]
    assert draft_undefined_names(MODULE, "def add(a, b):\n    return __class__\n", add) == ["__class__"]
    for code in ("def add(a, b):\n    global SCALE\n    return 1\n", "def add(a, b=1):\n    return 1\n",
                 "@deco\ndef add(a, b):\n    return 1\n", "def other(a, b):\n    return 1\n"):
        assert draft_undefined_names(MODULE, code, add) is None, code  # the whole file answers
    assert draft_undefined_names(GLOBALS, "def add(a, b):\n    return 1\n", None) is None
    assert draft_undefined_names(STAR, "def add(a, b):\n    return 1\n", None) is None
    assert draft_undefined_names(TABS, "def add(a, b):\n    return 1\n", None) is None


@pytest.mark.parametrize("kind", ["rewrite", "add"])
def test_the_benchmarks_drafts_get_the_whole_file_verdicts(kind: str) -> None:
    for source in bench.pick_sources():
        task, draws = bench.drafts_of(source, kind, 7)
        if kind == "rewrite":
            target = source.function.name
        else:
            target = new_function_target(f"{bench.NEW_NAME}({ast.unparse(source.function.args)})")
        site = edit_site(source.path, target, source.text, source.text, False)
        verdicts = [p for draw in draws for _, p in _verdicts(site, draw, task)]
        # 3 usable, one of them among the drafts passed as tried before (each draw's third and fourth)
        assert verdicts.count(None) == 2 and verdicts.count("tried before") == 1, (source.path, verdicts)
