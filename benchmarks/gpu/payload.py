"""Build what a GPU test machine without network needs, in parts that fit its transfer limit.

    python benchmarks/gpu/payload.py [--out .gpu-payload] [--limit-mib 64]

Run it here, where the package registries answer. It gathers, by name, with pip:

- **vLLM 0.26.0** for CPython 3.12 on x86-64 Linux (the newest vLLM that pins the test
  machine's torch 2.11), slimmed of what a Hopper GPU serving a dense model never loads
  (:data:`SLIM_DROP`: FlashAttention 2, the MoE kernels, the Rust frontend, DeepGEMM for
  other Pythons, Blackwell attention);
- every distribution vLLM and the app need that the machine's image lacks
  (``image_packages.txt``), resolved from the wheels' own metadata for that target;
- the embedded model's GGUF file (as ``workstation model prepare smollm2`` left it in the
  data dir), which the machine turns into the served model with the app's own converter;
- bubblewrap's binary from Debian, so agents' commands run sandboxed there too, and git
  (used there only where the image has none: the fleet's worktrees need it).

All of it goes into one archive (the Python files xz-compressed), cut into parts so that each
part plus the project's working tree fits one transfer (``--limit-mib``, 64 MiB by default).
``plan.json`` lists the parts, their checksums and the commands, one device call per part
(``benchmarks/gpu/README.md``). The planning arithmetic is :func:`plan_parts`; it is
unit-tested without a GPU.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import lzma
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from fnmatch import fnmatch
from pathlib import Path

try:
    from packaging.markers import default_environment
    from packaging.requirements import Requirement
    from packaging.specifiers import SpecifierSet
    from packaging.utils import canonicalize_name
    from packaging.version import Version
except ImportError:  # the app's own environment lacks it; the development one has it
    raise SystemExit("payload.py needs the `packaging` library: set up the development environment "
                     "(scripts/test.sh, or `.venv/bin/python -m pip install -e '.[dev]'`)") from None

ROOT = Path(__file__).resolve().parents[2]
MIB = 1 << 20
VLLM_VERSION = "0.26.0"
TARGET_PYTHON = "3.12"
TARGET_MARKERS = {
    **default_environment(),
    "python_version": "3.12", "python_full_version": "3.12.3", "implementation_name": "cpython",
    "platform_python_implementation": "CPython", "platform_machine": "x86_64", "sys_platform": "linux",
    "platform_system": "Linux", "os_name": "posix",
}
# pip matches manylinux tags exactly: name every glibc the wheels we need are built for.
PLATFORM_TAGS = [f"manylinux_2_{n}_x86_64" for n in range(39, 16, -1)] + ["manylinux2014_x86_64",
                                                                        "manylinux1_x86_64", "linux_x86_64"]
# What the app itself needs on the machine: its own dependencies (pyproject.toml, read at build
# time, so a new one cannot be forgotten here: pyflakes was, once, and the GPU run's set-up
# failed on its import), less what a headless harness never imports (Qt, the charts, video),
# plus the GGUF reader the model's preparation uses.
HEADLESS_SKIP = frozenset({"pyside6-essentials", "qasync", "pyqtgraph", "av"})
MODEL_PREPARE_REQUIREMENTS = ("gguf",)


def app_requirements(pyproject: Path = ROOT / "pyproject.toml") -> list[str]:
    """The app's dependencies that apply on the target and that the harness imports."""
    import tomllib

    declared = tomllib.loads(pyproject.read_text())["project"]["dependencies"]
    out = []
    for line in declared:
        req = Requirement(line)
        if canonicalize_name(req.name) in HEADLESS_SKIP:
            continue
        if req.marker is not None and not req.marker.evaluate(TARGET_MARKERS):
            continue
        req.marker = None
        out.append(str(req))
    return [*out, *MODEL_PREPARE_REQUIREMENTS]

SLIM_DROP = (
    "vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so",  # FA2: Hopper uses FA3
    "vllm/_moe_C_stable_libtorch.abi3.so",  # MoE kernels: an optional import, SmolLM2 is dense
    "vllm/vllm-rs",  # the Rust frontend binary, not used by `vllm serve`
    "vllm/third_party/deep_gemm/_C.cpython-31[013456789]-*",  # DeepGEMM for other Pythons
    "vllm/third_party/deep_gemm/include/*",  # its JIT headers (FP8 MoE GEMMs)
    "vllm/third_party/fmha_sm100/*",  # Blackwell attention
)
# vLLM requires these, but serving a dense bf16 model on Hopper never loads them (FlashInfer,
# CUTLASS DSL, TileLang and friends are optional kernel back-ends, the CUDA compiler toolchain
# is for them, video decoding is for multimodal input): not carried, their needs not followed.
# Without FlashInfer the engine needs VLLM_USE_FLASHINFER_SAMPLER=0 (the suite sets it).
NOT_CARRIED = frozenset({
    "flashinfer-python", "nvidia-cutlass-dsl", "nvidia-cutlass-dsl-libs-base", "nvidia-cutlass-dsl-libs-core",
    "nvidia-cutlass-dsl-libs-cu12", "nvidia-cutlass-dsl-libs-cu13", "nvidia-nvvm", "nvidia-cuda-nvcc",
    "nvidia-cuda-cccl", "nvidia-cuda-crt", "nvidia-cuda-nvdisasm", "nvidia-cudnn-frontend", "tilelang",
    "quack-kernels", "humming-kernels", "tokenspeed-mla", "cuda-tile", "z3-solver", "pynvvideocodec",
    "torchcodec", "fastsafetensors", "cuda-python",
})
# Upper bounds where the newest release of one requirement conflicts with a pin of another
# (this resolver takes each name once, the newest that its first requirer allows; the
# consistency check below refuses any payload where that went wrong).
PINS = {
    # vLLM 0.26.0 pins apache-tvm-ffi==0.1.10; xgrammar 0.2.8+ needs a newer one (its import
    # then fails in the API server: load_lib_module() got an unexpected keyword argument).
    "xgrammar": "<0.2.8",
}
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


# --------------------------------------------------------------------------- planning (pure)
@dataclass(frozen=True, slots=True)
class Part:
    index: int
    offset: int
    size: int

    @property
    def name(self) -> str:
        return f"part-{self.index:02d}"


def plan_parts(total_bytes: int, *, tree_bytes: int, limit_bytes: int = 64 * MIB,
               margin_bytes: int = 2 * MIB) -> list[Part]:
    """Cut ``total_bytes`` into parts that each fit one transfer next to the working tree.

    Every call carries the whole working tree (``tree_bytes``) plus one part; ``margin_bytes``
    covers what changes in the tree between now and the call."""
    room = limit_bytes - tree_bytes - margin_bytes
    if room < MIB:
        raise ValueError(f"the working tree ({tree_bytes / MIB:.1f} MiB) leaves no room for a part "
                         f"under the {limit_bytes / MIB:.0f} MiB transfer limit")
    if total_bytes <= 0:
        return []
    count = -(-total_bytes // room)
    size = -(-total_bytes // count)  # equal parts: the last call carries as much as the others
    return [Part(i + 1, i * size, min(size, total_bytes - i * size)) for i in range(count)]


def slim_member(name: str) -> bool:
    """True where a file of the vLLM wheel is left out of the payload."""
    return any(fnmatch(name, pattern) or name == pattern for pattern in SLIM_DROP)


def requirements_to_follow(requires: Iterable[str], extras: Iterable[str]) -> list[Requirement]:
    """A wheel's ``Requires-Dist`` lines that apply on the target, for the extras asked for."""
    out = []
    wanted = set(extras) | {""}
    for line in requires:
        req = Requirement(line)
        if req.marker is None or any(req.marker.evaluate({**TARGET_MARKERS, "extra": e}) for e in wanted):
            out.append(req)
    return out


def read_names(path: Path) -> set[str]:
    return {canonicalize_name(line.strip()) for line in path.read_text().splitlines()
            if line.strip() and not line.startswith("#")}


# --------------------------------------------------------------------------- gathering
def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def pip_download(specs: Sequence[str], dest: Path) -> None:
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--disable-pip-version-check",
           "--progress-bar", "off", "-q", "--python-version", TARGET_PYTHON, "--implementation", "cp", "--abi", "cp312",
           "--abi", "abi3", "--abi", "none", "-d", str(dest)]
    for tag in PLATFORM_TAGS:
        cmd += ["--platform", tag]
    cmd += ["--platform", "any", *specs]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        lines = [ln for ln in out.stderr.splitlines() if not ln.startswith("WARNING: Location")]
        raise SystemExit(f"pip could not download {' '.join(specs)}:\n" + "\n".join(lines[-8:]))


def _wheel_for(dest: Path, name: str) -> Path | None:
    for wheel in dest.glob("*.whl"):
        if canonicalize_name(wheel.name.split("-")[0]) == canonicalize_name(name):
            return wheel
    return None


def wheel_metadata(wheel: Path) -> tuple[str, str, list[str]]:
    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        text = z.read(meta).decode()
    name = version = ""
    requires = []
    for line in text.splitlines():
        if not line.strip():
            break  # headers end at the first blank line
        key, _, value = line.partition(": ")
        if key == "Name":
            name = value
        elif key == "Version":
            version = value
        elif key == "Requires-Dist":
            requires.append(value)
    return name, version, requires


def resolve(roots: Sequence[str], present: set[str], dest: Path) -> dict[str, Path]:
    """Download every distribution the roots need that the image lacks, level by level."""
    chosen: dict[str, Path] = {}
    extras_done: dict[str, set[str]] = {}
    queue = [Requirement(r) for r in roots]
    while queue:
        todo: dict[str, Requirement] = {}
        revisit: list[tuple[str, set[str]]] = []
        for req in queue:
            name = canonicalize_name(req.name)
            if name in present:
                continue
            if name in chosen:
                new = set(req.extras) - extras_done.get(name, set())
                if new:
                    revisit.append((name, new))
                continue
            if name in todo:
                todo[name].extras |= req.extras
                continue
            todo[name] = req
        if todo:
            _say(f"  downloading {len(todo)}: {', '.join(sorted(todo))}")
            pip_download([pinned(r) for r in todo.values()], dest)
        queue = []
        for name, req in todo.items():
            wheel = _wheel_for(dest, name)
            if wheel is None:
                raise SystemExit(f"pip reported success but left no wheel for {name}")
            chosen[name] = wheel
            extras_done[name] = set(req.extras)
            queue += requirements_to_follow(wheel_metadata(wheel)[2], req.extras)
        for name, extras in revisit:
            extras_done[name] |= extras
            queue += [r for r in requirements_to_follow(wheel_metadata(chosen[name])[2], extras)
                      if r.marker is not None]
    return chosen


def pinned(req: Requirement) -> str:
    """What to ask pip for: the requirement's own bounds and :data:`PINS`' (no extras, no marker)."""
    spec = SpecifierSet(str(req.specifier)) & SpecifierSet(PINS.get(canonicalize_name(req.name), ""))
    return f"{req.name}{spec}"


def conflicts(chosen: dict[str, Path], present: set[str]) -> list[str]:
    """Every requirement of a chosen distribution that the chosen version of another misses
    (what the image provides is not checked: its versions are not known here)."""
    meta = {name: wheel_metadata(w) for name, w in chosen.items()}
    versions = {name: Version(m[1]) for name, m in meta.items()}
    out = []
    for name, (_n, _v, requires) in sorted(meta.items()):
        for req in requirements_to_follow(requires, ()):
            other = canonicalize_name(req.name)
            if other in versions and not req.specifier.contains(versions[other], prereleases=True):
                out.append(f"{name} needs {req.name}{req.specifier}, but {other} {versions[other]} was chosen")
    return out


def install_wheel(wheel: Path, site: Path, *, drop: bool = False) -> int:
    """Unpack a wheel into ``site`` as pip --target would (purelib/platlib data folded in)."""
    written = 0
    with zipfile.ZipFile(wheel) as z:
        for info in z.infolist():
            name = info.filename
            if info.is_dir() or (drop and slim_member(name)):
                continue
            parts = name.split("/")
            if parts[0].endswith(".data"):
                if len(parts) < 3 or parts[1] not in ("purelib", "platlib"):
                    continue  # scripts, headers: not needed to import
                name = "/".join(parts[2:])
            target = site / name
            target.parent.mkdir(parents=True, exist_ok=True)
            with z.open(info) as src, open(target, "wb") as dst:
                shutil.copyfileobj(src, dst, MIB)
            mode = (info.external_attr >> 16) & 0o777
            if mode:
                target.chmod(mode)
            written += info.file_size
    return written


def compress_folder(folder: Path, archive: Path) -> None:
    """``folder`` as a .tar.xz: with the xz program on every core where there is one (several
    times faster on 430 MiB), else with Python's lzma."""
    if shutil.which("xz") and shutil.which("tar"):
        with open(archive, "wb") as out:
            tar = subprocess.Popen(["tar", "-C", str(folder.parent), "-cf", "-", folder.name], stdout=subprocess.PIPE)
            xz = subprocess.run(["xz", "-T0", "-6", "-c"], stdin=tar.stdout, stdout=out, check=False)
            assert tar.stdout is not None
            tar.stdout.close()
            if tar.wait() != 0 or xz.returncode != 0:
                raise SystemExit(f"could not compress {folder}")
        return
    with lzma.open(archive, "wb", preset=6) as xz_file, tarfile.open(fileobj=xz_file, mode="w") as tar_file:
        tar_file.add(folder, arcname=folder.name)


def tree_bytes(root: Path) -> int:
    """What one device call carries of the working tree (tracked + untracked-not-ignored)."""
    out = subprocess.run(["git", "-C", str(root), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                         capture_output=True, check=True)
    total = 0
    for rel in out.stdout.split(b"\0"):
        if rel:
            with_path = root / os.fsdecode(rel)
            if with_path.is_file():
                total += with_path.stat().st_size
    return total


def fetch_debian(work: Path, package: str) -> Path | None:
    """A Debian package unpacked under ``work`` (None where apt-get is not there)."""
    if shutil.which("apt-get") is None or shutil.which("dpkg") is None:
        return None
    debs = work / "debs"
    debs.mkdir(exist_ok=True)
    out = subprocess.run(["apt-get", "download", package], cwd=debs, capture_output=True, text=True)
    deb = next(iter(debs.glob(f"{package}_*.deb")), None)
    if out.returncode != 0 or deb is None:
        _say(f"  no {package} package: {out.stderr.strip()[-200:]}")
        return None
    root = work / f"{package}-root"
    subprocess.run(["dpkg", "-x", str(deb), str(root)], check=True)
    return root


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(MIB), b""):
            digest.update(block)
    return digest.hexdigest()


def build(out: Path, *, limit_mib: int, gguf: Path, keep_work: bool = False, margin_mib: float = 2.0) -> dict:
    t0 = time.monotonic()
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="gpu-payload-", dir=out))
    wheels, site = work / "wheels", work / "site"
    wheels.mkdir()
    site.mkdir()
    present = read_names(Path(__file__).with_name("image_packages.txt")) | NOT_CARRIED
    _say(f"resolving vLLM {VLLM_VERSION} and the app's needs for CPython {TARGET_PYTHON} (x86-64 Linux)")
    chosen = resolve([f"vllm=={VLLM_VERSION}", *app_requirements()], present, wheels)
    problems = conflicts(chosen, present)
    if problems:
        raise SystemExit("the resolved set is inconsistent (add an upper bound to PINS):\n  " + "\n  ".join(problems))
    unpacked = 0
    for name, wheel in sorted(chosen.items()):
        unpacked += install_wheel(wheel, site, drop=(name == "vllm"))
    _say(f"  {len(chosen)} distributions, {unpacked / MIB:.0f} MiB unpacked after slimming vLLM")
    bundle_dir = work / "bundle"
    bundle_dir.mkdir()
    site_archive = bundle_dir / "site.tar.xz"
    _say("compressing the Python files (xz)")
    compress_folder(site, site_archive)
    shutil.copy2(gguf, bundle_dir / GGUF_NAME)
    bwrap_root = fetch_debian(work, "bubblewrap")
    bwrap = bwrap_root / "usr" / "bin" / "bwrap" if bwrap_root else None
    if bwrap is not None:
        shutil.copy2(bwrap, bundle_dir / "bwrap")
    # git, for machines whose image has none (the fleet's worktrees); used only where git is missing
    git_root = fetch_debian(work, "git")
    if git_root is not None:
        with lzma.open(bundle_dir / "git.tar.xz", "wb", preset=6) as xz, tarfile.open(fileobj=xz, mode="w") as tar:
            tar.add(git_root / "usr" / "bin" / "git", arcname="git/bin/git")
            tar.add(git_root / "usr" / "lib" / "git-core", arcname="git/git-core")
    versions = {name: wheel_metadata(w)[1] for name, w in sorted(chosen.items())}
    (bundle_dir / "manifest.json").write_text(json.dumps({"vllm": VLLM_VERSION, "python": TARGET_PYTHON,
                                                          "distributions": versions}, indent=1))
    bundle = work / "bundle.tar"
    with tarfile.open(bundle, "w") as tar:
        for item in sorted(bundle_dir.iterdir()):
            tar.add(item, arcname=item.name)
    total = bundle.stat().st_size
    tree = tree_bytes(ROOT)
    parts = plan_parts(total, tree_bytes=tree, limit_bytes=limit_mib * MIB, margin_bytes=int(margin_mib * MIB))
    for stale in out.glob("p*"):
        if stale.is_dir() and stale.name[1:].isdigit():
            shutil.rmtree(stale)
    with open(bundle, "rb") as src:
        for part in parts:
            folder = out / f"p{part.index}"
            folder.mkdir()
            src.seek(part.offset)
            (folder / part.name).write_bytes(src.read(part.size))
    plan = {
        "created": time.strftime("%Y-%m-%d %H:%M:%S"), "vllm": VLLM_VERSION, "python": TARGET_PYTHON,
        "bundle_bytes": total, "bundle_sha256": sha256(bundle), "tree_bytes": tree, "limit_bytes": limit_mib * MIB,
        "parts": [{"name": p.name, "folder": f"p{p.index}", "bytes": p.size} for p in parts],
        "members": {item.name: item.stat().st_size for item in sorted(bundle_dir.iterdir())},
        "distributions": versions, "bwrap": bwrap is not None, "git": git_root is not None,
        "seconds": round(time.monotonic() - t0, 1),
    }
    (out / "plan.json").write_text(json.dumps(plan, indent=1) + "\n")
    if not keep_work:
        shutil.rmtree(work)
    return plan


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / ".gpu-payload")
    ap.add_argument("--limit-mib", type=int, default=64, help="what one transfer may carry, working tree included")
    ap.add_argument("--margin-mib", type=float, default=2.0,
                    help="room left in each transfer for what the working tree gains before the calls "
                         "(1 is enough where nothing lands between the build and the last call)")
    ap.add_argument("--gguf", type=Path, help=f"the model file (default: the data dir's cache/gguf/{GGUF_NAME})")
    ap.add_argument("--keep-work", action="store_true")
    args = ap.parse_args()
    gguf = args.gguf
    if gguf is None:
        sys.path.insert(0, str(ROOT))
        from workstation.config import load_settings

        gguf = load_settings().cache_dir / "gguf" / GGUF_NAME
    if not gguf.is_file():
        raise SystemExit(f"{gguf} is missing: run `workstation model prepare smollm2` first (it keeps the GGUF)")
    plan = build(args.out, limit_mib=args.limit_mib, gguf=gguf, keep_work=args.keep_work,
                 margin_mib=args.margin_mib)
    print(f"{'member':<34}{'MiB':>8}")
    for name, size in plan["members"].items():
        print(f"{name:<34}{size / MIB:>8.1f}")
    print(f"{'bundle':<34}{plan['bundle_bytes'] / MIB:>8.1f}  in {len(plan['parts'])} parts "
          f"(working tree {plan['tree_bytes'] / MIB:.1f} MiB per call)")
    print(json.dumps({k: plan[k] for k in ("vllm", "bundle_bytes", "tree_bytes", "parts", "seconds")}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
