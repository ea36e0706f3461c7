"""Helpers for the packaging tests: the Debian validators, skipped with a reason where missing
(failing under ``CI=true``: ``scripts/setup.sh --dev`` installs them).

``desktop-file-validate`` comes from Debian's ``desktop-file-utils``, ``appstreamcli`` from
``appstream`` (``apt-get install -y desktop-file-utils appstream``).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.helpers.prerequisites import missing

REPO_ROOT = Path(__file__).resolve().parents[2]


def _tool(name: str, package: str) -> str:
    path = shutil.which(name)
    if path is None:
        missing(f"{name} not installed (Debian package {package}: apt-get install -y {package})")
    return path


@pytest.fixture
def desktop_file_validate():
    exe = _tool("desktop-file-validate", "desktop-file-utils")

    def validate(path: Path) -> subprocess.CompletedProcess:
        return subprocess.run([exe, str(path)], capture_output=True, text=True, timeout=60)

    return validate


@pytest.fixture
def appstream_validate():
    exe = _tool("appstreamcli", "appstream")

    def validate(path: Path) -> subprocess.CompletedProcess:
        return subprocess.run(
            [exe, "validate", "--no-net", str(path)], capture_output=True, text=True, timeout=60
        )

    return validate
