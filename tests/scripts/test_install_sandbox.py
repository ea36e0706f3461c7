"""``scripts/install_sandbox.sh`` (run by ``setup.sh``, so by both README commands and CI).

The machine's own package manager is never touched: each test runs the script with a PATH
of its own, which has no ``bwrap`` (a fresh machine) and a stand-in ``apt-get`` (and
``sudo``) that logs its arguments and "installs" bubblewrap by linking the real one in.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.prerequisites import needs_bwrap

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "install_sandbox.sh"
LEFT_OUT = {"bwrap", "sudo", "apt-get", "dnf", "zypper", "pacman"}


@pytest.fixture
def tmp_path() -> Iterator[Path]:
    """A folder an ordinary user (``nobody``) can enter too, unlike pytest's own."""
    path = Path(tempfile.mkdtemp(prefix="ws-install-sandbox-", dir="/var/tmp"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _bin_dir(tmp_path: Path, *, apt: bool = True, sudo: bool = False) -> Path:
    """A PATH folder: the system's programs minus bubblewrap and the package tools, plus
    stand-ins that log to ``apt.log`` and link the real bwrap in on ``install``."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for folder in ("/usr/local/bin", "/usr/bin", "/bin"):
        if not os.path.isdir(folder):
            continue
        for name in os.listdir(folder):
            if name not in LEFT_OUT and not (bin_dir / name).exists():
                (bin_dir / name).symlink_to(os.path.join(folder, name))
    real = shutil.which("bwrap") or "/usr/bin/bwrap"
    log = tmp_path / "apt.log"
    if apt:
        (bin_dir / "apt-get").write_text(
            "#!/bin/sh\n"
            f'echo "uid=$(id -u) $*" >> {log}\n'
            f'case " $* " in *" install "*) ln -sf {real} {bin_dir}/bwrap ;; esac\n')
        (bin_dir / "apt-get").chmod(0o755)
    if sudo:
        (bin_dir / "sudo").write_text(
            '#!/bin/sh\n[ "$1" = -n ] || { echo "sudo: a password is required" >&2; exit 1; }\n'
            f'shift\necho "sudo $*" >> {log}\nexec "$@"\n')
        (bin_dir / "sudo").chmod(0o755)
    return bin_dir


def _run(tmp_path: Path, bin_dir: Path, *, as_nobody: bool = False, **env: str) -> subprocess.CompletedProcess[str]:
    base = {"PATH": str(bin_dir), "HOME": str(tmp_path / "home"), "WORKSTATION_DATA_DIR": str(tmp_path / "data"),
            **env}
    argv = ["env", "-i", *(f"{k}={v}" for k, v in base.items()), "bash", str(SCRIPT)]
    if as_nobody:
        argv = ["runuser", "-u", "nobody", "--", *argv]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd="/")


@needs_bwrap
def test_as_root_it_installs_bubblewrap_and_checks_it(tmp_path: Path) -> None:
    if os.getuid() != 0:
        pytest.skip("the root path needs root (the sudo path is tested below)")
    proc = _run(tmp_path, _bin_dir(tmp_path))
    assert proc.returncode == 0, proc.stderr
    log = (tmp_path / "apt.log").read_text().splitlines()
    assert log[0] == "uid=0 update -qq"
    assert log[1] == "uid=0 install -y -qq --no-install-recommends bubblewrap"
    assert "command sandbox: bubblewrap" in proc.stdout and "works" in proc.stdout


@needs_bwrap
def test_with_password_less_sudo_it_installs_through_sudo(tmp_path: Path) -> None:
    bin_dir = _bin_dir(tmp_path, sudo=True)
    if os.getuid() == 0:
        for folder in (tmp_path, bin_dir):  # the stand-ins write their log and link there
            shutil.chown(folder, "nobody")
        proc = _run(tmp_path, bin_dir, as_nobody=True)
    else:
        proc = _run(tmp_path, bin_dir)
    assert proc.returncode == 0, proc.stderr
    log = (tmp_path / "apt.log").read_text()
    assert "sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends bubblewrap" in log


def test_without_root_or_sudo_it_stops_with_the_exact_command(tmp_path: Path) -> None:
    if os.getuid() != 0:
        pytest.skip("needs root to run the script as an ordinary user without sudo")
    proc = _run(tmp_path, _bin_dir(tmp_path), as_nobody=True)
    assert proc.returncode == 1
    assert "    sudo apt-get install -y bubblewrap" in proc.stderr
    assert not (tmp_path / "apt.log").exists()  # nothing was tried


def test_without_apt_it_names_the_package(tmp_path: Path) -> None:
    proc = _run(tmp_path, _bin_dir(tmp_path, apt=False))
    assert proc.returncode == 1
    assert "install the 'bubblewrap' package" in proc.stderr


def test_a_bwrap_that_cannot_run_stops_with_the_reason(tmp_path: Path) -> None:
    bin_dir = _bin_dir(tmp_path)
    broken = tmp_path / "broken-bwrap"
    broken.write_text("#!/bin/sh\necho 'No permissions to create new namespace' >&2\nexit 1\n")
    broken.chmod(0o755)
    proc = _run(tmp_path, bin_dir, WORKSTATION_SANDBOX__BWRAP=str(broken))
    assert proc.returncode == 1
    assert "refused to run: No permissions to create new namespace" in proc.stderr
    assert "unprivileged user namespaces" in proc.stderr
    proc = _run(tmp_path, bin_dir, WORKSTATION_SANDBOX__BWRAP=str(tmp_path / "missing"))
    assert proc.returncode == 1 and "is not an executable program" in proc.stderr


def test_sandbox_off_is_the_users_choice_and_skips_it(tmp_path: Path) -> None:
    bin_dir = _bin_dir(tmp_path, apt=False)
    proc = _run(tmp_path, bin_dir, WORKSTATION_SANDBOX__MODE="off")
    assert proc.returncode == 0 and "off in settings" in proc.stderr
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "settings.json").write_text(json.dumps({"sandbox": {"mode": "off"}}))
    proc = _run(tmp_path, bin_dir)
    assert proc.returncode == 0 and "off in settings" in proc.stderr
    assert not (tmp_path / "apt.log").exists()
