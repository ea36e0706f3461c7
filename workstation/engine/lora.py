"""LoRA adapters on the managed engine: a folder of adapters served from the start, and
adapters loaded at run time through vLLM's own API.

- ``engine.lora_dir``: every sub-folder with an ``adapter_config.json`` (what ``peft`` saves)
  is served under the sub-folder's name (``--lora-modules NAME=PATH``);
- ``engine.lora_runtime``: the engine also takes ``POST /v1/load_lora_adapter`` (vLLM's
  ``VLLM_ALLOW_RUNTIME_LORA_UPDATING``), so a session can name an adapter by its folder;
- either turns LoRA on (``--enable-lora``, ``--max-loras``, ``--max-lora-rank`` sized from
  the adapters' ranks). The flags go through the launcher's base arguments and are validated
  against the installed engine like every flag.

A session names its adapter; its requests then name the adapter as the model (vLLM's way),
so the engine applies it, and the meters count its tokens apart.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import httpx

from workstation.core.endpoints import Endpoint
from workstation.core.errors import UserError

RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
"""The ranks vLLM's ``--max-lora-rank`` takes."""
RUNTIME_ENV = "VLLM_ALLOW_RUNTIME_LORA_UPDATING"
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


@dataclass(frozen=True, slots=True)
class Adapter:
    name: str
    path: Path
    rank: int
    base_model: str = ""


def read_adapter(path: Path, name: str | None = None) -> Adapter:
    """One adapter folder (``adapter_config.json`` + weights), or :class:`UserError`."""
    try:
        config = json.loads((path / "adapter_config.json").read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserError(f"{path} is not a LoRA adapter (no adapter_config.json)") from None
    except (OSError, ValueError) as exc:
        raise UserError(f"cannot read the adapter config in {path}: {exc}") from None
    if str(config.get("peft_type", "LORA")).upper() != "LORA":
        raise UserError(f"{path} is a {config.get('peft_type')} adapter; the engine serves LoRA adapters")
    if not any(path.glob("adapter_model.*")):
        raise UserError(f"{path} has no adapter weights (adapter_model.safetensors)")
    label = name or path.name
    if not NAME.match(label):
        raise UserError(f"adapter name {label!r}: letters, digits, '.', '_' and '-' only")
    rank = int(config.get("r") or 8)
    return Adapter(label, path.resolve(), rank, str(config.get("base_model_name_or_path") or ""))


def find_adapters(folder: Path | str) -> tuple[Adapter, ...]:
    """The adapters in ``folder`` (one per sub-folder with an ``adapter_config.json``)."""
    root = Path(folder).expanduser()
    if not root.is_dir():
        raise UserError(f"engine.lora_dir {root} is not a folder")
    return tuple(read_adapter(p) for p in sorted(root.iterdir())
                 if p.is_dir() and (p / "adapter_config.json").is_file())


def rank_for(ranks: list[int]) -> int:
    """The smallest rank vLLM takes that holds every adapter's (16, vLLM's default, when none)."""
    need = max(ranks, default=16)
    for rank in RANKS:
        if rank >= need:
            return rank
    raise UserError(f"an adapter has rank {need}; the engine takes at most {RANKS[-1]}")


def lora_args(adapters: tuple[Adapter, ...], *, runtime: bool, max_loras: int, max_rank: int | None) -> list[str]:
    """The ``vllm serve`` flags for these adapters (empty: LoRA stays off)."""
    if not adapters and not runtime:
        return []
    args = ["--enable-lora", "--max-loras", str(max(1, max_loras)),
            "--max-lora-rank", str(max_rank or rank_for([a.rank for a in adapters]))]
    if adapters:
        args += ["--lora-modules", *(f"{a.name}={a.path}" for a in adapters)]
    return args


def parse_adapter(value: str | None) -> tuple[str | None, str | None]:
    """``--adapter NAME`` or ``NAME=PATH`` (the folder made absolute)."""
    if not value:
        return None, None
    name, _, path = value.partition("=")
    if not name.strip():
        raise UserError(f"--adapter {value!r}: give the adapter's name (NAME or NAME=PATH)")
    return name.strip(), str(Path(path).expanduser().resolve()) if path else None


async def served_adapters(http: httpx.AsyncClient, endpoint: Endpoint) -> dict[str, str]:
    """The adapters an endpoint serves now: name → folder (vLLM lists them with a ``parent``)."""
    headers = endpoint.auth_headers()
    try:
        response = await http.get(endpoint.v1 + "/models", headers=headers)
        data = response.json().get("data") or [] if response.status_code == 200 else []
    except (httpx.HTTPError, ValueError, AttributeError):
        return {}
    return {str(c.get("id")): str(c.get("root") or "") for c in data if isinstance(c, dict) and c.get("parent")}


async def ensure_adapter(http: httpx.AsyncClient, endpoint: Endpoint, name: str, path: str | None = None) -> None:
    """Make sure ``endpoint`` serves the adapter ``name``: already served, or loaded now from
    ``path`` through ``/v1/load_lora_adapter``. A clear :class:`UserError` otherwise."""
    served = await served_adapters(http, endpoint)
    if name in served:
        return
    if not path:
        known = ", ".join(sorted(served)) or "none"
        raise UserError(f"the engine {endpoint.name} serves no LoRA adapter '{name}' (it serves: {known})",
                        hint="put it in engine.lora_dir, or give its folder so it is loaded at run time")
    adapter = read_adapter(Path(path).expanduser(), name)
    headers = endpoint.auth_headers()
    try:
        response = await http.post(endpoint.base_url + "/v1/load_lora_adapter", headers=headers,
                                   json={"lora_name": adapter.name, "lora_path": str(adapter.path)})
    except httpx.HTTPError as exc:
        raise UserError(f"cannot load the adapter '{name}' into {endpoint.name}: {exc}") from None
    if response.status_code == 404:
        raise UserError(f"the engine {endpoint.name} does not load adapters at run time",
                        hint="set engine.lora_runtime = true (the managed engine then allows it)")
    if response.status_code != 200 and "already been loaded" not in response.text:
        raise UserError(f"the engine refused the adapter '{name}': HTTP {response.status_code} "
                        f"{response.text[:300]}")
