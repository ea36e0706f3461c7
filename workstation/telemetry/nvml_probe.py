"""A one-shot NVML probe: driver, NVML version and the device list (for `doctor`).

Never raises: where there is no NVML library or no device it says so in words.
"""

from __future__ import annotations


def probe_gpus() -> dict:
    try:
        import pynvml
    except ImportError:
        return {"gpus": [], "reason": "no GPU found (nvidia-ml-py is not installed)"}
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return {"gpus": [], "reason": f"no GPU found (NVML: {exc})"}
    try:
        driver = pynvml.nvmlSystemGetDriverVersion()
        nvml = pynvml.nvmlSystemGetNVMLVersion()
        gpus = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            mem = pynvml.nvmlDeviceGetMemoryInfo(handle)
            gpus.append({
                "index": index,
                "name": pynvml.nvmlDeviceGetName(handle),
                "memory_total_gb": round(mem.total / 1e9, 1),
            })
        return {"gpus": gpus, "driver": driver, "nvml": nvml,
                "reason": "" if gpus else "NVML found no GPU"}
    except pynvml.NVMLError as exc:
        return {"gpus": [], "reason": f"NVML error: {exc}"}
    finally:
        pynvml.nvmlShutdown()
