"""The CPU engine's data type, chosen for the host's instruction set.

vLLM's CPU backend runs bf16 by default, with oneDNN kernels that need AVX-512 (vLLM's CPU
docs: bf16 "is compatible with all CPUs with AVX512 ISA support"). Without it every linear
layer falls back to torch's own bf16 path — the engine log says "Failed to create oneDNN
linear, fallback to torch linear" — which is slow as soon as a step holds more than one row.
Measured on a 2-core AMD EPYC VM that has AVX but neither AVX2 nor AVX-512 (vLLM 0.32.0+cpu,
SmolLM2-135M, 32 new tokens a request, 1 / 4 streams at once):

- short prompts: bf16 6.6 / 10.1 tok/s, float32 5.5 / 15.2;
- 200-token prompts: bf16 5.1 / 7.3 tok/s, float32 6.7 / 17.6.

An agent fleet is many streams with long prompts, so on an x86 host without AVX-512 the
engine runs float32 (a profile's or the user's own ``--dtype`` still wins). Its KV cache then
takes twice the bytes a token; the launcher doubles its default size to hold as many tokens.
Elsewhere (AVX-512 hosts, Arm, flags unknown) vLLM's own choice stands.
"""

from __future__ import annotations

import functools
import platform
from collections.abc import Iterable
from pathlib import Path

FLOAT32 = "float32"
X86 = frozenset({"x86_64", "amd64"})
CPUINFO = Path("/proc/cpuinfo")


def cpuinfo_field(name: str, cpuinfo: Path = CPUINFO) -> str | None:
    """The first processor's ``name`` line of ``/proc/cpuinfo`` (None where it cannot be read)."""
    try:
        with cpuinfo.open(encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == name:
                    return value.strip()
    except OSError:
        pass
    return None


def cpu_flags(cpuinfo: Path = CPUINFO) -> frozenset[str]:
    """The first processor's feature flags (empty where they cannot be read)."""
    return frozenset((cpuinfo_field("flags", cpuinfo) or "").split())


def engine_dtype(flags: Iterable[str], machine: str) -> str | None:
    """``float32`` on an x86 host whose flags are known and lack AVX-512; else None (vLLM's
    default)."""
    flags = frozenset(flags)
    if machine.lower() in X86 and flags and "avx512f" not in flags:
        return FLOAT32
    return None


@functools.cache
def host_engine_dtype() -> str | None:
    """:func:`engine_dtype` for this machine (read once)."""
    return engine_dtype(cpu_flags(), platform.machine())


def dtype_note(dtype: str) -> str:
    """The engine log's line for the choice."""
    return (f"--dtype {dtype}: this CPU has no AVX-512, without which vLLM's bf16 kernels fall back "
            "to slow ones (set --dtype in the profile to choose otherwise)")
