"""Build the desktop bundle: one folder, Linux x86_64, with PyInstaller.

    .venv/bin/pip install -e '.[dev]'              # PyInstaller is in the dev extra
    .venv/bin/python packaging/build_bundle.py     # -> dist/workstation/workstation

Options: ``--gpl-codecs keep`` leaves PyAV's GPL encoders (x264, x265) in the bundle, which
makes the bundle GPL as a whole (docs/install.md); the default replaces them with stand-ins
built from ``packaging/codec_stubs/`` (needs a C compiler and binutils' ``nm``).
``--archive`` also writes ``dist/workstation-<version>-linux-x86_64.tar.gz``.

The engine is not in the bundle: on first use the bundled app creates the engine's own
environment from a system Python 3.11 (``workstation engine setup``), as a pip install does.

Prints a short table and ends with one JSON line (bundle_mb, build_s, files, gpl_codecs, …).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tarfile
import time
from datetime import UTC, datetime
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SPEC = HERE / "workstation.spec"
STUB_SOURCES = {"x264": HERE / "codec_stubs" / "x264_stub.c", "x265": HERE / "codec_stubs" / "x265_stub.c"}
# The symbol that carries each encoder's ABI number, and the macro the stub takes it in.
ABI_SYMBOL = {"x264": (re.compile(r"^x264_encoder_open_(\d+)$"), "X264_BUILD"),
              "x265": (re.compile(r"^x265_api_get_(\d+)$"), "X265_BUILD")}
APP_LICENSE = "Apache-2.0"
MANIFEST_NAME = "bundle-binaries.json"  # written by the spec: [bundle path, copied from]

sys.path.insert(0, str(HERE))
from bundle_licenses import write_inventory  # noqa: E402


class BuildError(Exception):
    """The bundle cannot be built; the message says why and what to do."""


def _run(argv: list[str], **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, check=False, **kwargs)


def _elf_symbols(path: Path, *, defined: bool) -> set[str]:
    flag = "--defined-only" if defined else "--undefined-only"
    out = _run(["nm", "-D", flag, str(path)])
    if out.returncode != 0:
        raise BuildError(f"nm cannot read {path}: {out.stderr.strip()}")
    return {line.split()[-1].split("@")[0] for line in out.stdout.splitlines() if line.strip()}


def _needed_libraries(path: Path) -> list[str]:
    from PyInstaller.depend import bindepend

    return sorted(Path(name).name for name, _resolved in bindepend.get_imports(str(path)))


def build_codec_stubs(work: Path) -> list[Path]:
    """Compile stand-ins for the GPL encoders libavcodec links, named exactly as PyAV's."""
    import av

    libs_dir = Path(av.__file__).resolve().parent.parent / "av.libs"
    avcodec = next(iter(sorted(libs_dir.glob("libavcodec*.so*"))), None)
    if avcodec is None:
        raise BuildError(f"PyAV's libavcodec not found in {libs_dir}")
    for tool in ("cc", "nm"):
        if shutil.which(tool) is None:
            raise BuildError(
                f"`{tool}` is needed to build the codec stand-ins (Debian: apt-get install gcc "
                "binutils), or build with --gpl-codecs keep (the bundle is then GPL)"
            )
    wanted = {sym for sym in _elf_symbols(avcodec, defined=False) if sym.startswith(("x264_", "x265_"))}
    needed = _needed_libraries(avcodec)
    out_dir = work / "codec-stubs"
    shutil.rmtree(out_dir, ignore_errors=True)
    out_dir.mkdir(parents=True)
    stubs = []
    for codec, source in STUB_SOURCES.items():
        soname = next((n for n in needed if n.startswith(f"lib{codec}")), None)
        symbols = {s for s in wanted if s.startswith(f"{codec}_")}
        if soname is None:
            continue  # this PyAV does not link that encoder at all
        pattern, macro = ABI_SYMBOL[codec]
        abi = next((m.group(1) for s in symbols if (m := pattern.match(s))), None)
        if abi is None:
            raise BuildError(f"cannot tell {codec}'s ABI number from libavcodec's symbols {sorted(symbols)}")
        stub = out_dir / soname
        compiled = _run(["cc", "-shared", "-fPIC", "-O2", "-Wall", "-Werror", f"-D{macro}={abi}",
                         f"-Wl,-soname,{soname}", "-o", str(stub), str(source)])
        if compiled.returncode != 0:
            raise BuildError(f"compiling {source.name} failed:\n{compiled.stderr}")
        missing = symbols - _elf_symbols(stub, defined=True)
        if missing:
            raise BuildError(
                f"{source.name} lacks symbols this PyAV's libavcodec needs: {sorted(missing)} — "
                "add them to the stub (returning failure) or build with --gpl-codecs keep"
            )
        stubs.append(stub)
    return stubs


def run_pyinstaller(dist: Path, work: Path, gpl_codecs: str, stubs: list[Path], clean: bool) -> float:
    env = {**os.environ, "WORKSTATION_BUNDLE_GPL_CODECS": gpl_codecs,
           "WORKSTATION_BUNDLE_CODEC_STUBS": os.pathsep.join(str(s) for s in stubs),
           "WORKSTATION_BUNDLE_MANIFEST": str(work / MANIFEST_NAME)}
    argv = [sys.executable, "-m", "PyInstaller", "--noconfirm", "--log-level", "WARN",
            "--distpath", str(dist), "--workpath", str(work / "pyinstaller"), str(SPEC)]
    if clean:
        argv.insert(3, "--clean")
    started = time.monotonic()
    out = _run(argv, env=env, cwd=ROOT)
    elapsed = time.monotonic() - started
    log = work / "pyinstaller.log"
    log.write_text(out.stdout + out.stderr)
    if out.returncode != 0:
        raise BuildError(f"PyInstaller failed (log: {log}):\n{(out.stdout + out.stderr)[-3000:]}")
    # A part of the app that does not import at build time would be silently left out.
    broken = [line for line in (out.stdout + out.stderr).splitlines()
              if "Failed to collect submodules for 'workstation" in line]
    if broken:
        raise BuildError("parts of the app do not import, the bundle would lack them:\n" + "\n".join(broken))
    return elapsed


def check_bundle(bundle: Path, gpl_codecs: str, stubs: list[Path]) -> None:
    internal = bundle / "_internal"
    required = [bundle / "workstation", internal / "workstation/engine/scripts/vllm_entry.py",
                internal / "workstation/resources/icons/app/workstation-512.png"]
    missing = [str(p.relative_to(bundle)) for p in required if not p.exists()]
    if missing:
        raise BuildError(f"the bundle lacks {missing}")
    if gpl_codecs == "stub":
        for stub in stubs:
            copies = [p for p in internal.rglob(stub.name) if p.is_file()]
            digest = hashlib.sha256(stub.read_bytes()).hexdigest()
            if not copies or any(hashlib.sha256(p.read_bytes()).hexdigest() != digest for p in copies):
                raise BuildError(f"{stub.name} in the bundle is not the stand-in")
    if list(internal.rglob("libqgtk3.so")):
        raise BuildError("the GTK3 platform-theme plugin is still in the bundle")


def bundle_stats(bundle: Path) -> tuple[int, int]:
    files = [p for p in bundle.rglob("*") if p.is_file() and not p.is_symlink()]
    return sum(p.stat().st_size for p in files), len(files)


def write_archive(bundle: Path, version: str) -> Path:
    archive = bundle.parent / f"workstation-{version}-linux-{platform.machine()}.tar.gz"
    with tarfile.open(archive, "w:gz", compresslevel=6) as tar:
        tar.add(bundle, arcname="workstation")
    return archive


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpl-codecs", choices=["stub", "keep"], default="stub",
                        help="stub (default): no GPL encoders, VP9/AV1 only; keep: GPL bundle")
    parser.add_argument("--dist", type=Path, default=ROOT / "dist", help="output folder (default dist/)")
    parser.add_argument("--work", type=Path, default=ROOT / "build" / "bundle", help="build scratch folder")
    parser.add_argument("--clean", action="store_true", help="ignore PyInstaller's cache")
    parser.add_argument("--archive", action="store_true", help="also write a .tar.gz of the bundle")
    args = parser.parse_args(argv)
    if sys.platform != "linux" or platform.machine() != "x86_64":
        print("build_bundle: the bundle is built for Linux x86_64 only", file=sys.stderr)
        return 2
    try:
        import PyInstaller  # noqa: F401
    except ImportError:
        print("build_bundle: PyInstaller is missing: pip install -e '.[dev]'", file=sys.stderr)
        return 2
    import workstation

    dist, work = args.dist.resolve(), args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    try:
        started = time.monotonic()
        stubs = build_codec_stubs(work) if args.gpl_codecs == "stub" else []
        pyinstaller_s = run_pyinstaller(dist, work, args.gpl_codecs, stubs, args.clean)
        bundle = dist / "workstation"
        check_bundle(bundle, args.gpl_codecs, stubs)
        sources = dict(json.loads((work / MANIFEST_NAME).read_text()))
        write_inventory(bundle, gpl_codecs=args.gpl_codecs, app_license=APP_LICENSE, sources=sources)
        info = {
            "version": workstation.__version__,
            "gpl_codecs": args.gpl_codecs,
            "python": platform.python_version(),
            "built_utc": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        }
        (bundle / "BUNDLE-INFO.json").write_text(json.dumps(info, indent=2) + "\n")
        size_bytes, files = bundle_stats(bundle)
        archive = write_archive(bundle, workstation.__version__) if args.archive else None
        build_s = time.monotonic() - started
    except BuildError as exc:
        print(f"build_bundle: {exc}", file=sys.stderr)
        return 1
    result = {
        "bundle": str(bundle.relative_to(ROOT)) if bundle.is_relative_to(ROOT) else str(bundle),
        "bundle_mb": round(size_bytes / 1e6, 1),
        "files": files,
        "build_s": round(build_s, 1),
        "pyinstaller_s": round(pyinstaller_s, 1),
        "gpl_codecs": args.gpl_codecs,
        "archive_mb": round(archive.stat().st_size / 1e6, 1) if archive else None,
    }
    print(f"{'bundle':<14}{result['bundle']}")
    print(f"{'size':<14}{result['bundle_mb']} MB in {files} files")
    print(f"{'build':<14}{result['build_s']} s (PyInstaller {result['pyinstaller_s']} s)")
    print(f"{'GPL codecs':<14}{'replaced by stand-ins' if args.gpl_codecs == 'stub' else 'kept (GPL bundle)'}")
    if archive:
        print(f"{'archive':<14}{archive.name}, {result['archive_mb']} MB")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
