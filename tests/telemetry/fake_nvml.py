"""A scripted stand-in for ``pynvml`` (the part NvmlReader uses), for deterministic tests.

Each device is a dict of field → value; a value that is an ``int`` error code wrapped
in :class:`Fail` makes that query raise ``NVMLError(code)`` like the real library.
Calls are counted per function name so tests can check unsupported fields are not
asked again.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

NOT_SUPPORTED = 3
LIBRARY_NOT_FOUND = 12
GPU_IS_LOST = 15
UNKNOWN = 999


class NVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value

    def __str__(self) -> str:
        return {NOT_SUPPORTED: "Not Supported", LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
                GPU_IS_LOST: "GPU is lost"}.get(self.value, f"error {self.value}")


@dataclass
class Fail:
    code: int


def device(**overrides: Any) -> dict[str, Any]:
    """An H200-like device at load; override any field."""
    base: dict[str, Any] = {
        "name": "NVIDIA H200",
        "uuid": "GPU-0000",
        "bus_id": "00000000:18:00.0",
        "max_sm_clock": 1980,
        "util": (97, 61),
        "memory": (121 * 2**30, 143 * 2**30, 500 * 2**20),  # used, total, reserved
        "power_mw": 690_500,
        "limit_mw": 700_000,
        "energy_mj": 5_000_000,
        "temperature": 62,
        "sm_clock": 1755,
        "mem_clock": 3201,
        "reasons": 0x4,
        "pstate": 0,
        "fan": Fail(NOT_SUPPORTED),
        "processes": [],
    }
    base.update(overrides)
    return base


@dataclass
class FakeNvml:
    devices: list[dict[str, Any]] = field(default_factory=list)
    init_error: int | None = None
    driver: str = "580.159.04"
    calls: Counter = field(default_factory=Counter)

    NVMLError = NVMLError
    NVML_CLOCK_SM = 1
    NVML_CLOCK_MEM = 2
    NVML_TEMPERATURE_GPU = 0
    nvmlMemory_v2 = 0x02000028

    def _field(self, handle: int, name: str) -> Any:
        self.calls[name] += 1
        value = self.devices[handle][name]
        if isinstance(value, Fail):
            raise NVMLError(value.code)
        return value

    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise NVMLError(self.init_error)

    def nvmlShutdown(self) -> None:
        self.calls["shutdown"] += 1

    def nvmlSystemGetDriverVersion(self) -> str:
        return self.driver

    def nvmlDeviceGetCount(self) -> int:
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetName(self, h: int) -> str:
        return self._field(h, "name")

    def nvmlDeviceGetUUID(self, h: int) -> str:
        return self._field(h, "uuid")

    def nvmlDeviceGetPciInfo(self, h: int) -> Any:
        return SimpleNamespace(busId=self._field(h, "bus_id").encode())

    def nvmlDeviceGetMaxClockInfo(self, h: int, kind: int) -> int:
        return self._field(h, "max_sm_clock")

    def nvmlDeviceGetUtilizationRates(self, h: int) -> Any:
        gpu, mem = self._field(h, "util")
        return SimpleNamespace(gpu=gpu, memory=mem)

    def nvmlDeviceGetMemoryInfo(self, h: int, version: int | None = None) -> Any:
        used, total, reserved = self._field(h, "memory")
        if version is None:
            return SimpleNamespace(used=used + reserved, total=total, free=total - used - reserved)
        return SimpleNamespace(used=used, total=total, reserved=reserved, free=total - used - reserved)

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:
        return self._field(h, "power_mw")

    def nvmlDeviceGetEnforcedPowerLimit(self, h: int) -> int:
        return self._field(h, "limit_mw")

    def nvmlDeviceGetTotalEnergyConsumption(self, h: int) -> int:
        return self._field(h, "energy_mj")

    def nvmlDeviceGetTemperature(self, h: int, sensor: int) -> int:
        return self._field(h, "temperature")

    def nvmlDeviceGetClockInfo(self, h: int, kind: int) -> int:
        return self._field(h, "sm_clock" if kind == self.NVML_CLOCK_SM else "mem_clock")

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: int) -> int:
        return self._field(h, "reasons")

    def nvmlDeviceGetPerformanceState(self, h: int) -> int:
        return self._field(h, "pstate")

    def nvmlDeviceGetFanSpeed(self, h: int) -> int:
        return self._field(h, "fan")

    def nvmlDeviceGetComputeRunningProcesses(self, h: int) -> list[Any]:
        return [SimpleNamespace(pid=pid, usedGpuMemory=mem) for pid, mem in self._field(h, "processes")]
