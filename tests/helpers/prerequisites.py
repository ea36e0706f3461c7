"""What a test needs from the machine, and what happens when it is missing.

Where the real engine, a prepared model or bubblewrap is missing (or a test tool that
``scripts/setup.sh --dev`` installs: the desktop-entry validators, pytest-qt), a developer's
run skips the test with the reason; under ``CI=true`` it **fails** (CI prepares all of
them, so a missing one is a broken set-up, not a reason to pass). Only ``gpu`` tests may
skip in CI (CI has no GPU); they do not come here.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any, NoReturn

import pytest

CI_WORDS = frozenset({"1", "true", "yes", "on"})


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in CI_WORDS


def missing(reason: str) -> NoReturn:
    """Skip with ``reason`` — or, under ``CI=true``, fail with it."""
    if in_ci():
        pytest.fail(f"{reason} (CI=true: what set-up provides must be there, so this fails the run)", pytrace=False)
    pytest.skip(reason)


def installed_engine(settings: Any) -> Any:
    """The engine ``settings`` find, or :func:`missing`."""
    from workstation.engine.environment import find_engine

    engine = find_engine(settings)
    if engine is None:
        missing("engine not set up (run `workstation engine setup`)")
    return engine


def prepared_model(settings: Any, name: str) -> Any:
    """The resolved model ``name``, or :func:`missing`."""
    from workstation.core.errors import UserError
    from workstation.engine.models import resolve_model

    try:
        return resolve_model(settings, name)
    except UserError as exc:
        problem = str(exc)
    missing(f"model {name} not prepared: {problem}")


def bwrap_reason() -> str:
    """Why bubblewrap cannot confine commands here (with the settings' ``sandbox.bwrap``);
    empty when it can."""
    from workstation.agent import sandbox
    from workstation.config import load_settings

    program = load_settings().sandbox.bwrap or None
    sandbox.forget_probes()
    try:
        return asyncio.run(sandbox.probe_bwrap(bwrap=program)).reason
    finally:
        sandbox.forget_probes()


def require_bwrap() -> None:
    reason = bwrap_reason()
    if reason:
        missing(reason)


needs_bwrap = pytest.mark.usefixtures("bwrap_usable")
"""Mark a test that needs bubblewrap (the fixture lives in ``tests/conftest.py``)."""
