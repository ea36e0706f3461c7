"""The house rules that a reader of the source can check, checked on the source itself
(ARCHITECTURE.md, issue 16), so that they cannot quietly regress: services are built in one
place, no class is a mixin half of another module's state, modules stay small."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PRODUCTION = ("workstation", "benchmarks")
"""Everything outside ``tests/`` that builds services: the app, its verbs, the benchmarks."""
MAX_MODULE_LINES = 600


def _modules(*folders: str) -> Iterator[Path]:
    for folder in folders:
        yield from sorted((ROOT / folder).rglob("*.py"))


def _trees() -> Iterator[tuple[Path, ast.Module]]:
    for path in _modules(*PRODUCTION):
        yield path, ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def _constructions(name: str) -> list[str]:
    """``file:line`` of every call of ``name(...)`` or ``x.name(...)`` outside the tests."""
    found = []
    for path, tree in _trees():
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                func = node.func
                called = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
                if called == name:
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def test_the_fleet_is_built_in_one_place_the_service_factory() -> None:
    where = _constructions("Fleet")
    assert len(where) == 1 and where[0].startswith("workstation/services.py:"), where


def test_the_engine_launcher_is_built_in_one_place() -> None:
    where = _constructions("EngineLauncher")
    assert len(where) == 1 and where[0].startswith("workstation/engine/host.py:"), where


def test_the_tuners_are_built_in_one_place_the_service_factory() -> None:
    """The tuning verbs and the GPU suite get their tuners from ``Services`` (over its one
    HTTP client; a screening's trial engines stop when the services close)."""
    for tuner in ("Autotuner", "ScreeningTuner"):
        where = _constructions(tuner)
        assert len(where) == 1 and where[0].startswith("workstation/services.py:"), (tuner, where)


def test_the_finders_see_a_construction_where_there_is_one() -> None:
    """The check above cannot pass by finding nothing: the parser does see calls."""
    tree = ast.parse("fleet = Fleet(data_dir=d)\nlauncher = host.EngineLauncher(s)\nclass Fleet: ...\n")
    calls = [n.func for n in ast.walk(tree) if isinstance(n, ast.Call)]
    assert [getattr(f, "id", None) or getattr(f, "attr", None) for f in calls] == ["Fleet", "EngineLauncher"]


def test_no_method_annotates_self_as_another_class() -> None:
    """A method whose ``self`` is typed (``def f(self: Fleet)``) is a mixin half reaching into
    another class's private state: split by responsibility into a collaborator instead."""
    mixins = []
    for path, tree in _trees():
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.args.args:
                first = node.args.args[0]
                if first.arg == "self" and first.annotation is not None:
                    mixins.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}")
    assert mixins == []


def test_every_module_stays_under_the_line_budget() -> None:
    long = {str(p.relative_to(ROOT)): n for p in _modules("workstation")
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES}
    assert long == {}, f"split these by responsibility into collaborators: {long}"
