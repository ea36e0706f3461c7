"""The .desktop file and AppStream metainfo are valid, and `install-desktop-entry` installs
them (and the icons) under the user's XDG data dir, and removes them again."""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

import workstation
from workstation import APP_ID
from workstation.commands import desktop_cmd


def _run_cli(args: list[str], env_extra: dict[str, str], tmp_path: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "WORKSTATION_DATA_DIR": str(tmp_path / "data"), **env_extra}
    return subprocess.run(
        [sys.executable, "-m", "workstation", *args],
        capture_output=True, text=True, timeout=120, env=env,
    )


def test_shipped_desktop_file_is_valid(desktop_file_validate) -> None:
    out = desktop_file_validate(desktop_cmd.DESKTOP_TEMPLATE)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "error" not in (out.stdout + out.stderr).lower()


def test_shipped_metainfo_is_valid(appstream_validate) -> None:
    out = appstream_validate(desktop_cmd.METAINFO_FILE)
    assert out.returncode == 0, out.stdout + out.stderr
    warnings = [ln for ln in out.stdout.splitlines() if ln.startswith(("E:", "W:"))]
    assert warnings == []


def test_metainfo_matches_the_app() -> None:
    root = ET.parse(desktop_cmd.METAINFO_FILE).getroot()
    assert root.findtext("id") == APP_ID
    assert root.find("launchable").text == f"{APP_ID}.desktop"
    newest = root.find("releases/release")
    assert newest.get("version") == workstation.__version__, "add a <release> for this version"


def test_install_and_uninstall_honour_xdg_data_home(tmp_path: Path, desktop_file_validate,
                                                    appstream_validate) -> None:
    data_home = tmp_path / "xdg data"  # a space, as in some home directories
    out = _run_cli(["install-desktop-entry"], {"XDG_DATA_HOME": str(data_home)}, tmp_path)
    assert out.returncode == 0, out.stderr
    expected = desktop_cmd.installed_paths(data_home)
    assert all(p.is_file() for p in expected)
    desktop = data_home / "applications" / f"{APP_ID}.desktop"
    checked = desktop_file_validate(desktop)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert appstream_validate(data_home / "metainfo" / f"{APP_ID}.metainfo.xml").returncode == 0
    png = data_home / "icons/hicolor/48x48/apps" / f"{APP_ID}.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    out = _run_cli(["install-desktop-entry", "--uninstall"], {"XDG_DATA_HOME": str(data_home)},
                   tmp_path)
    assert out.returncode == 0, out.stderr
    assert not any(p.exists() for p in expected)
    out = _run_cli(["install-desktop-entry", "--uninstall"], {"XDG_DATA_HOME": str(data_home)},
                   tmp_path)
    assert out.returncode == 0 and "nothing to remove" in out.stdout


def test_menu_entry_runs_this_installation(tmp_path: Path) -> None:
    """The Exec line starts the same workstation the command was run from."""
    desktop_cmd.install_desktop_entry(tmp_path, desktop_cmd.launcher_argv())
    text = (tmp_path / "applications" / f"{APP_ID}.desktop").read_text()
    exec_value = next(ln for ln in text.splitlines() if ln.startswith("Exec="))[5:]
    argv = _parse_exec(exec_value)
    out = subprocess.run([*argv, "--version"], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "WORKSTATION_DATA_DIR": str(tmp_path / "data")})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"workstation {workstation.__version__}"


def test_relative_or_empty_xdg_data_home_falls_back_to_home() -> None:
    home = {"HOME": "/home/someone"}
    fallback = Path("/home/someone/.local/share")
    assert desktop_cmd.xdg_data_home({**home, "XDG_DATA_HOME": ""}) == fallback
    assert desktop_cmd.xdg_data_home({**home, "XDG_DATA_HOME": "rel/dir"}) == fallback
    assert desktop_cmd.xdg_data_home({**home, "XDG_DATA_HOME": "/x/y"}) == Path("/x/y")


@pytest.mark.parametrize(
    "argv",
    [
        ["/opt/work station/workstation"],
        ["/usr/bin/python3", "-m", "workstation"],
        ["/odd/$dir/with\"quote`s\\and%percent/workstation"],
    ],
)
def test_exec_quoting_round_trips(argv: list[str], desktop_file_validate, tmp_path: Path) -> None:
    template = desktop_cmd.DESKTOP_TEMPLATE.read_text()
    rendered = desktop_cmd.render_desktop_file(template, argv)
    path = tmp_path / f"{APP_ID}.desktop"
    path.write_text(rendered)
    checked = desktop_file_validate(path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    exec_value = next(ln for ln in rendered.splitlines() if ln.startswith("Exec="))[5:]
    assert _parse_exec(exec_value) == argv


def test_unwritable_data_home_is_a_user_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file-not-dir"
    blocker.write_text("x")
    out = _run_cli(["install-desktop-entry"], {"XDG_DATA_HOME": str(blocker)}, tmp_path)
    assert out.returncode == 2
    assert "cannot write under" in out.stderr and "Traceback" not in out.stderr


def _parse_exec(value: str) -> list[str]:
    """Undo desktop-file string escapes, then Exec quoting (as a desktop environment does)."""
    value = value.replace("\\\\", "\x00")  # string escape: \\ -> \
    value = value.replace("\x00", "\\").replace("%%", "%")
    args: list[str] = []
    current: list[str] = []
    quoted = escaped = in_arg = False
    for ch in value:
        if escaped:
            current.append(ch)
            escaped = False
        elif quoted and ch == "\\":
            escaped = True
        elif ch == '"':
            quoted = not quoted
            in_arg = True
        elif ch == " " and not quoted:
            if in_arg:
                args.append("".join(current))
            current, in_arg = [], False
        else:
            current.append(ch)
            in_arg = True
    if in_arg:
        args.append("".join(current))
    return args
