"""How big the engine's batch, context and memory share should be, from the model and the GPU.

Pure arithmetic; the inputs come in as data (the model's ``config.json``, its weight files'
size, what the driver says is free, how many sessions the user runs). The launcher turns the
result into ``--max-num-seqs``, ``--max-model-len`` and ``--gpu-memory-utilization`` for the
profiles that ask for them (see ``core/profiles.py``).

The rules, each with its reason:

- **Memory share**: vLLM takes ``gpu_memory_utilization × total`` and refuses to start when
  that is more than is free. We take 90 % (vLLM's own default) unless something else already
  holds memory on the card, then what is free less 1 GiB of margin, so a second engine or a
  desktop session never makes the start fail.
- **Engines sharing a GPU** (K of them, a profile's ``engines_per_gpu``): each takes
  ``0.90 / K`` of the card (rounded down to whole hundredths) and is sized for
  ``ceil(sessions / K)`` sessions — its batch, its context — since the fleet spreads the
  sessions over the engines evenly. vLLM's start-up check is per process (``free >=
  utilization x total``), so the K-th engine must pass it while the first K-1 hold theirs.
  They do: the K shares claim at most 90 % of the card, and at least ``FREE_MARGIN_BYTES``
  per engine is left besides (the share is lowered where 10 % of the card is less), which
  covers what each process holds outside vLLM's budget (its CUDA context, ~0.5 GiB). So
  with ``u`` the share, ``T`` the card and ``c <= margin`` a context, the K-th sees at least
  ``T - (K-1)(uT + c) - c = uT + [T(1 - Ku) - Kc] >= uT`` free. The host starts them one
  after another (``engine/host.py``), and each is told how many still start after it:
  where something else already holds memory, it takes an equal part of what is free for
  itself and those (less a margin each), so the last one still fits.
- **Context**: the model's own window, unless the KV cache that fits cannot hold every
  session at that length at once; then the longest length that can (whole 256-token blocks,
  never below 4,096 or the model's window if smaller). An agent fleet keeps every session's
  history resident; a context no session can fill only shrinks the prefix cache.
- **Batch**: twice the sequences the sessions keep in flight, as a power of two in [16, 1024].
  Each session has one request in flight, of ``sequences_per_session`` sequences (the guided
  protocol draws 6 drafts at once, ``n=6``); the rest is room for the meters' probes, a
  benchmark or a human in another client. Counting requests alone sized 64 for 32 guided
  sessions: on an H200 the replay of their captured traffic (up to 192 sequences) then
  queued behind the cap, at 0.70x vLLM's own 1,024 in output tok/s and TTFT p95 972 ms
  against 204 ms (2026-12-02). vLLM would size its CUDA-graph captures from this (2x, at most 512 tokens); the
  CUDA profile pins the capture size to 512 instead, because agent steps mix prefill chunks
  into the decodes and a step without a graph costs the host more (see core/profiles.py).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

GIB = 1 << 30
DEFAULT_UTILIZATION = 0.90
FREE_MARGIN_BYTES = 1 * GIB
ACTIVATION_RESERVE_BYTES = 3 * GIB
"""Peak activations, CUDA graphs and the CUDA context: what vLLM's profiling run usually
finds for small and mid-size models (measured 2.1-2.6 GiB for SmolLM2 on an H200)."""
MIN_CONTEXT = 4096
BLOCK_TOKENS = 256
_DTYPE_BYTES = {"float32": 4, "float": 4, "bfloat16": 2, "float16": 2, "half": 2, "fp8": 1, "float8_e4m3fn": 1}


@dataclass(frozen=True, slots=True)
class GpuMemory:
    """One visible GPU, as the driver reports it."""

    index: int
    name: str
    total_bytes: int
    free_bytes: int


@dataclass(frozen=True, slots=True)
class ModelShape:
    """What sizing needs of a model (``None`` where its config does not say)."""

    kv_bytes_per_token: int | None
    max_position_embeddings: int | None
    weight_bytes: int | None

    @classmethod
    def from_config(cls, config: Mapping[str, Any] | None, *, weight_bytes: int | None = None) -> ModelShape:
        if not config:
            return cls(None, None, weight_bytes)
        cfg = config.get("text_config") if isinstance(config.get("text_config"), Mapping) else config
        layers = _int(cfg.get("num_hidden_layers"))
        heads = _int(cfg.get("num_attention_heads"))
        kv_heads = _int(cfg.get("num_key_value_heads")) or heads
        head_dim = _int(cfg.get("head_dim"))
        hidden = _int(cfg.get("hidden_size"))
        if head_dim is None and hidden and heads:
            head_dim = hidden // heads
        attention_layers = _attention_layers(cfg, layers)
        dtype = str(cfg.get("torch_dtype") or cfg.get("dtype") or config.get("torch_dtype") or "bfloat16")
        dtype_bytes = _DTYPE_BYTES.get(dtype.replace("torch.", ""), 2)
        kv = None
        if attention_layers and kv_heads and head_dim:
            kv = 2 * attention_layers * kv_heads * head_dim * dtype_bytes
        return cls(kv, _int(cfg.get("max_position_embeddings")), weight_bytes)


@dataclass(frozen=True, slots=True)
class Sizing:
    """The sized flags' values (``values()`` fills a profile's placeholders) and why."""

    max_num_seqs: int
    max_model_len: int | None
    gpu_memory_utilization: float | None
    kv_tokens: int | None
    notes: tuple[str, ...] = ()

    def values(self) -> dict[str, str]:
        out = {"max_num_seqs": str(self.max_num_seqs)}
        if self.max_model_len is not None:
            out["max_model_len"] = str(self.max_model_len)
        if self.gpu_memory_utilization is not None:
            out["gpu_memory_utilization"] = f"{self.gpu_memory_utilization:.2f}"
        return out


class SizingError(ValueError):
    """The model cannot be served on this GPU at all (too little free memory)."""


def _int(value: Any) -> int | None:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 else None


def _attention_layers(cfg: Mapping[str, Any], layers: int | None) -> int | None:
    """Layers that keep a KV cache: all of them, unless the config marks Mamba/linear ones."""
    pattern = cfg.get("hybrid_override_pattern")
    if isinstance(pattern, str) and pattern:
        return pattern.count("*") or None
    for key in ("layer_types", "layers_block_type"):
        kinds = cfg.get(key)
        if isinstance(kinds, Sequence) and not isinstance(kinds, str) and kinds:
            return sum(1 for k in kinds if "attention" in str(k).lower() and "linear" not in str(k).lower()) or None
    return layers


def batch_for(sessions: int) -> int:
    """Twice the sessions, a power of two in [16, 1024]."""
    want = max(1, sessions) * 2
    return int(min(1024, max(16, 2 ** math.ceil(math.log2(want)))))


def memory_share(engines_on_device: int, total_bytes: int | None = None) -> float:
    """Each engine's memory share when ``engines_on_device`` share a GPU of ``total_bytes``:
    ``0.90 / K``, less where 10 % of the card leaves under ``FREE_MARGIN_BYTES`` per engine
    (see the module docstring), in whole hundredths rounded down (the flag's own format must
    not round it up)."""
    k = max(1, engines_on_device)
    if k == 1:
        return DEFAULT_UTILIZATION
    share = DEFAULT_UTILIZATION / k
    if total_bytes:
        share = min(share, (total_bytes - k * FREE_MARGIN_BYTES) / (k * total_bytes))
    return _hundredths(share)


def _hundredths(value: float) -> float:
    return math.floor(round(100 * value, 6)) / 100


def size_engine(model: ModelShape, gpus: Sequence[GpuMemory], *, sessions: int,
                sequences_per_session: int = 1, model_max_len: int | None = None,
                engines_on_device: int = 1, place: int = 1) -> Sizing:
    """Sizing for a CUDA engine on ``gpus`` (tensor-parallel across all of them when several).

    ``model_max_len``: a cap the app already knows (the built-in models' 8k); otherwise the
    model's ``max_position_embeddings``; ``sequences_per_session``: the ``n`` of the sessions'
    requests (the batch holds them all; the context is sized per session, whose sequences
    share their prompt's blocks); ``engines_on_device``: engines sharing these GPUs, this one
    included, of which this one starts ``place``-th (those before it hold their share
    already): it takes its share of the memory and of the ``sessions``. Without GPU facts (no
    driver here, or a dry run) only the batch is sized (and a shared engine's share) and vLLM
    keeps its own memory and context defaults."""
    k = max(1, engines_on_device)
    per_engine = math.ceil(max(1, sessions) / k) if k > 1 else sessions
    seqs = batch_for(per_engine * max(1, sequences_per_session))
    window = min(filter(None, (model_max_len, model.max_position_embeddings)), default=None)
    shared = [f"one of {k} engines on its GPU: memory share {{util:.2f}}, sized for {per_engine} of "
              f"{sessions} sessions"] if k > 1 else []
    if not gpus:
        if k == 1:
            return Sizing(seqs, window, None, None, ("no GPU facts: memory share and context left to vLLM",))
        # vLLM's own 90 % would make the second engine's start fail: the share stands
        util_blind = memory_share(k)
        return Sizing(seqs, window, util_blind, None,
                      (*(n.format(util=util_blind) for n in shared), "no GPU facts: context left to vLLM"))
    total = min(g.total_bytes for g in gpus)
    free = min(g.free_bytes for g in gpus)
    notes: list[str] = []
    share = memory_share(k, total)
    util = share
    left = max(1, k - max(1, place) + 1)  # this engine and the ones that start after it
    if free < left * (util * total + FREE_MARGIN_BYTES) - FREE_MARGIN_BYTES / 2:
        util = _hundredths((free - left * FREE_MARGIN_BYTES) / (left * total))
        held = "already in use" if k == 1 else "in use besides this GPU's engines"
        notes.append(f"{(total - free) / GIB:.1f} GiB of {total / GIB:.0f} GiB {held}: "
                     f"memory share {util:.2f} instead of {share:.2f}")
    notes[:0] = [n.format(util=util) for n in shared]
    weights = (model.weight_bytes or 0) / len(gpus)
    budget = util * total - weights - ACTIVATION_RESERVE_BYTES
    if util <= 0.05 or budget <= 0:
        raise SizingError(
            f"the GPU has {free / GIB:.1f} GiB free of {total / GIB:.0f} GiB; the model's weights "
            f"({weights / GIB:.1f} GiB per GPU) and working memory do not fit"
            + (f" in a share for each of {k} engines" if k > 1 else "")
        )
    if model.kv_bytes_per_token is None:
        notes.append("KV cache size per token unknown (config.json incomplete): context left to vLLM")
        return Sizing(seqs, window, util, None, tuple(notes))
    kv_tokens = int(budget * len(gpus) // model.kv_bytes_per_token)
    context = window
    if window is not None and kv_tokens < window * max(1, per_engine):
        fit = kv_tokens // max(1, per_engine)
        context = max(min(window, MIN_CONTEXT), fit - fit % BLOCK_TOKENS)
        notes.append(f"context {context:,} instead of {window:,}: the KV cache ({kv_tokens:,} tokens) "
                     f"holds {per_engine} sessions at that length")
    return Sizing(seqs, context, util, kv_tokens, tuple(notes))
