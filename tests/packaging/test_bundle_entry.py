"""The bundle's entry point gives child processes the user's environment back."""

from __future__ import annotations

import importlib.util
import sys

import pytest

from .conftest import REPO_ROOT


@pytest.fixture
def entry(monkeypatch: pytest.MonkeyPatch, tmp_path):
    spec = importlib.util.spec_from_file_location("bundle_entry", REPO_ROOT / "packaging" / "bundle_entry.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    bundle = tmp_path / "bundle" / "_internal"
    monkeypatch.setattr(sys, "_MEIPASS", str(bundle), raising=False)
    for name in ("LD_LIBRARY_PATH", "LD_LIBRARY_PATH_ORIG", "QT_PLUGIN_PATH", "QML2_IMPORT_PATH",
                 "_WORKSTATION_USER_ENV_KEPT", "_WORKSTATION_USER_QT_PLUGIN_PATH",
                 "_WORKSTATION_USER_QML2_IMPORT_PATH"):
        monkeypatch.delenv(name, raising=False)
    return module, str(bundle)


def test_unset_variables_are_unset_again(entry, monkeypatch: pytest.MonkeyPatch) -> None:
    module, bundle = entry
    monkeypatch.setenv("LD_LIBRARY_PATH", bundle)  # what the bootloader sets
    monkeypatch.setenv("_WORKSTATION_USER_ENV_KEPT", "1")  # the runtime hook ran, user had no Qt paths
    monkeypatch.setenv("QT_PLUGIN_PATH", f"{bundle}/PySide6/Qt/plugins")
    monkeypatch.setenv("QML2_IMPORT_PATH", f"{bundle}/PySide6/Qt/qml")
    module._restore_child_environment()
    import os

    for name in ("LD_LIBRARY_PATH", "QT_PLUGIN_PATH", "QML2_IMPORT_PATH", "_WORKSTATION_USER_ENV_KEPT"):
        assert name not in os.environ, name


def test_the_users_own_values_come_back(entry, monkeypatch: pytest.MonkeyPatch) -> None:
    module, bundle = entry
    monkeypatch.setenv("LD_LIBRARY_PATH", f"{bundle}:/opt/cuda/lib64")
    monkeypatch.setenv("LD_LIBRARY_PATH_ORIG", "/opt/cuda/lib64")
    monkeypatch.setenv("_WORKSTATION_USER_ENV_KEPT", "1")
    monkeypatch.setenv("_WORKSTATION_USER_QT_PLUGIN_PATH", "/home/me/qt-plugins")
    monkeypatch.setenv("QT_PLUGIN_PATH", f"{bundle}/PySide6/Qt/plugins")
    module._restore_child_environment()
    import os

    assert os.environ["LD_LIBRARY_PATH"] == "/opt/cuda/lib64"
    assert os.environ["QT_PLUGIN_PATH"] == "/home/me/qt-plugins"
    assert "LD_LIBRARY_PATH_ORIG" not in os.environ
    assert "_WORKSTATION_USER_QT_PLUGIN_PATH" not in os.environ
