"""The licence inventory written into the bundle (``licenses/`` next to the executable).

Three kinds of parts end up in the bundle, each with its own paper trail:

1. Python distributions: their ``*.dist-info`` folders (licence files included) are copied
   into ``_internal/`` by the spec; this lists them with the licence their metadata declares.
2. Native libraries that came inside wheels (Qt in PySide6, FFmpeg and its codecs in PyAV,
   OpenBLAS in NumPy): listed with their licences and where their sources are.
3. Native libraries PyInstaller collected from the build machine's system (OpenSSL, glib,
   libstdc++, …): where ``dpkg`` knows the package, its Debian copyright file is copied.
"""

from __future__ import annotations

import email
import os
import shutil
import subprocess
from pathlib import Path

# Native parts of wheels, by file-name prefix -> (component, SPDX licence, where the source is).
WHEEL_NATIVE = {
    "libQt6": ("Qt 6 (from PySide6-Essentials)", "LGPL-3.0-only",
               "https://download.qt.io/official_releases/qt/"),
    "libicu": ("ICU (from PySide6-Essentials)", "Unicode-3.0", "https://github.com/unicode-org/icu"),
    "libpyside6": ("PySide6", "LGPL-3.0-only", "https://code.qt.io/cgit/pyside/pyside-setup.git/"),
    "libshiboken6": ("Shiboken6", "LGPL-3.0-only", "https://code.qt.io/cgit/pyside/pyside-setup.git/"),
    "libavcodec": ("FFmpeg libavcodec (from PyAV)", "LGPL-3.0-or-later", "https://github.com/PyAV-Org/pyav-ffmpeg"),
    "libavformat": ("FFmpeg libavformat (from PyAV)", "LGPL-3.0-or-later", "https://github.com/PyAV-Org/pyav-ffmpeg"),
    "libavutil": ("FFmpeg libavutil (from PyAV)", "LGPL-3.0-or-later", "https://github.com/PyAV-Org/pyav-ffmpeg"),
    "libavdevice": ("FFmpeg libavdevice (from PyAV)", "LGPL-3.0-or-later", "https://github.com/PyAV-Org/pyav-ffmpeg"),
    "libavfilter": ("FFmpeg libavfilter (from PyAV)", "LGPL-3.0-or-later", "https://github.com/PyAV-Org/pyav-ffmpeg"),
    "libswscale": ("FFmpeg libswscale (from PyAV)", "LGPL-3.0-or-later", "https://github.com/PyAV-Org/pyav-ffmpeg"),
    "libswresample": ("FFmpeg libswresample (from PyAV)", "LGPL-3.0-or-later", "https://github.com/PyAV-Org/pyav-ffmpeg"),
    "libx264": ("x264 H.264 encoder (from PyAV)", "GPL-2.0-or-later", "https://code.videolan.org/videolan/x264"),
    "libx265": ("x265 HEVC encoder (from PyAV)", "GPL-2.0-or-later", "https://bitbucket.org/multicoreware/x265_git"),
    "libvpx": ("libvpx VP8/VP9 (from PyAV)", "BSD-3-Clause", "https://chromium.googlesource.com/webm/libvpx"),
    "libSvtAv1Enc": ("SVT-AV1 encoder (from PyAV)", "BSD-3-Clause-Clear", "https://gitlab.com/AOMediaCodec/SVT-AV1"),
    "libdav1d": ("dav1d AV1 decoder (from PyAV)", "BSD-2-Clause", "https://code.videolan.org/videolan/dav1d"),
    "libopus": ("Opus (from PyAV)", "BSD-3-Clause", "https://opus-codec.org/"),
    "libmp3lame": ("LAME (from PyAV)", "LGPL-2.0-or-later", "https://lame.sourceforge.io/"),
    "libopencore-amr": ("opencore-amr (from PyAV)", "Apache-2.0", "https://sourceforge.net/projects/opencore-amr/"),
    "libwebp": ("libwebp (from PyAV)", "BSD-3-Clause", "https://chromium.googlesource.com/webm/libwebp"),
    "libsharpyuv": ("libwebp sharpyuv (from PyAV)", "BSD-3-Clause", "https://chromium.googlesource.com/webm/libwebp"),
    "libgnutls": ("GnuTLS (from PyAV)", "LGPL-2.1-or-later", "https://gnutls.org/"),
    "libnettle": ("Nettle (from PyAV)", "LGPL-3.0-or-later OR GPL-2.0-or-later", "https://www.lysator.liu.se/~nisse/nettle/"),
    "libhogweed": ("Nettle hogweed (from PyAV)", "LGPL-3.0-or-later OR GPL-2.0-or-later", "https://www.lysator.liu.se/~nisse/nettle/"),
    "libgmp": ("GMP (from PyAV)", "LGPL-3.0-or-later OR GPL-2.0-or-later", "https://gmplib.org/"),
    "libunistring": ("libunistring (from PyAV)", "LGPL-3.0-or-later OR GPL-2.0-or-later", "https://www.gnu.org/software/libunistring/"),
    "libvpl": ("oneVPL dispatcher (from PyAV)", "MIT", "https://github.com/intel/libvpl"),
    "libasound": ("ALSA library (from PyAV)", "LGPL-2.1-or-later", "https://www.alsa-project.org/"),
    "libdrm": ("libdrm (from PyAV)", "MIT", "https://gitlab.freedesktop.org/mesa/drm"),
    "libxcb": ("libxcb (from PyAV)", "MIT", "https://xcb.freedesktop.org/"),
    "libXau": ("libXau (from PyAV)", "MIT", "https://gitlab.freedesktop.org/xorg/lib/libxau"),
    "libpython3": ("CPython", "PSF-2.0", "https://www.python.org/downloads/source/"),
    "libscipy_openblas": ("OpenBLAS (from NumPy)", "BSD-3-Clause", "https://github.com/OpenMathLib/OpenBLAS"),
    "libgfortran": ("libgfortran (from NumPy)", "GPL-3.0-or-later WITH GCC-exception-3.1", "https://gcc.gnu.org/"),
    "libquadmath": ("libquadmath (from NumPy)", "LGPL-2.1-or-later", "https://gcc.gnu.org/"),
}


def _dist_license(metadata_file: Path) -> str:
    msg = email.message_from_string(metadata_file.read_text(encoding="utf-8", errors="replace"))
    expression = msg.get("License-Expression")
    if expression:
        return expression.strip()
    declared = (msg.get("License") or "").strip()
    if declared and len(declared) < 80 and "\n" not in declared:
        return declared
    classifiers = [c.split("::")[-1].strip() for c in msg.get_all("Classifier") or []
                   if c.startswith("License ::")]
    return "; ".join(classifiers) or (declared.splitlines()[0][:80] if declared else "see its licence files")


def python_distributions(internal: Path) -> list[tuple[str, str, str, str]]:
    """(name, version, licence, dist-info folder) for each distribution in the bundle."""
    rows = []
    for info in sorted(internal.glob("*.dist-info")) + sorted(internal.glob("*.egg-info")):
        meta = info / ("METADATA" if info.suffix == ".dist-info" else "PKG-INFO")
        if not meta.is_file():
            continue
        msg = email.message_from_string(meta.read_text(encoding="utf-8", errors="replace"))
        rows.append((msg.get("Name", info.stem), msg.get("Version", "?"), _dist_license(meta),
                     info.name))
    return rows


def native_libraries(internal: Path) -> tuple[list[tuple[str, str, str, str]], list[Path]]:
    """Native libraries that came inside wheels (licence known), and the others (system)."""
    wheel_dirs = ("PySide6/", "shiboken6/", "av.libs/", "numpy.libs/")
    known, system = [], []
    for lib in sorted(p for p in internal.rglob("lib*.so*") if p.is_file() and not p.is_symlink()):
        rel = lib.relative_to(internal).as_posix()
        match = next((v for k, v in WHEEL_NATIVE.items() if lib.name.startswith(k)), None)
        if "/plugins/" in rel:
            known.append((rel, "Qt 6 plugin (from PySide6-Essentials)", "LGPL-3.0-only",
                          "https://download.qt.io/official_releases/qt/"))
        elif match is not None and (rel.startswith(wheel_dirs) or lib.name.startswith("libpython3")):
            known.append((rel, *match))
        else:
            system.append(lib)
    return known, system


def _debian_packages(libs: list[Path], internal: Path, sources: dict[str, str]) -> dict[str, list[str]]:
    """Map libraries to the Debian packages that own the files they were copied from."""
    if not libs or shutil.which("dpkg") is None:
        return {}
    out = subprocess.run(["dpkg", "-S", *(f"*/{lib.name}" for lib in libs)],
                         capture_output=True, text=True, timeout=120)
    owners: dict[str, str] = {}  # real path of a packaged file -> package
    for line in out.stdout.splitlines():  # "libssl3:amd64: /usr/lib/x86_64-linux-gnu/libssl.so.3"
        package, _sep, path = line.partition(": ")
        if path and ", " not in package:
            owners.setdefault(os.path.realpath(path.strip()), package.split(":")[0].strip())
    packages: dict[str, list[str]] = {}
    for lib in libs:
        rel = lib.relative_to(internal).as_posix()
        source = sources.get(rel)
        package = owners.get(os.path.realpath(source)) if source else None
        if package is not None:
            packages.setdefault(package, []).append(rel)
    return packages


def write_inventory(
    bundle_dir: Path, *, gpl_codecs: str, app_license: str, sources: dict[str, str] | None = None
) -> Path:
    """Write ``licenses/THIRD-PARTY.md`` (and Debian copyright files) into the bundle.

    ``sources`` maps a library's path inside ``_internal/`` to the file it was copied from.
    """
    internal = bundle_dir / "_internal"
    out_dir = bundle_dir / "licenses"
    out_dir.mkdir(exist_ok=True)
    lines = [
        "# What this bundle contains, and under which licences",
        "",
        f"workstation itself: {app_license}. The bundle's executable is PyInstaller's bootloader",
        "(GPL-2.0-or-later WITH Bootloader-exception: it may carry any program) and CPython 3.11",
        "(PSF-2.0). The LGPL libraries below are separate shared files in `_internal/`: you may",
        "replace any of them with your own build of the same interface.",
        "",
    ]
    if gpl_codecs == "stub":
        lines += [
            "**No GPL code:** PyAV's wheel ships the GPL encoders x264 (H.264) and x265 (HEVC). In",
            "this bundle `libx264-*.so*` and `libx265-*.so*` are stand-ins built from",
            "`packaging/codec_stubs/` (Apache-2.0) with no encoder, so H.264/HEVC encoding fails",
            "cleanly and recordings use VP9 (libvpx) or AV1 (SVT-AV1). Everything else is",
            "permissive or LGPL.",
            "",
        ]
    else:
        lines += [
            "**Contains GPL code:** this bundle keeps PyAV's x264 and x265 encoders",
            "(GPL-2.0-or-later). Distributing it means distributing the whole under the GPL",
            "(version 3 or later, which Apache-2.0 and LGPL-3.0 code may join) and offering the",
            "corresponding sources of those libraries (https://github.com/PyAV-Org/pyav-ffmpeg).",
            "",
        ]
    lines += ["## Python distributions", "", "| name | version | licence | metadata and licence files |",
              "|---|---|---|---|"]
    for name, version, lic, folder in python_distributions(internal):
        lines.append(f"| {name} | {version} | {lic} | `_internal/{folder}/` |")
    known, system = native_libraries(internal)
    lines += ["", "## Native libraries that came inside wheels (and CPython)", "",
              "| file | component | licence | source |", "|---|---|---|---|"]
    for rel, component, lic, source in known:
        if gpl_codecs == "stub" and component.startswith(("x264", "x265")):
            component, lic, source = (f"stand-in for {component.split(' (')[0]}, no encoder",
                                      "Apache-2.0", "packaging/codec_stubs/")
        lines.append(f"| `{rel}` | {component} | {lic} | {source} |")
    packages = _debian_packages(system, internal, sources or {})
    lines += ["", "## Libraries collected from the build machine's system", ""]
    if packages:
        copyrights = out_dir / "debian"
        copyrights.mkdir(exist_ok=True)
        lines += ["Their Debian copyright files are in `licenses/debian/`.", "",
                  "| Debian package | files |", "|---|---|"]
        for package, files in sorted(packages.items()):
            source = Path("/usr/share/doc") / package / "copyright"
            if source.is_file():
                shutil.copyfile(source, copyrights / f"{package}.copyright")
            lines.append(f"| {package} | {', '.join(f'`{f}`' for f in files)} |")
    unmapped = sorted({lib.relative_to(internal).as_posix() for lib in system}
                      - {f for files in packages.values() for f in files})
    if unmapped:
        lines += ["", "Not mapped to a package (see the build machine's distribution): "
                  + ", ".join(f"`{f}`" for f in unmapped)]
    path = out_dir / "THIRD-PARTY.md"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path
