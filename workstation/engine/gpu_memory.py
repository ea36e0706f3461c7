"""The launcher's one question to the driver before a start: how much memory the engine's GPUs
have, and how much of it is free.

A single read of two NVML fields per device, once per start; the meters' continuous reads are
``telemetry/nvml.py``'s (the engine layer sits below telemetry and must not import it). No
driver, no library or no device is an empty list — the sizing then leaves memory to vLLM.
"""

from __future__ import annotations

import logging
import os
from types import ModuleType

from workstation.core.engine_sizing import GpuMemory

log = logging.getLogger(__name__)


def visible_indices(env: dict[str, str] | None = None) -> list[int] | None:
    """NVML indices named by ``CUDA_VISIBLE_DEVICES`` (None: all; ids other than plain
    indices, such as UUIDs, are treated as "all")."""
    value = (env if env is not None else os.environ).get("CUDA_VISIBLE_DEVICES")
    if value is None:
        return None
    parts = [p.strip() for p in value.split(",") if p.strip()]
    if not all(p.isdigit() for p in parts):
        return None
    return [int(p) for p in parts]


def read_gpu_memory(nvml: ModuleType | None = None, *, env: dict[str, str] | None = None) -> list[GpuMemory]:
    """Memory of the GPUs the engine will see, in the order CUDA numbers them."""
    if nvml is None:
        try:
            import pynvml as nvml
        except ImportError:
            return []
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as exc:
        log.debug("no NVML for engine sizing: %s", exc)
        return []
    try:
        count = nvml.nvmlDeviceGetCount()
        order = visible_indices(env)
        indices = [i for i in (order if order is not None else range(count)) if i < count]
        out = []
        for i in indices:
            handle = nvml.nvmlDeviceGetHandleByIndex(i)
            info = nvml.nvmlDeviceGetMemoryInfo(handle)
            name = nvml.nvmlDeviceGetName(handle)
            out.append(GpuMemory(index=i, name=name.decode() if isinstance(name, bytes) else str(name),
                                 total_bytes=int(info.total), free_bytes=int(info.free)))
        return out
    except nvml.NVMLError as exc:
        log.warning("could not read GPU memory for engine sizing: %s", exc)
        return []
    finally:
        try:
            nvml.nvmlShutdown()
        except nvml.NVMLError:
            pass
