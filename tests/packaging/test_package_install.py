"""`pip install .` carries everything the package reads at run time, and gives a working
`workstation` command and `python -m workstation`; so does `pipx install .`."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

import workstation

from .conftest import REPO_ROOT

PACKAGE_DIR = REPO_ROOT / "workstation"


def _copy_source(dest: Path) -> Path:
    """The project as a fresh checkout would have it (no build dirs, no caches)."""
    dest.mkdir(parents=True)
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        if (REPO_ROOT / name).is_file():
            shutil.copy2(REPO_ROOT / name, dest / name)
    shutil.copytree(PACKAGE_DIR, dest / "workstation",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return dest


def _package_files() -> set[str]:
    return {
        p.relative_to(REPO_ROOT).as_posix()
        for p in PACKAGE_DIR.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
    }


def _pip(python: Path, *args: str, timeout_s: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([str(python), "-m", "pip", *args, "--disable-pip-version-check"],
                          capture_output=True, text=True, timeout=timeout_s)


def _clean_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "PYTHON"))}
    env["WORKSTATION_DATA_DIR"] = str(tmp_path / "data")
    return env


def test_wheel_carries_every_file_of_the_package(tmp_path: Path) -> None:
    """Package data (icons, desktop files, engine scripts, templates, price tables) is in the wheel."""
    src = _copy_source(tmp_path / "src")
    out = _pip(Path(sys.executable), "wheel", str(src), "--no-deps", "-q", "-w", str(tmp_path / "w"),
               timeout_s=300)
    assert out.returncode == 0, out.stderr[-2000:]
    (wheel,) = (tmp_path / "w").glob("workstation-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        in_wheel = {n for n in zf.namelist() if not n.startswith("workstation-")}
    missing = sorted(_package_files() - in_wheel)
    assert missing == [], f"not in the wheel (extend [tool.setuptools.package-data]): {missing}"


def _scratch_venv_on_app_deps(root: Path) -> Path:
    """A fresh venv that sees the app venv's installed dependencies but not its workstation."""
    venv.EnvBuilder(with_pip=True, clear=True).create(root)
    site = Path(sysconfig.get_paths(vars={"base": str(root), "platbase": str(root)})["purelib"])
    app_site = Path(sysconfig.get_paths()["purelib"])
    (site / "app_deps.pth").write_text(str(app_site) + "\n")
    return root / "bin" / "python"


@pytest.mark.slow
def test_pip_install_gives_a_working_command(tmp_path: Path) -> None:
    src = _copy_source(tmp_path / "src")
    python = _scratch_venv_on_app_deps(tmp_path / "venv")
    out = _pip(python, "install", "-q", "--no-deps", str(src))
    assert out.returncode == 0, out.stderr[-2000:]
    env = _clean_env(tmp_path)
    run_dir = tmp_path / "elsewhere"  # not the checkout: the installed copy must be used
    run_dir.mkdir()
    for argv in ([str(tmp_path / "venv/bin/workstation"), "--version"],
                 [str(python), "-m", "workstation", "--version"]):
        res = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env, cwd=run_dir)
        assert res.returncode == 0, res.stderr
        assert res.stdout.strip() == f"workstation {workstation.__version__}"
    where = subprocess.run(
        [str(python), "-c", "import workstation, pathlib; print(pathlib.Path(workstation.__file__).parent)"],
        capture_output=True, text=True, timeout=60, env=env, cwd=run_dir,
    ).stdout.strip()
    installed = Path(where)
    assert installed != PACKAGE_DIR and str(installed).startswith(str(tmp_path))
    res = subprocess.run(
        [str(tmp_path / "venv/bin/workstation"), "install-desktop-entry"],
        capture_output=True, text=True, timeout=120,
        env={**env, "XDG_DATA_HOME": str(tmp_path / "xdg")}, cwd=run_dir,
    )
    assert res.returncode == 0, res.stderr
    assert f"Exec={tmp_path / 'venv/bin/workstation'}" in (
        tmp_path / "xdg/applications" / f"{workstation.APP_ID}.desktop").read_text()


@pytest.mark.slow
def test_pip_install_with_dependencies_in_a_fresh_venv(tmp_path: Path) -> None:
    """The whole install as a user does it: dependencies resolved from the package index."""
    src = _copy_source(tmp_path / "src")
    venv.EnvBuilder(with_pip=True, clear=True).create(tmp_path / "venv")
    python = tmp_path / "venv/bin/python"
    out = _pip(python, "install", "-q", str(src))
    assert out.returncode == 0, out.stderr[-3000:]
    env = {**_clean_env(tmp_path), "QT_QPA_PLATFORM": "offscreen"}
    res = subprocess.run([str(tmp_path / "venv/bin/workstation"), "--version"],
                         capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    assert res.returncode == 0 and res.stdout.strip() == f"workstation {workstation.__version__}"
    imports = "import PySide6.QtWidgets, PySide6.QtSvg, qasync, httpx, av, git, pyqtgraph, psutil"
    res = subprocess.run([str(python), "-c", imports], capture_output=True, text=True, timeout=120,
                         env=env, cwd=tmp_path)
    assert res.returncode == 0, res.stderr


@pytest.mark.slow
def test_pipx_install_gives_a_working_command(tmp_path: Path) -> None:
    pipx = shutil.which("pipx")
    if pipx is None:
        tools = tmp_path / "tools"
        venv.EnvBuilder(with_pip=True).create(tools)
        out = _pip(tools / "bin/python", "install", "-q", "pipx")
        if out.returncode != 0:
            pytest.skip(f"pipx is not installed and cannot be installed: {out.stderr[-300:]}")
        pipx = str(tools / "bin/pipx")
    src = _copy_source(tmp_path / "src")
    env = {**_clean_env(tmp_path), "PIPX_HOME": str(tmp_path / "pipx-home"),
           "PIPX_BIN_DIR": str(tmp_path / "pipx-bin"), "PIPX_MAN_DIR": str(tmp_path / "pipx-man"),
           "QT_QPA_PLATFORM": "offscreen"}
    out = subprocess.run([pipx, "install", "--python", sys.executable, str(src)],
                         capture_output=True, text=True, timeout=900, env=env)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    command = tmp_path / "pipx-bin" / "workstation"
    res = subprocess.run([str(command), "--version"], capture_output=True, text=True, timeout=120,
                         env=env, cwd=tmp_path)
    assert res.returncode == 0 and res.stdout.strip() == f"workstation {workstation.__version__}"
