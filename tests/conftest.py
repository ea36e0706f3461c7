"""Shared fixtures.

The real vLLM CPU engine starts **once per test session** per model (``smollm2_engine``,
``tiny_engine``). Set ``WORKSTATION_TEST_ENGINE_URL`` / ``_KEY`` / ``_MODEL`` (and for the tiny
model ``WORKSTATION_TEST_TINY_URL`` / ``_KEY`` / ``_MODEL``) to reuse engines that already
run instead, e.g. while developing. Under ``CI=true`` a missing engine, model or sandbox
fails the test instead of skipping it (``tests/helpers/prerequisites.py``), and every run
ends with how many tests of each marker ran (``tests/helpers/marker_counts.py``).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from tests.helpers.prerequisites import installed_engine, prepared_model, require_bwrap  # noqa: E402
from workstation.core.endpoints import Endpoint  # noqa: E402

pytest_plugins = ["tests.helpers.marker_counts", "tests.helpers.slow_log"]


@pytest.fixture(autouse=True)
def _restore_environment() -> Iterator[None]:
    """A test that runs the CLI in-process (``--data-dir`` sets ``WORKSTATION_DATA_DIR``)
    must not move later tests' data directory: the environment is put back after each."""
    saved = dict(os.environ)
    yield
    if os.environ != saved:
        os.environ.clear()
        os.environ.update(saved)


def _external(prefix: str) -> Endpoint | None:
    url = os.environ.get(f"{prefix}_URL")
    if not url:
        return None
    return Endpoint(
        base_url=url,
        api_key=os.environ.get(f"{prefix}_KEY", ""),
        model=os.environ.get(f"{prefix}_MODEL", ""),
        name="test-engine",
        native_tools=True,
    )


def _start_engine(model: str, tmp_root: Path) -> Iterator[Endpoint]:
    import asyncio

    from workstation.config import load_settings
    from workstation.engine.launcher import EngineLauncher

    settings = load_settings()
    engine = installed_engine(settings)
    model_spec = prepared_model(settings, model)
    loop = asyncio.new_event_loop()
    launcher = EngineLauncher(
        settings, engine, model_spec, log_dir=tmp_root / f"engine-{model}", profile="default"
    )
    try:
        loop.run_until_complete(launcher.start())
    except Exception:
        loop.run_until_complete(launcher.stop())
        loop.close()
        raise
    try:
        yield launcher.endpoint
    finally:
        loop.run_until_complete(launcher.stop())
        loop.close()


@pytest.fixture(scope="session")
def smollm2_engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Endpoint]:
    """The real CPU engine serving SmolLM2-135M-Instruct (shared by the whole session)."""
    ext = _external("WORKSTATION_TEST_ENGINE")
    if ext is not None:
        yield ext
        return
    yield from _start_engine("smollm2", tmp_path_factory.mktemp("smollm2-engine"))


@pytest.fixture(scope="session")
def tiny_engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Endpoint]:
    """The real CPU engine serving the tiny random-weight model (fast, cannot follow orders)."""
    ext = _external("WORKSTATION_TEST_TINY")
    if ext is not None:
        yield ext
        return
    yield from _start_engine("tiny", tmp_path_factory.mktemp("tiny-engine"))


@pytest.fixture
def bwrap_usable() -> None:
    """Bubblewrap confines commands here (else skip; under ``CI=true`` fail). Use as
    ``@pytest.mark.usefixtures("bwrap_usable")`` (``tests.helpers.prerequisites``)."""
    require_bwrap()


@pytest.fixture
def git_repo(tmp_path: Path) -> Path:
    """A small git repository with one commit on ``main``."""
    from workstation.fleet.sample_repos import scratch_repository

    files = {"README.md": "# sample\n", "app.py": "def add(a, b):\n    return a + b\n"}
    return scratch_repository(tmp_path / "repo", files)


def pytest_report_header(config: pytest.Config) -> list[str]:
    return [f"git: {shutil.which('git')}", f"QT_QPA_PLATFORM={os.environ.get('QT_QPA_PLATFORM')}"]


# The services tests' settings (test_services.py, test_services_engines.py): a data directory of
# their own and no engine settings from the caller's environment. tests/ui has its own.
@pytest.fixture
def settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    monkeypatch.setenv("WORKSTATION_DATA_DIR", str(tmp_path / "data"))
    for key in [k for k in os.environ if k.startswith("WORKSTATION_ENGINE__")]:
        monkeypatch.delenv(key)
    from workstation.config import load_settings

    return load_settings()
