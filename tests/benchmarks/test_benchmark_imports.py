"""Every name a benchmark imports from the app (or from the benchmarks' own helpers) exists,
the imports inside its functions included: a benchmark is run by hand, seldom, so a name
that moved or went away would otherwise show only when someone next runs it (``soak.py``
still imported ``agent.sandbox.describe`` after it had gone)."""

from __future__ import annotations

import ast
import importlib
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _imported_names() -> list[tuple[str, str, str]]:
    """``(where, module, name)`` of every ``from workstation… / benchmarks… import name``."""
    found = []
    for path in sorted((ROOT / "benchmarks").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module \
                    and node.module.split(".")[0] in ("workstation", "benchmarks"):
                for alias in node.names:
                    found.append((f"{path.relative_to(ROOT)}:{node.lineno}", node.module, alias.name))
    return found


def test_every_name_a_benchmark_imports_exists() -> None:
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))  # as each benchmark puts its checkout first
    imported = _imported_names()
    missing = []
    for where, module, name in imported:
        target = importlib.import_module(module)
        if not hasattr(target, name):
            try:
                importlib.import_module(f"{module}.{name}")  # a submodule
            except ModuleNotFoundError:
                missing.append(f"{where}: {module}.{name}")
    assert len(imported) > 100  # the finder does see the benchmarks' imports
    assert missing == []
