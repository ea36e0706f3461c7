"""Engine tuning profiles as data: a base plus named changes (flags and environment).

A profile's effective arguments are its parent's with its own changes applied: a flag
it names replaces the parent's value for that flag; ``--no-<flag>`` removes ``--<flag>``.
A profile may add changes for one platform only (``platform_args``), applied right after its
own ``args``; so a child's change still wins over its parent's platform changes. Values may be
placeholders (``{max_num_seqs}``) that the launcher fills from the sizing of the machine it
runs on; a flag whose placeholder has no value is left out (vLLM's own default applies).

Presets:

- ``vllm-defaults``: vLLM's own defaults for the model, nothing added;
- ``default``: the platform's baseline (:data:`PLATFORM_BASELINE`): on the CPU engine an eager
  start (26 s instead of 109 s for SmolLM2, decode ~8 % slower — eager pays there); on CUDA
  compiled graphs with the batch, context and memory share sized for this GPU and the
  configured sessions (``core/engine_sizing.py``), prefix caching and chunked prefill on;
- ``compiled``: the default with compiled graphs on every platform;
- ``throughput`` / ``latency``: general leanings for any model and platform;
- ``ladder-1-mtp3`` … ``ladder-5-ssm-fp16``: the report's tuning ladder for a hybrid
  Mamba–attention model with a multi-token-prediction head (CUDA only), each step a child
  of the one before, so its diff against the parent is exactly the report's one change.

User profiles live on disk (the tuning lab reads and writes them); this module only turns
them into text and back (:func:`profile_to_toml`, :func:`profile_from_mapping`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

PLATFORMS = frozenset({"cpu", "cuda"})
MAX_ENGINES_PER_GPU = 8
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


@dataclass(frozen=True, slots=True)
class Profile:
    name: str
    description: str
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    parent: str | None = None
    platforms: frozenset[str] = field(default_factory=lambda: PLATFORMS)
    platform_args: tuple[tuple[str, tuple[str, ...]], ...] = ()
    """Further changes on one platform only: ``(("cpu", ("--enforce-eager",)),)``."""
    engines_per_gpu: int | None = None
    """Engines of the model sharing each GPU (or GPU group), each with an equal share of its
    memory and of the sessions; None: the parent's (1 at the top: vLLM's own arrangement).
    A small model on a large GPU is bound by one engine's host work per step (its scheduler,
    sampler and grammar masks run in one process while the GPU waits), so engines side by side
    serve more. GPU platforms only: on the CPU engine cores are what is shared out
    (``engine.replicas``)."""

    def args_on(self, platform: str | None) -> tuple[str, ...]:
        """This profile's own changes on ``platform`` (its ``args``, then that platform's)."""
        extra = dict(self.platform_args).get(platform, ()) if platform else ()
        return (*self.args, *extra)


def split_flags(args: tuple[str, ...] | list[str]) -> dict[str, list[str]]:
    """``['--a', '1', '--b']`` → ``{'--a': ['1'], '--b': []}`` (order kept)."""
    out: dict[str, list[str]] = {}
    current: str | None = None
    for token in args:
        if token.startswith("-") and not _is_number(token):
            flag, eq, value = token.partition("=")
            current = flag
            out[current] = [value] if eq else []
        elif current is None:
            raise ValueError(f"value {token!r} comes before any flag")
        else:
            out[current].append(token)
    return out


def _is_number(token: str) -> bool:
    try:
        float(token)
    except ValueError:
        return False
    return True


def join_flags(flags: dict[str, list[str]]) -> list[str]:
    out: list[str] = []
    for flag, values in flags.items():
        out.append(flag)
        out.extend(values)
    return out


def apply_changes(base: list[str] | tuple[str, ...], changes: list[str] | tuple[str, ...]) -> list[str]:
    merged = split_flags(list(base))
    for flag, values in split_flags(list(changes)).items():
        if flag.startswith("--no-"):
            merged.pop("--" + flag[5:], None)
        else:
            merged.pop("--no-" + flag[2:], None)
        merged.pop(flag, None)
        merged[flag] = values
    return join_flags(merged)


_PLACEHOLDER = re.compile(r"^\{([a-z_]+)\}$")

STAND_IN_VALUES: dict[str, str] = {"max_num_seqs": "64", "max_model_len": "8192", "gpu_memory_utilization": "0.90"}
"""Typical sized values, for checking a profile's flags where there is no machine to size for."""


def fill_placeholders(args: list[str] | tuple[str, ...], values: Mapping[str, str]) -> list[str]:
    """``{name}`` values replaced from ``values``; a flag whose value has none is dropped."""
    out: dict[str, list[str]] = {}
    for flag, flag_values in split_flags(list(args)).items():
        filled = []
        for value in flag_values:
            match = _PLACEHOLDER.match(value)
            if match is None:
                filled.append(value)
            elif match.group(1) in values:
                filled.append(str(values[match.group(1)]))
            else:
                break
        else:
            out[flag] = filled
    return join_flags(out)


def placeholders(args: list[str] | tuple[str, ...]) -> set[str]:
    """Names of the placeholders a list of arguments uses."""
    return {m.group(1) for a in args if (m := _PLACEHOLDER.match(a))}


def effective(profile: Profile, catalogue: Mapping[str, Profile], *, platform: str | None = None,
              values: Mapping[str, str] | None = None) -> tuple[list[str], dict[str, str]]:
    """Arguments and environment of a profile after walking up its parents.

    ``platform``: also apply each step's changes for that platform (None: only the changes
    common to all). ``values``: fill the placeholders (a flag without a value is dropped);
    None keeps them as they are (for display and for folding into a child)."""
    chain: list[Profile] = []
    seen: set[str] = set()
    node: Profile | None = profile
    while node is not None:
        if node.name in seen:
            raise ValueError(f"profile {node.name!r} is its own ancestor")
        seen.add(node.name)
        chain.append(node)
        node = catalogue.get(node.parent) if node.parent else None
        if chain[-1].parent and node is None:
            raise ValueError(f"profile {chain[-1].name!r} names an unknown parent {chain[-1].parent!r}")
    args: list[str] = []
    env: dict[str, str] = {}
    for step in reversed(chain):
        args = apply_changes(args, step.args_on(platform))
        env.update(dict(step.env))
    if values is not None:
        args = fill_placeholders(args, values)
    return args, env


def engine_count(profile: Profile, catalogue: Mapping[str, Profile], *, platform: str | None = None) -> int:
    """How many engines of the model share each GPU under ``profile``: its own value, else the
    nearest ancestor's, else 1; always 1 on the CPU engine."""
    if platform == "cpu":
        return 1
    node: Profile | None = profile
    seen: set[str] = set()
    while node is not None and node.name not in seen:
        if node.engines_per_gpu is not None:
            return node.engines_per_gpu
        seen.add(node.name)
        node = catalogue.get(node.parent) if node.parent else None
    return 1


def flatten(profile: Profile, catalogue: Mapping[str, Profile], *, platform: str | None = None) -> Profile:
    """The same profile with its ancestry folded in (``parent=None``): what a launcher that
    only knows the presets can run. With ``platform`` its platform changes are folded in too
    (the result is then for that platform only); placeholders stay for the launcher to fill."""
    args, env = effective(profile, catalogue, platform=platform)
    platforms = profile.platforms & {platform} if platform else profile.platforms
    platform_args = () if platform else _folded_platform_args(profile, catalogue)
    engines = engine_count(profile, catalogue)
    return replace(profile, args=tuple(args), env=tuple(sorted(env.items())), parent=None,
                   platforms=platforms or profile.platforms, platform_args=platform_args,
                   engines_per_gpu=engines if engines != 1 else None)


def _folded_platform_args(profile: Profile, catalogue: Mapping[str, Profile]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """Per platform, what the folded profile must add to its common arguments so that it
    gives the same flags as the unfolded one there."""
    common, _ = effective(profile, catalogue)
    out = []
    for platform in sorted(PLATFORMS):
        full, _ = effective(profile, catalogue, platform=platform)
        if full != common:
            out.append((platform, tuple(_changes_from(common, full))))
    return tuple(out)


def _changes_from(base: list[str], target: list[str]) -> list[str]:
    """Changes that turn ``base`` into ``target`` under :func:`apply_changes`."""
    have, want = split_flags(base), split_flags(target)
    changes: list[str] = []
    for flag in have:
        if flag not in want:
            changes.append("--no-" + flag[2:] if not flag.startswith("--no-") else "--" + flag[5:])
    for flag, values in want.items():
        if have.get(flag) != values:
            changes += [flag, *values]
    return changes


def derive(parent: Profile, name: str, description: str, args: tuple[str, ...] = (),
           env: tuple[tuple[str, str], ...] = (), engines: int | None = None) -> Profile:
    """A child of ``parent`` that makes one named change (the autotuner's step)."""
    return Profile(name=name, description=description, args=args, env=env, parent=parent.name,
                   platforms=parent.platforms, engines_per_gpu=engines)


def diff_against_parent(profile: Profile) -> list[str]:
    """Human-readable lines: what this profile changes relative to its parent."""
    lines = [f"{flag} {' '.join(values)}".strip() for flag, values in split_flags(list(profile.args)).items()]
    for platform, values in profile.platform_args:
        lines += [f"on {platform}: {flag} {' '.join(v)}".strip() for flag, v in split_flags(list(values)).items()]
    lines += [f"env {k}={v}" for k, v in profile.env]
    if profile.engines_per_gpu is not None:
        lines.append(engines_label(profile.engines_per_gpu))
    return lines


def engines_label(engines: int) -> str:
    """``2 engines on each GPU`` (what tables and diffs call the change)."""
    return f"{engines} engine{'s' if engines != 1 else ''} on each GPU"


def describe_change(args: tuple[str, ...] | list[str], env: Mapping[str, str] | None = None,
                    engines: int | None = None) -> str:
    """One line for a table: ``--max-num-seqs 64, env OMP_NUM_THREADS=1, 2 engines on each GPU``."""
    parts = [f"{flag} {' '.join(values)}".strip() for flag, values in split_flags(list(args)).items()]
    parts += [f"env {k}={v}" for k, v in (env or {}).items()]
    if engines is not None:
        parts.append(engines_label(engines))
    return ", ".join(parts) or "(no change)"


# --------------------------------------------------------------------------- model traits
MAMBA_FLAG_PREFIXES = ("--mamba-", "--enable-mamba-", "--no-enable-mamba-")


def speculative_method(args: list[str] | tuple[str, ...]) -> tuple[str | None, int | None]:
    """``(method, num_speculative_tokens)`` of ``--speculative-config``, or ``(None, None)``.

    Raises ValueError when the value is not a JSON object."""
    flags = split_flags(list(args))
    values = flags.get("--speculative-config") or flags.get("-sc")
    if not values:
        return None, None
    try:
        config = json.loads(" ".join(values))
    except ValueError as exc:
        raise ValueError(f"--speculative-config is not valid JSON: {exc}") from None
    if not isinstance(config, dict):
        raise ValueError("--speculative-config must be a JSON object")
    n = config.get("num_speculative_tokens")
    return (str(config["method"]) if config.get("method") else None), (int(n) if isinstance(n, int) else None)


def required_traits(args: list[str] | tuple[str, ...]) -> set[str]:
    """Model traits a set of flags needs: ``mamba`` (hybrid or pure SSM layers) and ``mtp``
    (a multi-token-prediction head)."""
    traits: set[str] = set()
    for flag in split_flags(list(args)):
        if flag.startswith(MAMBA_FLAG_PREFIXES):
            traits.add("mamba")
    try:
        method, _ = speculative_method(args)
    except ValueError:
        method = None
    if method is not None and (method == "mtp" or method.endswith("_mtp")):
        traits.add("mtp")
    return traits


# --------------------------------------------------------------------------- to and from disk
def profile_to_mapping(profile: Profile) -> dict[str, Any]:
    out: dict[str, Any] = {"name": profile.name, "description": profile.description}
    if profile.parent:
        out["parent"] = profile.parent
    out["args"] = list(profile.args)
    out["env"] = dict(profile.env)
    out["platforms"] = sorted(profile.platforms)
    if profile.platform_args:
        out["platform_args"] = {k: list(v) for k, v in profile.platform_args}
    if profile.engines_per_gpu is not None:
        out["engines_per_gpu"] = profile.engines_per_gpu
    return out


def profile_from_mapping(data: Mapping[str, Any], *, name: str | None = None) -> Profile:
    """Build a profile from a parsed TOML/JSON table; ValueError in plain words otherwise."""
    name = str(data.get("name") or name or "")
    if not _NAME.match(name):
        raise ValueError(f"profile name {name!r} must be 1-64 letters, digits, '.', '_' or '-'")
    args = data.get("args", [])
    if isinstance(args, str):
        args = args.split()
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise ValueError(f"profile {name!r}: 'args' must be a list of strings")
    try:
        split_flags(args)
    except ValueError as exc:
        raise ValueError(f"profile {name!r}: {exc}") from None
    env = data.get("env", {})
    if not isinstance(env, Mapping) or not all(isinstance(k, str) for k in env):
        raise ValueError(f"profile {name!r}: 'env' must be a table of NAME = \"value\"")
    platforms = data.get("platforms", sorted(PLATFORMS))
    if isinstance(platforms, str):
        platforms = [platforms]
    unknown = set(platforms) - PLATFORMS
    if unknown or not platforms:
        raise ValueError(f"profile {name!r}: platforms must be among {sorted(PLATFORMS)}, got {platforms}")
    parent = data.get("parent")
    per_platform = data.get("platform_args", {})
    if not isinstance(per_platform, Mapping):
        raise ValueError(f"profile {name!r}: 'platform_args' must be a table of platform = [flags]")
    platform_args = []
    for platform, values in sorted(per_platform.items()):
        if platform not in PLATFORMS:
            raise ValueError(f"profile {name!r}: platform_args names an unknown platform {platform!r}")
        if not isinstance(values, list) or not all(isinstance(a, str) for a in values):
            raise ValueError(f"profile {name!r}: platform_args.{platform} must be a list of strings")
        try:
            split_flags(values)
        except ValueError as exc:
            raise ValueError(f"profile {name!r}: platform_args.{platform}: {exc}") from None
        platform_args.append((platform, tuple(values)))
    engines = data.get("engines_per_gpu")
    if engines is not None and (isinstance(engines, bool) or not isinstance(engines, int)
                                or not 1 <= engines <= MAX_ENGINES_PER_GPU):
        raise ValueError(f"profile {name!r}: 'engines_per_gpu' must be a whole number from 1 to "
                         f"{MAX_ENGINES_PER_GPU}, got {engines!r}")
    return Profile(
        name=name,
        description=str(data.get("description", "")),
        args=tuple(args),
        env=tuple((str(k), str(v)) for k, v in env.items()),
        parent=str(parent) if parent else None,
        platforms=frozenset(platforms),
        platform_args=tuple(platform_args),
        engines_per_gpu=engines,
    )


def _toml_str(value: str) -> str:
    # A JSON string with non-ASCII escaped is a valid TOML basic string.
    return json.dumps(value, ensure_ascii=True)


def profile_to_toml(profile: Profile) -> str:
    """A small, hand-editable TOML document (read back with ``tomllib``)."""
    lines = [f"name = {_toml_str(profile.name)}", f"description = {_toml_str(profile.description)}"]
    if profile.parent:
        lines.append(f"parent = {_toml_str(profile.parent)}")
    lines.append("platforms = [" + ", ".join(_toml_str(p) for p in sorted(profile.platforms)) + "]")
    lines.append("args = [" + ", ".join(_toml_str(a) for a in profile.args) + "]")
    if profile.engines_per_gpu is not None:
        lines.append(f"engines_per_gpu = {profile.engines_per_gpu}")
    lines.append("")
    lines.append("[env]")
    lines += [f"{_toml_str(k)} = {_toml_str(v)}" for k, v in profile.env]
    if profile.platform_args:
        lines += ["", "[platform_args]"]
        lines += [f"{platform} = [" + ", ".join(_toml_str(a) for a in values) + "]"
                  for platform, values in profile.platform_args]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- presets
def _spec(method: str, n: int) -> str:
    return json.dumps({"method": method, "num_speculative_tokens": n}, separators=(",", ":"))


CUDA_ONLY = frozenset({"cuda"})

PLATFORM_BASELINE: dict[str, tuple[str, ...]] = {
    # Eager pays only on the CPU engine: it starts SmolLM2 in 26 s instead of 109 s (the CPU
    # build recompiles at every start) for ~8 % slower decode.
    "cpu": ("--enforce-eager",),
    # On a GPU eager costs 8x (H200, SmolLM2: 64 vs 521 tok/s for one stream). Compiled graphs
    # stay on; the three sized flags come from core/engine_sizing.py; prefix caching and
    # chunked prefill are vLLM's defaults today, named so that a version that changes them
    # cannot quietly take them away from agent traffic (long shared prefixes). vLLM captures
    # CUDA graphs up to twice the batch cap (at most 512 tokens): with the cap sized to the
    # sessions (64 for 32) every step over 128 tokens would run without graphs, and agent
    # steps mix a prefill chunk (a tool's output, the next turn) into the decodes. 512 is what
    # vLLM's own batch default gives on a large GPU.
    "cuda": (
        "--max-num-seqs", "{max_num_seqs}",
        "--max-model-len", "{max_model_len}",
        "--gpu-memory-utilization", "{gpu_memory_utilization}",
        "--enable-prefix-caching",
        "--enable-chunked-prefill",
        "--max-cudagraph-capture-size", "512",
    ),
}

LADDER: tuple[Profile, ...] = (
    Profile(
        "ladder-1-mtp3",
        "report step 1: multi-token prediction, 3 speculative tokens, one OpenMP thread",
        args=("--speculative-config", _spec("mtp", 3)),
        env=(("OMP_NUM_THREADS", "1"),),
        parent="vllm-defaults",
        platforms=CUDA_ONLY,
    ),
    Profile(
        "ladder-2-async",
        "report step 2: the asynchronous scheduler (CPU scheduling overlaps GPU work)",
        args=("--async-scheduling",),
        parent="ladder-1-mtp3",
        platforms=CUDA_ONLY,
    ),
    Profile(
        "ladder-3-flashinfer",
        "report step 3: Mamba kernels on FlashInfer (a big jump there; may be hardware-specific)",
        args=("--mamba-backend", "flashinfer"),
        parent="ladder-2-async",
        platforms=CUDA_ONLY,
    ),
    Profile(
        "ladder-4-mtp1",
        "report step 4: MTP 3 -> 1 (a full GPU wastes extra guesses on verification)",
        args=("--speculative-config", _spec("mtp", 1)),
        parent="ladder-3-flashinfer",
        platforms=CUDA_ONLY,
    ),
    Profile(
        "ladder-5-ssm-fp16",
        "report step 5: Mamba SSM state in FP16 with stochastic rounding (small quality risk)",
        args=("--mamba-ssm-cache-dtype", "float16", "--enable-mamba-cache-stochastic-rounding"),
        parent="ladder-4-mtp1",
        platforms=CUDA_ONLY,
    ),
)

PRESETS: dict[str, Profile] = {
    p.name: p
    for p in (
        Profile("vllm-defaults", "vLLM's own defaults for the model"),
        Profile(
            "default",
            "the platform's baseline: eager start on the CPU engine (26 s instead of 109 s); "
            "on CUDA compiled graphs, batch, context and memory share sized for this GPU and "
            "the configured sessions, prefix caching and chunked prefill on",
            parent="vllm-defaults",
            platform_args=tuple(PLATFORM_BASELINE.items()),
        ),
        Profile(
            "compiled",
            "compiled graphs: slower start, faster decode",
            args=("--no-enforce-eager",),
            parent="default",
        ),
        Profile(
            "throughput",
            "leans to aggregate tok/s at high concurrency: doubled batch limits, "
            "tokens streamed in groups of 4 (less host work per token)",
            args=("--performance-mode", "throughput", "--stream-interval", "4"),
            parent="compiled",
        ),
        Profile(
            "latency",
            "leans to short per-request latency: small prefill chunks so running streams "
            "are not held up, smaller batches; fine-grained CUDA graphs on a GPU",
            args=("--performance-mode", "interactivity", "--max-num-batched-tokens", "1024",
                  "--max-num-seqs", "64"),
            parent="compiled",
        ),
        *LADDER,
    )
}
