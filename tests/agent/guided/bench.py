"""``benchmarks/guided_draft_checks.py`` as a module: its inputs (files of this repository,
a turn's drafts of each kind) and its scripted model serve the tests too."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

_NAME = "guided_draft_checks"


def _load() -> ModuleType:
    if _NAME in sys.modules:
        return sys.modules[_NAME]
    spec = importlib.util.spec_from_file_location(
        _NAME, Path(__file__).resolve().parents[3] / "benchmarks" / "guided_draft_checks.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[_NAME] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


bench = _load()
