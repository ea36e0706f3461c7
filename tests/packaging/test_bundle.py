"""The PyInstaller bundle: build it once (about a minute), then start it offscreen.

Checks what a user of the bundle meets: ``--version``, every verb of the source tree,
the menu entry pointing at the bundle, an engine configured in settings found and its
child processes run with the user's environment (not the bundle's libraries), the
engine environment created from a system Python on first run, and the headless demo
streaming from the real engine.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import workstation
from workstation import APP_ID

from .conftest import REPO_ROOT

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if sys.platform != "linux" or platform.machine() != "x86_64":
        pytest.skip("the bundle is built for Linux x86_64 only")
    try:
        import PyInstaller  # noqa: F401
    except ImportError:
        pytest.skip("PyInstaller is not installed (pip install -e '.[dev]')")
    codecs = "stub"
    if shutil.which("cc") is None or shutil.which("nm") is None:
        codecs = "keep"  # the stand-ins need a C compiler; the bundle is then GPL
    root = tmp_path_factory.mktemp("bundle")
    out = subprocess.run(
        [sys.executable, str(REPO_ROOT / "packaging" / "build_bundle.py"), "--dist", str(root / "dist"),
         "--work", str(root / "work"), "--gpl-codecs", codecs],
        capture_output=True, text=True, timeout=1200,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["gpl_codecs"] == codecs and result["bundle_mb"] > 0
    return root / "dist" / "workstation"


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WORKSTATION_")}
    env.update(WORKSTATION_DATA_DIR=str(tmp_path / "data"), QT_QPA_PLATFORM="offscreen", **extra)
    return env


def _run(argv: list[str], env: dict[str, str], timeout_s: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout_s)


def _verbs(argv: list[str], env: dict[str, str]) -> set[str]:
    out = _run([*argv, "no-such-verb"], env)
    match = re.search(r"choose from (.*)\)", out.stderr)
    assert match, out.stderr
    return set(re.findall(r"'([^']+)'", match.group(1)))


def test_bundle_starts_offscreen_with_version(bundle: Path, tmp_path: Path) -> None:
    out = _run([str(bundle / "workstation"), "--version"], _env(tmp_path))
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"workstation {workstation.__version__}"


def test_bundle_has_every_verb_of_the_source_tree(bundle: Path, tmp_path: Path) -> None:
    env = _env(tmp_path)
    assert _verbs([str(bundle / "workstation")], env) == _verbs([sys.executable, "-m", "workstation"], env)


def test_bundle_carries_package_data_and_licences(bundle: Path) -> None:
    internal = bundle / "_internal"
    for rel in ("workstation/engine/scripts/vllm_entry.py", "workstation/engine/scripts/chat_template.jinja",
                f"workstation/resources/desktop/{APP_ID}.desktop", "workstation/resources/icons/symbolic/start.svg"):
        assert (internal / rel).is_file(), rel
    inventory = (bundle / "licenses" / "THIRD-PARTY.md").read_text()
    assert "PySide6" in inventory and "LGPL-3.0" in inventory
    info = json.loads((bundle / "BUNDLE-INFO.json").read_text())
    if info["gpl_codecs"] == "stub":
        assert "No GPL code" in inventory
        (x264,) = [p for p in (internal / "av.libs").glob("libx264*") if p.is_file()]
        assert x264.stat().st_size < 100_000, "libx264 in the bundle is the real encoder"


def test_menu_entry_from_the_bundle_runs_the_bundle(bundle: Path, tmp_path: Path, desktop_file_validate) -> None:
    data_home = tmp_path / "xdg"
    out = _run([str(bundle / "workstation"), "install-desktop-entry"], _env(tmp_path, XDG_DATA_HOME=str(data_home)))
    assert out.returncode == 0, out.stderr
    desktop = data_home / "applications" / f"{APP_ID}.desktop"
    assert f"Exec={(bundle / 'workstation').resolve()}" in desktop.read_text()
    assert desktop_file_validate(desktop).returncode == 0


def test_bundle_finds_a_configured_engine_and_children_get_the_users_environment(
    bundle: Path, tmp_path: Path
) -> None:
    """A stand-in engine Python records the environment the bundle starts it with."""
    dump = tmp_path / "child-env.txt"
    fake_python = tmp_path / "engine-python"
    fake_python.write_text(f'#!/bin/sh\nenv > "{dump}"\necho 0.0.0+cpu\n')
    fake_python.chmod(0o755)
    env = _env(tmp_path, WORKSTATION_ENGINE__PYTHON=str(fake_python), QT_PLUGIN_PATH="/user/qt/plugins")
    env.pop("LD_LIBRARY_PATH", None)
    out = _run([str(bundle / "workstation"), "doctor", "--json"], env)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["engine"]["version"] == "0.0.0+cpu" and report["engine"]["managed"] is False
    child = dict(line.split("=", 1) for line in dump.read_text().splitlines() if "=" in line)
    bundle_dir = str(bundle.resolve())
    assert bundle_dir not in child.get("LD_LIBRARY_PATH", ""), "the engine would load the bundle's libraries"
    assert child.get("QT_PLUGIN_PATH") == "/user/qt/plugins"
    assert bundle_dir not in child.get("QML2_IMPORT_PATH", "")


def test_bundle_creates_the_engine_environment_from_a_system_python(bundle: Path, tmp_path: Path) -> None:
    """First run: `engine setup` makes the engine's venv from a system Python 3.11.

    pip is fenced off (no index, no wheel directory), so the setup stops right after the
    venv exists instead of downloading vLLM; what is checked is the step only a bundle can
    get wrong: the bundle is no Python, so the venv must come from a real interpreter.
    """
    if shutil.which("python3.11") is None:
        pytest.skip("no python3.11 on PATH (Debian: apt-get install python3.11 python3.11-venv)")
    empty = tmp_path / "no-wheels"
    empty.mkdir()
    env = _env(tmp_path, PIP_CONFIG_FILE=os.devnull, PIP_NO_INDEX="1", PIP_FIND_LINKS=str(empty))
    out = _run([str(bundle / "workstation"), "engine", "setup", "--platform", "cpu"], env, timeout_s=600)
    assert "could not create a venv" not in out.stderr, out.stderr
    venv_python = tmp_path / "data" / "engine" / "venv" / "bin" / "python"
    version = _run([str(venv_python), "-c", "import sys; print(sys.version_info[:2])"], env)
    assert version.stdout.strip() == "(3, 11)", version.stderr
    assert out.returncode == 2 and "vllm" in out.stderr.lower()  # the fenced-off install, plainly


@pytest.mark.engine
def test_bundle_headless_demo_streams_from_the_engine(bundle: Path, tmp_path: Path, smollm2_engine) -> None:
    env = _env(tmp_path)
    help_text = _run([str(bundle / "workstation"), "demo", "--help"], env)
    missing = [flag for flag in ("--headless", "--endpoint", "--api-key") if flag not in help_text.stdout]
    if help_text.returncode != 0 or missing:
        pytest.skip(f"`workstation demo` with {', '.join(missing) or 'its options'} is not there yet")
    out = _run(
        [str(bundle / "workstation"), "demo", "--headless", "--endpoint", smollm2_engine.base_url,
         "--api-key", smollm2_engine.api_key, "--model", smollm2_engine.model, "--max-tokens", "32"],
        env, timeout_s=300,
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    summary = json.loads(out.stdout.strip().splitlines()[-1])
    assert summary["tokens"] > 0 and summary["model"] == smollm2_engine.model
