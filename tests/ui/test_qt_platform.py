"""Qt's platform plugin checked before Qt tries: a missing system library is named (with its
package) by ``doctor`` and by the window, instead of Qt's abort (exit 134)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.helpers.prerequisites import missing
from workstation.ui.qt_platform import check_platform, find_plugin, missing_from_ldd


def broken_plugin(folder: Path) -> Path:
    """A real copy of Qt's ``minimal`` platform plugin whose need of ``libfreetype.so.6`` is
    renamed (same length, so the ELF stays valid) to a library no system has."""
    real = find_plugin("minimal", {})
    assert real is not None
    data = real.read_bytes()
    assert b"libfreetype.so.6\x00" in data
    folder.mkdir(parents=True, exist_ok=True)
    out = folder / "libqminimal.so"
    out.write_bytes(data.replace(b"libfreetype.so.6\x00", b"libfreetypX.so.6\x00"))
    return out


def _cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "workstation", *args], capture_output=True, text=True,
                          timeout=120, env={**os.environ, **env})


def test_ldd_output_is_read_for_what_is_not_found() -> None:
    text = ("\tlinux-vdso.so.1 (0x00007ffd)\n\tlibxcb-icccm.so.4 => not found\n"
            "\tlibQt6Gui.so.6 => /x/libQt6Gui.so.6 (0x1)\n\tlibxcb-keysyms.so.1 => not found\n"
            "\tlibxcb-icccm.so.4 => not found\n")
    assert missing_from_ldd(text) == ["libxcb-icccm.so.4", "libxcb-keysyms.so.1"]


def test_the_offscreen_plugin_loads() -> None:
    report = check_platform("offscreen")
    assert report.platform_plugin_ok and report.missing_libraries == [] and report.plugin.endswith("libqoffscreen.so")


def test_a_plugin_missing_a_library_is_named_by_doctor_and_the_window(tmp_path: Path) -> None:
    if shutil.which("ldd") is None:
        missing("needs ldd (glibc): the check names missing libraries from its output")
    plugins = tmp_path / "platforms"
    broken_plugin(plugins)
    env = {"QT_QPA_PLATFORM": "minimal", "QT_QPA_PLATFORM_PLUGIN_PATH": str(plugins),
           "WORKSTATION_DATA_DIR": str(tmp_path / "data")}
    report = check_platform(env=env)
    assert not report.platform_plugin_ok and report.missing_libraries == ["libfreetypX.so.6"]
    assert report.plugin == str(plugins / "libqminimal.so")

    doctor = _cli("doctor", "--json", env=env)
    assert doctor.returncode == 0, doctor.stderr
    qt = json.loads(doctor.stdout)["qt"]
    assert qt["platform"] == "minimal" and qt["platform_plugin_ok"] is False
    assert qt["missing_libraries"] == ["libfreetypX.so.6"] and qt["window_starts"] is None
    words = _cli("doctor", env=env).stdout
    assert "platform minimal: Qt's minimal platform plugin cannot load: the system lacks libfreetypX.so.6" in words

    window = _cli(env=env)  # the window itself: a clear refusal, not Qt's abort
    assert window.returncode == 2, (window.returncode, window.stderr)
    assert "the system lacks libfreetypX.so.6" in window.stderr and "Traceback" not in window.stderr


def test_doctor_json_qt_entry_where_the_plugin_loads(tmp_path: Path) -> None:
    doctor = _cli("doctor", "--json", env={"QT_QPA_PLATFORM": "offscreen", "WORKSTATION_DATA_DIR": str(tmp_path)})
    qt = json.loads(doctor.stdout)["qt"]
    assert qt["platform_plugin_ok"] is True and qt["missing_libraries"] == []
    assert qt["window_starts"] is True and qt["version"]
