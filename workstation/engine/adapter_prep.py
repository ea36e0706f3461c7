"""The built-in LoRA adapter ``tiny-lora``: a small real adapter for the tiny model, built
with ``peft`` in the engine's Python (which has torch and transformers).

peft is not installed into the engine's environment: its wheel (pure Python) is downloaded
into the cache and unpacked there, and only the build script sees it on ``PYTHONPATH``.
The adapter lands in ``<data>/models/adapters/tiny-lora`` (a folder ``engine.lora_dir`` can
point at) with the same manifest as the models, so a broken one is rebuilt.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import zipfile
from pathlib import Path

from workstation.config import Settings
from workstation.engine.environment import SCRIPTS_DIR, EngineInstall
from workstation.engine.models import MANIFEST, ModelError, Progress, model_dir, resolve_model

PEFT_PACKAGE = "peft==0.21.2"
BUILTIN_ADAPTERS = {"tiny-lora": "tiny"}
"""Built-in adapter → the built-in model it is for."""


def adapters_dir(settings: Settings) -> Path:
    return settings.models_dir / "adapters"


def adapter_dir(settings: Settings, name: str) -> Path:
    return adapters_dir(settings) / name


def _peft_site(settings: Settings, engine: EngineInstall, say: Progress) -> Path:
    site = settings.cache_dir / "site" / PEFT_PACKAGE.replace("==", "-")
    if (site / "peft" / "__init__.py").is_file():
        return site
    wheels = settings.cache_dir / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    say(f"  downloading {PEFT_PACKAGE} from the package index (its wheel only, not installed)")
    out = subprocess.run(
        [str(engine.python), "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
         "--progress-bar", "off", "-q", "-d", str(wheels), PEFT_PACKAGE],
        capture_output=True, text=True,
    )
    version = PEFT_PACKAGE.split("==")[1]
    candidates = sorted(wheels.glob(f"peft-{version}-*.whl"))
    if out.returncode != 0 or not candidates:
        raise ModelError(f"could not download {PEFT_PACKAGE}: {out.stderr.strip()[-300:]}")
    tmp = site.with_name(site.name + f".tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    with zipfile.ZipFile(candidates[-1]) as wheel:
        wheel.extractall(tmp)
    os.replace(tmp, site)
    return site


def prepare_adapter(settings: Settings, engine: EngineInstall, name: str, *, progress: Progress | None = None,
                    force: bool = False) -> Path:
    """Build a built-in adapter (idempotent; rebuilds a broken one); returns its folder."""
    say = progress or (lambda _m: None)
    if name not in BUILTIN_ADAPTERS:
        raise ModelError(f"unknown built-in adapter '{name}' (choose from {', '.join(BUILTIN_ADAPTERS)})")
    path = adapter_dir(settings, name)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.parent / f".{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        problem = _problem(path)
        if problem is None and not force:
            say(f"adapter '{name}' is ready in {path}")
            return path
        base = resolve_model(settings, BUILTIN_ADAPTERS[name])  # refuses a missing base model
        say(f"[{name}] building a LoRA adapter for '{base.served_name}' with peft in the engine's Python")
        site = _peft_site(settings, engine, say)
        log = settings.logs_dir / f"adapter-{name}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(site), "TOKENIZERS_PARALLELISM": "false"}
        with open(log, "w", encoding="utf-8") as fh:
            rc = subprocess.run([str(engine.python), str(SCRIPTS_DIR / "build_tiny_lora.py"), str(model_dir(
                settings, base.served_name)), str(path)], stdout=fh, stderr=subprocess.STDOUT, env=env).returncode
        if rc != 0:
            tail = log.read_text(errors="replace").strip().splitlines()[-3:]
            raise ModelError(f"adapter preparation failed (exit {rc}): {' | '.join(tail)} (log: {log})")
        problem = _problem(path)
        if problem is not None:
            raise ModelError(f"adapter '{name}' came out broken: {problem}")
        say(f"adapter '{name}' ready in {path}")
        return path


def _problem(path: Path) -> str | None:
    """What is wrong with a prepared adapter folder (each file against its manifest), or None."""
    import hashlib
    import json

    try:
        files = json.loads((path / MANIFEST).read_text())["files"]
    except (OSError, ValueError, KeyError, TypeError):
        return f"{path} has no valid {MANIFEST}"
    for needed in ("adapter_config.json", "adapter_model.safetensors"):
        if needed not in files:
            return f"{path} has no {needed}"
    for name, meta in files.items():
        try:
            data = (path / name).read_bytes()
        except OSError:
            return f"{path / name} is missing"
        if len(data) != meta.get("bytes") or hashlib.sha256(data).hexdigest() != meta.get("sha256"):
            return f"{path / name} does not match its manifest (corrupt)"
    return None
