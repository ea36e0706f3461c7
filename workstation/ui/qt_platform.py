"""Can Qt's platform plugin load here? Checked before Qt tries, so a missing system library
is named with the package that brings it, instead of Qt's abort ("no Qt platform plugin could
be initialized", exit 134), which names neither.

The plugin (``libq<platform>.so`` in Qt's plugin folder, or in ``QT_QPA_PLATFORM_PLUGIN_PATH``)
is resolved with ``ldd`` (every library it needs, its Qt helpers' too, and which are not
found) and loaded with ``dlopen``; :func:`window_starts` opens a ``QGuiApplication`` in a child
process, where Qt's abort cannot take the caller down. ``workstation doctor`` reports it all;
the window checks the libraries before it starts.

No Qt import at module level: the check must run where Qt cannot.
"""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

LDD_TIMEOUT_S = 20.0
START_TIMEOUT_S = 30.0

DEBIAN_PACKAGES = {
    "libxcb-icccm.so.4": "libxcb-icccm4",
    "libxcb-keysyms.so.1": "libxcb-keysyms1",
    "libxcb-cursor.so.0": "libxcb-cursor0",
    "libxcb-image.so.0": "libxcb-image0",
    "libxcb-render-util.so.0": "libxcb-render-util0",
    "libxcb-util.so.1": "libxcb-util1",
    "libxcb-randr.so.0": "libxcb-randr0",
    "libxcb-shape.so.0": "libxcb-shape0",
    "libxcb-shm.so.0": "libxcb-shm0",
    "libxcb-sync.so.1": "libxcb-sync1",
    "libxcb-xfixes.so.0": "libxcb-xfixes0",
    "libxcb-render.so.0": "libxcb-render0",
    "libxcb-xkb.so.1": "libxcb-xkb1",
    "libxcb-xinerama.so.0": "libxcb-xinerama0",
    "libxcb-xinput.so.0": "libxcb-xinput0",
    "libxcb-glx.so.0": "libxcb-glx0",
    "libxcb.so.1": "libxcb1",
    "libX11-xcb.so.1": "libx11-xcb1",
    "libX11.so.6": "libx11-6",
    "libxkbcommon-x11.so.0": "libxkbcommon-x11-0",
    "libxkbcommon.so.0": "libxkbcommon0",
    "libSM.so.6": "libsm6",
    "libICE.so.6": "libice6",
    "libwayland-client.so.0": "libwayland-client0",
    "libwayland-cursor.so.0": "libwayland-cursor0",
    "libwayland-egl.so.1": "libwayland-egl1",
    "libEGL.so.1": "libegl1",
    "libGL.so.1": "libgl1",
    "libOpenGL.so.0": "libopengl0",
    "libfontconfig.so.1": "libfontconfig1",
    "libfreetype.so.6": "libfreetype6",
    "libdbus-1.so.3": "libdbus-1-3",
    "libglib-2.0.so.0": "libglib2.0-0",
}
"""The Debian/Ubuntu package of each system library Qt's Linux platform plugins need (what
``scripts/setup.sh`` installs)."""

_NOT_FOUND = re.compile(r"^\s*(\S+)\s+=>\s+not found\s*$", re.MULTILINE)


@dataclass(frozen=True, slots=True)
class QtPlatformReport:
    """What ``doctor --json`` prints as ``qt``."""

    version: str | None
    """PySide6's version; None where it is not installed."""
    platform: str
    """The platform plugin the window would use (``xcb``, ``wayland``, ``offscreen`` …)."""
    plugin: str
    """Its file; empty where it was not found."""
    platform_plugin_ok: bool
    """The plugin and every library it needs load."""
    missing_libraries: list[str] = field(default_factory=list)
    """Libraries the plugin needs that the system lacks (``libxcb-icccm.so.4`` …)."""
    packages: list[str] = field(default_factory=list)
    """The packages that bring them (Debian/Ubuntu names), where known."""
    message: str = ""
    """What is wrong, in plain words (empty when the plugin loads)."""
    window_starts: bool | None = None
    """A ``QGuiApplication`` started on that platform in a child process (a display is
    there and accepts it); None where not tried."""
    start_message: str = ""

    def as_dict(self) -> dict[str, object]:
        return asdict(self)

    @property
    def fix(self) -> str:
        """The command that installs what is missing, or empty."""
        if not self.packages:
            return ""
        return "sudo apt-get install " + " ".join(self.packages)


def default_platform(env: dict[str, str] | None = None) -> str:
    """The platform Qt picks: ``QT_QPA_PLATFORM`` (its first choice), else wayland in a
    Wayland session, else xcb."""
    env = dict(os.environ) if env is None else env
    chosen = env.get("QT_QPA_PLATFORM", "").split(";")[0].split(":")[0].strip()
    if chosen:
        return chosen
    if env.get("WAYLAND_DISPLAY") and env.get("XDG_SESSION_TYPE") == "wayland":
        return "wayland"
    return "xcb"


def qt_version() -> str | None:
    import importlib.metadata as metadata

    for dist in ("PySide6-Essentials", "PySide6"):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return None


def plugin_folders(env: dict[str, str] | None = None) -> list[Path]:
    """Where Qt looks for platform plugins: ``QT_QPA_PLATFORM_PLUGIN_PATH`` first, then Qt's
    own plugin folder (asked of QtCore, which loads without a platform)."""
    env = dict(os.environ) if env is None else env
    out = [Path(p) for p in env.get("QT_QPA_PLATFORM_PLUGIN_PATH", "").split(os.pathsep) if p]
    try:
        from PySide6.QtCore import QLibraryInfo
    except ImportError:
        return out
    out.append(Path(QLibraryInfo.path(QLibraryInfo.LibraryPath.PluginsPath)) / "platforms")
    return out


def find_plugin(platform: str, env: dict[str, str] | None = None) -> Path | None:
    for folder in plugin_folders(env):
        candidate = folder / f"libq{platform}.so"
        if candidate.is_file():
            return candidate
    return None


def missing_from_ldd(text: str) -> list[str]:
    """The ``=> not found`` libraries of ``ldd`` output, each once, in order."""
    seen: list[str] = []
    for name in _NOT_FOUND.findall(text):
        if name not in seen:
            seen.append(name)
    return seen


def qt_library_folder() -> str:
    """Where Qt's own libraries are (a plugin outside Qt's tree finds them loaded in the app)."""
    try:
        from PySide6.QtCore import QLibraryInfo
    except ImportError:
        return ""
    return QLibraryInfo.path(QLibraryInfo.LibraryPath.LibrariesPath)


def missing_libraries(plugin: Path) -> list[str]:
    """What ``ldd`` cannot find for ``plugin`` (and the Qt libraries it needs); empty where
    ldd is not there (``dlopen`` still tells)."""
    ldd = shutil.which("ldd")
    if ldd is None:
        return []
    env = dict(os.environ)
    qt_libs = qt_library_folder()
    if qt_libs:
        env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in (qt_libs, env.get("LD_LIBRARY_PATH", "")) if p)
    try:
        out = subprocess.run([ldd, str(plugin)], capture_output=True, text=True, timeout=LDD_TIMEOUT_S,
                             check=False, env=env)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return missing_from_ldd(out.stdout + out.stderr)


def check_platform(platform: str | None = None, env: dict[str, str] | None = None) -> QtPlatformReport:
    """Find the platform plugin, list the libraries it lacks, and ``dlopen`` it."""
    platform = platform or default_platform(env)
    version = qt_version()
    if version is None:
        return QtPlatformReport(None, platform, "", False, message="PySide6 is not installed")
    plugin = find_plugin(platform, env)
    if plugin is None:
        folders = ", ".join(str(p) for p in plugin_folders(env)) or "nowhere"
        return QtPlatformReport(version, platform, "", False,
                                message=f"Qt has no '{platform}' platform plugin (looked in {folders})")
    missing = missing_libraries(plugin)
    load_error = ""
    try:
        import PySide6.QtGui  # noqa: F401 - Qt's libraries are loaded in the app when it loads a plugin

        ctypes.CDLL(str(plugin))
    except (OSError, ImportError) as exc:
        load_error = str(exc)
        if not missing:  # no ldd: take the name dlopen gives
            name = load_error.split(":", 1)[0].strip()
            if name and name != str(plugin):
                missing = [name]
    packages = [DEBIAN_PACKAGES[m] for m in missing if m in DEBIAN_PACKAGES]
    ok = not missing and not load_error
    message = ""
    if missing:
        message = (f"Qt's {platform} platform plugin cannot load: the system lacks "
                   f"{', '.join(missing)}")
    elif load_error:
        message = f"Qt's {platform} platform plugin cannot load: {load_error}"
    return QtPlatformReport(version, platform, str(plugin), ok, missing, packages, message)


def window_starts(report: QtPlatformReport, env: dict[str, str] | None = None) -> QtPlatformReport:
    """Start a ``QGuiApplication`` on the report's platform in a child process (Qt aborts a
    process that cannot, so not in this one); not tried where the plugin cannot load or this
    is a frozen bundle (its executable is not a Python)."""
    from dataclasses import replace

    if not report.platform_plugin_ok or getattr(sys, "frozen", False):
        return report
    child_env = {**(dict(os.environ) if env is None else env), "QT_QPA_PLATFORM": report.platform}
    try:
        out = subprocess.run([sys.executable, "-m", "workstation.ui.qt_platform", "--start"],
                             capture_output=True, text=True, timeout=START_TIMEOUT_S, env=child_env, check=False)
    except subprocess.TimeoutExpired:
        return replace(report, window_starts=False, start_message=f"Qt did not start within {START_TIMEOUT_S:g} s")
    if out.returncode == 0:
        return replace(report, window_starts=True)
    lines = [ln.strip() for ln in (out.stderr or out.stdout).splitlines() if ln.strip()]
    why = next((ln for ln in lines if "could not connect to display" in ln or "Could not" in ln), "")
    why = why or (lines[0] if lines else f"exit status {out.returncode}")
    return replace(report, window_starts=False, start_message=f"Qt could not start on {report.platform}: {why}")


def preflight_message(report: QtPlatformReport) -> str:
    """The window's refusal when the plugin cannot load: what is missing and how to get it."""
    text = report.message or f"Qt's {report.platform} platform plugin cannot load"
    if report.fix:
        text += f"\n  install them: {report.fix} (or run scripts/setup.sh, which does it where it can)"
    text += "\n  see `workstation doctor`; QT_QPA_PLATFORM=offscreen runs the window without a display"
    return text


if __name__ == "__main__":
    if "--start" in sys.argv:  # the child of window_starts
        from PySide6.QtGui import QGuiApplication

        app = QGuiApplication(sys.argv[:1])
        sys.exit(0)
    if "--packages" in sys.argv:  # scripts/setup.sh: the packages a platform's plugin lacks
        wanted = sys.argv[sys.argv.index("--packages") + 1:] or [default_platform()]
        lacking = {pkg for name in wanted for pkg in check_platform(name).packages}
        print(" ".join(sorted(lacking)))
        sys.exit(0)
