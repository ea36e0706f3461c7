"""``workstation install-desktop-entry``: put the app in the user's application menu.

Installs, for the current user only (no root), under ``$XDG_DATA_HOME`` (default
``~/.local/share``):

- ``applications/<APP_ID>.desktop`` — its ``Exec`` points at the command that runs *this*
  installation (the frozen bundle, the venv's / pipx's ``workstation`` script, or
  ``python -m workstation``), with absolute paths, so the menu entry works even where
  ``~/.local/bin`` is not on the desktop session's ``PATH``;
- ``metainfo/<APP_ID>.metainfo.xml`` — the AppStream description software centres show;
- ``icons/hicolor/<N>x<N>/apps/<APP_ID>.png`` for N = 16…512 and
  ``icons/hicolor/scalable/apps/<APP_ID>.svg``.

``--uninstall`` removes exactly those files. Run it again after moving the bundle or the venv.
"""

from __future__ import annotations

import argparse
import os
import sys
import sysconfig
from pathlib import Path

import workstation
from workstation import APP_ID
from workstation.core.errors import UserError

RESOURCES_DIR = Path(workstation.__file__).resolve().parent / "resources"
DESKTOP_TEMPLATE = RESOURCES_DIR / "desktop" / f"{APP_ID}.desktop"
METAINFO_FILE = RESOURCES_DIR / "desktop" / f"{APP_ID}.metainfo.xml"
APP_ICON_DIR = RESOURCES_DIR / "icons" / "app"
ICON_SIZES_PX = (16, 22, 24, 32, 48, 64, 128, 256, 512)
COMMAND_NAME = "workstation"

# Characters that force quoting of an Exec argument (Desktop Entry Specification, "The Exec key").
_EXEC_RESERVED = set(' \t\n"\'\\><~|&;$*?#()`')


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "install-desktop-entry",
        help="add the app to your application menu (per user, XDG dirs)",
        description=__doc__.split("\n\n")[0],
    )
    parser.add_argument(
        "--uninstall", action="store_true", help="remove the menu entry, metainfo and icons"
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    data_home = xdg_data_home()
    if args.uninstall:
        removed = uninstall_desktop_entry(data_home)
        for path in removed:
            print(f"removed {path}")
        if not removed:
            print(f"nothing to remove under {data_home}")
        return 0
    launcher = launcher_argv()
    written = install_desktop_entry(data_home, launcher)
    for path in written:
        print(f"installed {path}")
    print(f"menu entry runs: {exec_line(launcher)}")
    return 0


# ----- where things go -----
def xdg_data_home(environ: dict[str, str] | os._Environ[str] | None = None) -> Path:
    """``$XDG_DATA_HOME`` if set to an absolute path, else ``~/.local/share`` (XDG rules)."""
    env = os.environ if environ is None else environ
    value = env.get("XDG_DATA_HOME", "")
    if value and os.path.isabs(value):
        return Path(value)
    home = env.get("HOME") or str(Path.home())
    return Path(home) / ".local" / "share"


def installed_paths(data_home: Path) -> list[Path]:
    """Every file this command writes under ``data_home``."""
    hicolor = data_home / "icons" / "hicolor"
    return [
        data_home / "applications" / f"{APP_ID}.desktop",
        data_home / "metainfo" / f"{APP_ID}.metainfo.xml",
        *(hicolor / f"{n}x{n}" / "apps" / f"{APP_ID}.png" for n in ICON_SIZES_PX),
        hicolor / "scalable" / "apps" / f"{APP_ID}.svg",
    ]


# ----- what the menu entry runs -----
def launcher_argv() -> list[str]:
    """The command that starts this very installation, with absolute paths."""
    if getattr(sys, "frozen", False):  # the PyInstaller bundle
        return [str(Path(sys.executable).resolve())]
    candidates = [
        Path(sys.executable).parent / COMMAND_NAME,  # venv, pipx
        Path(sysconfig.get_path("scripts")) / COMMAND_NAME,
    ]
    for script in candidates:
        if script.is_file() and os.access(script, os.X_OK) and _script_runs_this_python(script):
            return [str(script.absolute())]
    return [str(Path(sys.executable).absolute()), "-m", "workstation"]


def _script_runs_this_python(script: Path) -> bool:
    """A console script's shebang names the interpreter it runs; it must be ours."""
    try:
        with open(script, "rb") as fh:
            first = fh.readline(4096).decode("utf-8", "replace").strip()
    except OSError:
        return False
    if not first.startswith("#!"):
        return False
    interpreter = first[2:].strip().split()[0] if first[2:].strip() else ""
    if not interpreter:
        return False
    try:
        return os.path.samefile(interpreter, sys.executable)
    except OSError:
        return False


def exec_quote(arg: str) -> str:
    """Quote one argument for a desktop file's ``Exec`` value (spec rules, then string escapes)."""
    arg = arg.replace("%", "%%")
    if arg and not (_EXEC_RESERVED & set(arg)):
        quoted = arg
    else:
        inner = "".join("\\" + ch if ch in '"`$\\' else ch for ch in arg)
        quoted = f'"{inner}"'
    # The value is also a desktop-file "string": a backslash is written as two.
    return quoted.replace("\\", "\\\\")


def exec_line(argv: list[str]) -> str:
    return " ".join(exec_quote(a) for a in argv)


def render_desktop_file(template: str, launcher: list[str]) -> str:
    """The template with ``Exec`` and ``TryExec`` pointing at ``launcher``."""
    lines = []
    in_main_group = False
    for line in template.splitlines():
        stripped = line.strip()
        if stripped.startswith("["):
            in_main_group = stripped == "[Desktop Entry]"
        elif in_main_group and stripped.startswith("Exec="):
            line = f"Exec={exec_line(launcher)}"
        elif in_main_group and stripped.startswith("TryExec="):
            line = "TryExec=" + launcher[0].replace("\\", "\\\\")
        lines.append(line)
    return "\n".join(lines) + "\n"


# ----- install / uninstall -----
def install_desktop_entry(data_home: Path, launcher: list[str]) -> list[Path]:
    """Write the menu entry, metainfo and icons; returns the files written."""
    sources = [DESKTOP_TEMPLATE, METAINFO_FILE, APP_ICON_DIR / "workstation.svg"]
    sources += [APP_ICON_DIR / f"workstation-{n}.png" for n in ICON_SIZES_PX]
    missing = [str(p) for p in sources if not p.is_file()]
    if missing:
        raise UserError(
            "this installation lacks its desktop files: " + ", ".join(missing),
            hint="reinstall workstation (its package data is incomplete)",
        )
    targets = installed_paths(data_home)
    desktop_target, metainfo_target, *icon_targets = targets
    contents: list[tuple[Path, bytes]] = [
        (desktop_target, render_desktop_file(DESKTOP_TEMPLATE.read_text("utf-8"), launcher).encode()),
        (metainfo_target, METAINFO_FILE.read_bytes()),
    ]
    for n, target in zip(ICON_SIZES_PX, icon_targets, strict=False):
        contents.append((target, (APP_ICON_DIR / f"workstation-{n}.png").read_bytes()))
    contents.append((icon_targets[-1], (APP_ICON_DIR / "workstation.svg").read_bytes()))
    try:
        for target, data in contents:
            _write_atomically(target, data)
    except OSError as exc:
        raise UserError(
            f"cannot write under {data_home}: {exc.strerror or exc}",
            hint="check XDG_DATA_HOME and the permissions of that directory",
        ) from None
    _touch(data_home / "icons" / "hicolor")  # icon caches notice a changed theme dir by mtime
    return [target for target, _data in contents]


def uninstall_desktop_entry(data_home: Path) -> list[Path]:
    """Remove what :func:`install_desktop_entry` wrote; returns the files removed."""
    removed = []
    for path in installed_paths(data_home):
        try:
            path.unlink()
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise UserError(f"cannot remove {path}: {exc.strerror or exc}") from None
        removed.append(path)
    if removed:
        _touch(data_home / "icons" / "hicolor")
    return removed


def _write_atomically(target: Path, data: bytes) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp")
    tmp.write_bytes(data)
    os.chmod(tmp, 0o644)
    os.replace(tmp, target)


def _touch(directory: Path) -> None:
    try:
        os.utime(directory)
    except OSError:
        return
