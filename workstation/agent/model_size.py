"""How big a served model is, in parameters: from its ``config.json`` (the layer shapes),
else from its weight files, else from a size in its name (``SmolLM2-135M``, ``Qwen2.5-7B``).

The agent picks its protocol by this number (small models get the guided protocol). An
estimate within a few percent is plenty for that; the embedded SmolLM2 comes out at
134.5M, as transformers counts it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

_NAME_SIZE = re.compile(r"(?<![A-Za-z0-9.])(\d+(?:\.\d+)?)\s*([MBmb])(?![A-Za-z])")
_DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float8_e4m3fn": 1, "int8": 1}


def _int(cfg: dict[str, Any], *keys: str) -> int | None:
    for key in keys:
        value = cfg.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def parameters_from_config(cfg: dict[str, Any]) -> int | None:
    """An estimate from a Hugging Face config of a decoder-only transformer (dense or MoE)."""
    if isinstance(cfg.get("text_config"), dict):
        cfg = {**cfg, **cfg["text_config"]}
    hidden = _int(cfg, "hidden_size", "d_model", "n_embd")
    layers = _int(cfg, "num_hidden_layers", "n_layer", "num_layers")
    vocab = _int(cfg, "vocab_size")
    if hidden is None or layers is None or vocab is None:
        return None
    heads = _int(cfg, "num_attention_heads", "n_head") or max(1, hidden // 64)
    kv_heads = _int(cfg, "num_key_value_heads") or heads
    head_dim = _int(cfg, "head_dim") or hidden // heads
    inner = _int(cfg, "intermediate_size", "ffn_dim", "n_inner") or 4 * hidden
    attention = 2 * hidden * heads * head_dim + 2 * hidden * kv_heads * head_dim
    experts = _int(cfg, "num_experts", "num_local_experts", "n_routed_experts")
    if experts:
        expert_inner = _int(cfg, "moe_intermediate_size") or inner
        shared = _int(cfg, "n_shared_experts", "num_shared_experts") or 0
        mlp = 3 * hidden * expert_inner * (experts + shared) + hidden * experts
    else:
        mlp = 3 * hidden * inner
    embeddings = vocab * hidden * (1 if cfg.get("tie_word_embeddings", True) else 2)
    return embeddings + layers * (attention + mlp + 2 * hidden) + hidden


def parameters_from_name(name: str) -> int | None:
    """``SmolLM2-135M-Instruct`` → 135,000,000; ``Qwen2.5-Coder-1.5B`` → 1,500,000,000."""
    found = _NAME_SIZE.findall(name)
    if not found:
        return None
    number, unit = found[-1]
    return int(float(number) * (1e9 if unit.lower() == "b" else 1e6))


def parameters_from_weights(folder: Path, cfg: dict[str, Any]) -> int | None:
    """Size of the ``*.safetensors`` files over the bytes per parameter of the config's dtype."""
    files = list(folder.glob("*.safetensors"))
    if not files:
        return None
    per = _DTYPE_BYTES.get(str(cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16"), 2)
    return sum(f.stat().st_size for f in files) // per


def model_parameters(folder: str | Path | None, name: str = "") -> int | None:
    """Parameters of the model in ``folder`` (a local model directory), or by ``name``."""
    if folder:
        path = Path(folder)
        config_file = path / "config.json"
        if config_file.is_file():
            try:
                cfg = json.loads(config_file.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                cfg = {}
            if isinstance(cfg, dict):
                found = parameters_from_config(cfg) or parameters_from_weights(path, cfg)
                if found:
                    return found
    return parameters_from_name(name) if name else None
