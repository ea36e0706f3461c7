"""Check a profile against the installed engine, the model and the platform, in plain words.

Three sources of truth, each read from the real thing:

- the installed engine's ``vllm serve --help=all`` (flags differ between versions and builds);
- the model's ``config.json`` (Mamba flags only for models with Mamba/SSM layers, MTP only
  for models that carry a multi-token-prediction head — the keys vLLM itself reads);
- the platform (the CPU build forces async scheduling off, has no FlashInfer, sizes its KV
  cache in bytes, and resets a 16-bit SSM state to float32 for most backends).

``check_profile`` is pure (the help text and config come in as data) so every rule is
unit-tested; :func:`check_against_engine` gathers the real inputs.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from workstation.config import Settings
from workstation.core.profiles import (
    STAND_IN_VALUES,
    Profile,
    apply_changes,
    effective,
    required_traits,
    speculative_method,
    split_flags,
)
from workstation.engine.environment import EngineInstall, engine_help_text
from workstation.engine.flags import known_flags, unknown_flags
from workstation.engine.models import ModelSpec

# model_type values of models with Mamba / SSM / linear-attention layers (vLLM's IsHybrid
# and pure state-space models), for configs that carry no per-layer pattern
HYBRID_MODEL_TYPES = frozenset({
    "nemotron_h", "nemotron_h_puzzle", "jamba", "falcon_h1", "granitemoehybrid", "bamba",
    "zamba2", "plamo2", "mamba", "mamba2", "falcon_mamba", "qwen3_next", "qwen3_5", "qwen3_5_moe",
    "lfm2", "lfm2_moe", "minimax_text_01", "kimi_linear",
})
_SSM_LAYER_WORDS = ("mamba", "linear_attention", "ssm", "conv", "gated_delta", "deltanet")
_SSM_KEYS = ("mamba_d_state", "ssm_state_size", "mamba_expand", "mamba_num_heads", "mamba_d_conv")
MTP_KEYS = ("num_nextn_predict_layers", "mtp_num_hidden_layers")

# CPU defaults of the OpenAI server (vllm/engine/arg_utils.py, per rank)
CPU_DEFAULT_MAX_NUM_SEQS = 128
CPU_DEFAULT_MAX_NUM_BATCHED_TOKENS = 2048


class Severity(str, Enum):
    ERROR = "error"
    """The engine would refuse it, crash, or it cannot apply: do not launch."""
    WARNING = "warning"
    """It launches, but the flag does not do what its name says here."""
    NOTE = "note"
    """Worth knowing (start-up time, a platform detail)."""


@dataclass(frozen=True, slots=True)
class Finding:
    severity: Severity
    message: str
    flag: str | None = None

    def line(self) -> str:
        return f"{self.severity.value}: {self.message}"


@dataclass(frozen=True, slots=True)
class ModelTraits:
    name: str
    architecture: str
    """First entry of ``architectures`` (``?`` when unknown)."""
    model_type: str
    config_known: bool
    hybrid_mamba: bool
    mtp_layers: int
    max_position_embeddings: int | None = None
    vocab_size: int | None = None
    structured_outputs: bool | None = None
    """Whether the app's agents hold this model's replies to a schema (``structured_outputs``,
    the guided protocol of small models); None where that is not known."""

    def describe(self) -> str:
        if not self.config_known:
            return f"{self.name} (config.json not readable)"
        kind = "hybrid Mamba" if self.hybrid_mamba else "attention-only"
        mtp = f", {self.mtp_layers} MTP layer(s)" if self.mtp_layers else ", no MTP head"
        return f"{self.name} ({self.architecture}, {kind}{mtp})"


@dataclass(frozen=True, slots=True)
class CheckReport:
    profile: str
    platform: str
    engine_version: str
    model: ModelTraits
    args: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    findings: tuple[Finding, ...]

    @property
    def ok(self) -> bool:
        return not any(f.severity is Severity.ERROR for f in self.findings)

    def lines(self) -> list[str]:
        head = (f"profile '{self.profile}' on vLLM {self.engine_version} ({self.platform}) with "
                f"{self.model.describe()}: {'ok' if self.ok else 'cannot launch'}")
        return [head, *("  " + f.line() for f in self.findings)]

    def to_dict(self) -> dict[str, Any]:
        return {"profile": self.profile, "platform": self.platform, "engine_version": self.engine_version,
                "model": self.model.describe(), "ok": self.ok, "args": list(self.args), "env": dict(self.env),
                "findings": [{"severity": f.severity.value, "flag": f.flag, "message": f.message}
                             for f in self.findings]}


# --------------------------------------------------------------------------- model traits
def _sub_configs(config: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    out = [config]
    for key in ("text_config", "language_config", "llm_config"):
        sub = config.get(key)
        if isinstance(sub, Mapping):
            out.append(sub)
    return out


def agents_constrain_output(settings: Settings, model: ModelSpec) -> bool | None:
    """Whether the app's agents send this model ``structured_outputs``: the rule of
    :func:`workstation.agent.protocols.choose_protocol` for the guided protocol (by parameter
    count, by name where the size is unknown); None where neither tells. Reads the model's
    files: call off the event loop."""
    from workstation.agent.config import AgentConfig
    from workstation.agent.model_size import model_parameters

    size = model_parameters(getattr(model, "local_dir", None), model.served_name)
    if size is not None:
        return size <= settings.agent.guided_max_parameters
    name = model.served_name.lower()
    return True if any(p.lower() in name for p in AgentConfig().weak_model_patterns) else None


def model_traits(name: str, config: Mapping[str, Any] | None, *,
                 structured_outputs: bool | None = None) -> ModelTraits:
    """What the checks need to know of a model, from its ``config.json`` (and, where the
    caller knows it, whether agents constrain its output: :func:`agents_constrain_output`)."""
    if not config:
        return ModelTraits(name, "?", "?", config_known=False, hybrid_mamba=False, mtp_layers=0,
                           structured_outputs=structured_outputs)
    hybrid = False
    mtp = 0
    for cfg in _sub_configs(config):
        if str(cfg.get("model_type", "")) in HYBRID_MODEL_TYPES:
            hybrid = True
        pattern = cfg.get("hybrid_override_pattern")
        if isinstance(pattern, str) and "M" in pattern:
            hybrid = True
        for key in ("layer_types", "layers_block_type"):
            kinds = cfg.get(key)
            if isinstance(kinds, list) and any(
                isinstance(k, str) and any(w in k.lower() for w in _SSM_LAYER_WORDS) for k in kinds
            ):
                hybrid = True
        if any(k in cfg for k in _SSM_KEYS) or "attn_layer_period" in cfg:
            hybrid = True
        for key in MTP_KEYS:
            value = cfg.get(key)
            if isinstance(value, int) and value > mtp:
                mtp = value
    archs = config.get("architectures") or ["?"]
    vocab = config.get("vocab_size")
    ctx = config.get("max_position_embeddings")
    return ModelTraits(
        name=name, architecture=str(archs[0]), model_type=str(config.get("model_type", "?")),
        config_known=True, hybrid_mamba=hybrid, mtp_layers=mtp,
        max_position_embeddings=int(ctx) if isinstance(ctx, int) else None,
        vocab_size=int(vocab) if isinstance(vocab, int) else None, structured_outputs=structured_outputs,
    )


# --------------------------------------------------------------------------- rules
def parse_count(text: str) -> int | None:
    """vLLM's human-readable integers: ``2048``, ``1k``, ``2M``, ``1.5G`` (decimal)."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([kKmMgGtT]?)\s*", text)
    if not m:
        return None
    scale = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}[m.group(2).lower()]
    return int(float(m.group(1)) * scale)


def _value(flags: Mapping[str, list[str]], flag: str) -> str | None:
    values = flags.get(flag)
    return " ".join(values) if values else None


def check_profile(
    args: Sequence[str],
    env: Mapping[str, str],
    *,
    platform: str,
    engine_version: str,
    help_flags: set[str] | None,
    traits: ModelTraits,
    profile_platforms: frozenset[str] = frozenset({"cpu", "cuda"}),
    profile_name: str = "profile",
    max_model_len: int | None = None,
) -> list[Finding]:
    """Every problem of one set of ``vllm serve`` arguments, most serious first."""
    found: list[Finding] = []
    E, W, N = Severity.ERROR, Severity.WARNING, Severity.NOTE
    try:
        flags = split_flags(list(args))
    except ValueError as exc:
        return [Finding(E, f"the arguments do not parse: {exc}")]

    if platform not in profile_platforms:
        found.append(Finding(E, f"profile '{profile_name}' is made for {', '.join(sorted(profile_platforms))}; "
                                f"this engine runs on {platform}"))

    if help_flags is not None:
        for described in unknown_flags(flags, help_flags):
            found.append(Finding(E, f"the installed vLLM ({engine_version}) does not know {described}",
                                 described.split(" ", 1)[0]))

    # ----- the model -----
    try:
        method, n_spec = speculative_method(args)
    except ValueError as exc:
        found.append(Finding(E, str(exc), "--speculative-config"))
        method, n_spec = None, None
    needs = required_traits(args)
    mamba_flags = [f for f in flags if "mamba" in f]
    if "mamba" in needs:
        if not traits.config_known:
            found.append(Finding(W, f"{', '.join(mamba_flags)} {_verb(mamba_flags)} to hybrid Mamba models only, and "
                                    f"{traits.name}'s config.json cannot be read to tell", mamba_flags[0]))
        elif not traits.hybrid_mamba:
            found.append(Finding(E, f"{', '.join(mamba_flags)} {_verb(mamba_flags)} to hybrid Mamba models only; "
                                    f"{traits.describe()} has no Mamba layers", mamba_flags[0]))
    if "mtp" in needs:
        if not traits.config_known:
            found.append(Finding(W, f"MTP speculative decoding needs a model with a multi-token-prediction "
                                    f"head; {traits.name}'s config.json cannot be read to tell",
                                 "--speculative-config"))
        elif traits.mtp_layers == 0:
            found.append(Finding(E, f"MTP speculative decoding needs a multi-token-prediction head; "
                                    f"{traits.describe()} has none (its config.json has no "
                                    f"{' / '.join(MTP_KEYS)})", "--speculative-config"))
    if method == "ngram" and n_spec is None:
        found.append(Finding(E, "n-gram speculative decoding needs num_speculative_tokens in "
                                "--speculative-config", "--speculative-config"))

    # ----- batch limits vLLM refuses at start -----
    seqs = parse_count(_value(flags, "--max-num-seqs") or "")
    batched = parse_count(_value(flags, "--max-num-batched-tokens") or "")
    if platform == "cpu":
        seqs_eff = seqs or CPU_DEFAULT_MAX_NUM_SEQS
        batched_eff = batched or CPU_DEFAULT_MAX_NUM_BATCHED_TOKENS
    else:
        seqs_eff, batched_eff = seqs, batched
    if seqs_eff and batched_eff and (seqs or batched) and batched_eff < seqs_eff:
        found.append(Finding(E, f"--max-num-batched-tokens ({batched_eff}) must be at least "
                                f"--max-num-seqs ({seqs_eff}); vLLM refuses to start otherwise",
                             "--max-num-batched-tokens"))
    if ("--no-enable-chunked-prefill" in flags and batched_eff and max_model_len
            and batched_eff < max_model_len):
        found.append(Finding(E, f"without chunked prefill --max-num-batched-tokens ({batched_eff}) must "
                                f"cover the context length ({max_model_len})", "--max-num-batched-tokens"))

    # ----- the platform -----
    if platform == "cpu":
        if "--async-scheduling" in flags:
            found.append(Finding(W, "the CPU build forces async scheduling off; --async-scheduling has "
                                    "no effect here", "--async-scheduling"))
        backend = _value(flags, "--mamba-backend")
        if backend and backend.lower() == "flashinfer":
            found.append(Finding(E, "--mamba-backend flashinfer needs an NVIDIA GPU (FlashInfer has no "
                                    "CPU kernels)", "--mamba-backend"))
        ssm = _value(flags, "--mamba-ssm-cache-dtype")
        if ssm in ("float16", "bfloat16"):
            found.append(Finding(W, f"the CPU build keeps the SSM state in float32 unless its accelerated "
                                    f"GDN backend is used; --mamba-ssm-cache-dtype {ssm} is likely reset",
                                 "--mamba-ssm-cache-dtype"))
        if "--gpu-memory-utilization" in flags:
            found.append(Finding(N, "on the CPU the KV cache is sized in bytes (--kv-cache-memory-bytes, "
                                    "set by the app); --gpu-memory-utilization does not apply",
                                 "--gpu-memory-utilization"))
        if _value(flags, "--performance-mode") == "interactivity":
            found.append(Finding(N, "--performance-mode interactivity only shapes CUDA graphs; on the CPU "
                                    "it changes nothing", "--performance-mode"))
        if "--no-enforce-eager" in flags or "--enforce-eager" not in flags:
            found.append(Finding(N, "compiled graphs: the CPU build compiles at every start (~75-110 s "
                                    "instead of ~26 s eager), then decodes ~8% faster"))
        if "CUDA_VISIBLE_DEVICES" in env:
            found.append(Finding(N, "CUDA_VISIBLE_DEVICES is ignored by the CPU engine"))
        if env.get("VLLM_CPU_KVCACHE_SPACE", None) == "":
            found.append(Finding(E, "VLLM_CPU_KVCACHE_SPACE is set but empty, which crashes the CPU "
                                    "worker; leave it unset or give whole GiB"))
    elif platform == "cuda":
        if method == "ngram_gpu" and traits.structured_outputs:
            if "--no-async-scheduling" not in flags:
                found.append(Finding(E, "n-gram drafts on the GPU (ngram_gpu) with structured outputs and async "
                                        "scheduling accept tokens the grammar forbids (vLLM issue #49694: HTTP 500s, "
                                        "truncated replies); the app's agents hold this model's replies to a schema "
                                        "(the guided protocol). Measured on an H200 with vLLM 0.26: 32 agent sessions "
                                        "made 1.2 tool calls each on such an engine, 8.0 on the same engine without "
                                        "the drafts", "--speculative-config"))
            else:
                found.append(Finding(W, "n-gram drafts on the GPU with structured outputs: vLLM's issue #49694 is "
                                        "reported with async scheduling, which is off here; this combination has "
                                        "not been measured with the app's agents (the tuner's agent check would "
                                        "show it)", "--speculative-config"))
        if method == "ngram":
            if "--async-scheduling" in flags:
                found.append(Finding(E, "vLLM refuses to start with async scheduling and host-side n-gram drafts "
                                        "(method ngram; only EAGLE, MTP, a draft model and ngram_gpu run async): "
                                        "drop --async-scheduling or use ngram_gpu", "--async-scheduling"))
            else:
                found.append(Finding(N, "with host-side n-gram drafts (method ngram) vLLM turns async scheduling "
                                        "off, so the drafts must pay for the lost overlap of CPU and GPU work",
                                     "--speculative-config"))
        if "--kv-cache-memory-bytes" in flags and "--gpu-memory-utilization" in flags:
            found.append(Finding(W, "--kv-cache-memory-bytes takes precedence over "
                                    "--gpu-memory-utilization; the latter is ignored", "--gpu-memory-utilization"))
    order = {E: 0, W: 1, N: 2}
    return sorted(found, key=lambda f: order[f.severity])


def check_resolved(
    profile: Profile,
    catalogue: Mapping[str, Profile],
    *,
    platform: str,
    engine_version: str,
    help_text: str | None,
    traits: ModelTraits,
    extra_args: Sequence[str] = (),
    max_model_len: int | None = None,
) -> CheckReport:
    """Check a profile with its ancestry folded in (pure; inputs as data)."""
    args, env = effective(profile, catalogue, platform=platform, values=STAND_IN_VALUES)
    args = apply_changes(args, list(extra_args))
    findings = check_profile(
        args, env, platform=platform, engine_version=engine_version,
        help_flags=known_flags(help_text) if help_text is not None else None, traits=traits,
        profile_platforms=profile.platforms, profile_name=profile.name, max_model_len=max_model_len,
    )
    return CheckReport(profile.name, platform, engine_version, traits, tuple(args), tuple(sorted(env.items())),
                       tuple(findings))


def check_against_engine(settings: Settings, engine: EngineInstall, model: ModelSpec, profile: Profile,
                         catalogue: Mapping[str, Profile], *, extra_args: Sequence[str] = ()) -> CheckReport:
    """Check against the really installed engine (its cached ``--help=all``) and the model's
    ``config.json``. Blocking (the first help read runs the engine's CLI): call off the loop."""
    help_text = engine_help_text(engine, settings.cache_dir)
    traits = model_traits(model.served_name, model.config_json,
                          structured_outputs=agents_constrain_output(settings, model))
    return check_resolved(profile, catalogue, platform=engine.platform, engine_version=engine.version,
                          help_text=help_text, traits=traits, extra_args=extra_args,
                          max_model_len=model.max_model_len)


def _verb(flags: Sequence[str]) -> str:
    return "applies" if len(flags) == 1 else "apply"
