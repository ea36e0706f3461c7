"""The one entry point to NVML (``nvidia-ml-py``): every GPU, every field the meters show.

Blocking calls: only the GPU sampler's own thread calls :class:`NvmlReader`
(one full read of one H200 took ~25 ms). A field the device or driver does not
support is ``None`` in the sample and ``"n/a"`` in JSON, never an exception, and
is not asked again. No NVML library, or no device, is a clear :class:`GpuState`
with a sentence for the user, never a crash.

The reader takes the NVML module as an argument so tests can hand it a scripted
double; the app passes nothing and gets ``pynvml``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import Enum
from types import ModuleType
from typing import Any

import psutil

log = logging.getLogger(__name__)

NA = "n/a"
"""How an unsupported or unmeasured field is written in JSON and CSV."""

# NVML return codes that mean "this will never work on this device / driver".
_ERROR_NOT_SUPPORTED = 3
_ERROR_NO_PERMISSION = 4
_ERROR_FUNCTION_NOT_FOUND = 13
_PERMANENT_ERRORS = frozenset({_ERROR_NOT_SUPPORTED, _ERROR_NO_PERMISSION, _ERROR_FUNCTION_NOT_FOUND})
_ERROR_GPU_IS_LOST = 15

# nvmlClocksEventReason* bits, in words (nvml.h; "throttle reasons" in older drivers).
CLOCK_EVENT_WORDS: tuple[tuple[int, str], ...] = (
    (0x001, "idle"),
    (0x002, "applications clocks setting"),
    (0x004, "software power cap"),
    (0x008, "hardware slowdown"),
    (0x010, "sync boost"),
    (0x020, "software thermal slowdown"),
    (0x040, "hardware thermal slowdown"),
    (0x080, "hardware power brake"),
    (0x100, "display clock setting"),
)
_KNOWN_CLOCK_BITS = sum(bit for bit, _ in CLOCK_EVENT_WORDS)


def decode_clock_event_reasons(mask: int) -> tuple[str, ...]:
    """``0x5`` → ``("idle", "software power cap")``; ``0`` → ``("none",)``."""
    if mask == 0:
        return ("none",)
    words = [word for bit, word in CLOCK_EVENT_WORDS if mask & bit]
    unknown = mask & ~_KNOWN_CLOCK_BITS
    if unknown:
        words.append(f"other (0x{unknown:x})")
    return tuple(words)


class GpuState(Enum):
    OK = "ok"
    NO_NVML = "no_nvml"
    """The NVIDIA driver library (or nvidia-ml-py) is missing or refused to start."""
    NO_GPU = "no_gpu"
    """NVML works but sees no device."""
    ERROR = "error"
    """NVML failed after it had started (driver unloaded, GPU lost)."""


@dataclass(frozen=True, slots=True)
class GpuProcess:
    """A compute process on one GPU."""

    pid: int
    name: str | None
    """Process name, None when the pid is not visible here (another PID namespace)."""
    used_memory_bytes: int | None
    is_engine: bool
    """The pid belongs to our engine's process tree."""
    is_app: bool = False
    """The pid belongs to this app's own process tree."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "pid": self.pid,
            "name": self.name if self.name is not None else NA,
            "used_memory_bytes": _na(self.used_memory_bytes),
            "is_engine": self.is_engine,
            "is_app": self.is_app,
        }


@dataclass(frozen=True, slots=True)
class GpuDevice:
    """One GPU at one instant. ``None`` means not available ("n/a")."""

    index: int
    name: str
    uuid: str | None
    pci_bus_id: str | None
    gpu_util_pct: int | None
    mem_util_pct: int | None
    """Memory-controller busy time (nvidia-smi ``utilization.memory``)."""
    memory_used_bytes: int | None
    memory_total_bytes: int | None
    memory_reserved_bytes: int | None
    power_w: float | None
    power_limit_w: float | None
    energy_j: float | None
    """Energy counter since the driver loaded (monotonic; differences give energy used)."""
    temperature_c: int | None
    sm_clock_mhz: int | None
    mem_clock_mhz: int | None
    sm_clock_max_mhz: int | None
    clock_event_mask: int | None
    clock_event_reasons: tuple[str, ...] | None
    pstate: int | None
    """Performance state, 0 (P0, fastest) … 15; None when unknown."""
    fan_pct: int | None
    processes: tuple[GpuProcess, ...] | None
    unsupported: tuple[str, ...] = ()
    """Fields this device or driver does not support."""

    @property
    def memory_used_frac(self) -> float | None:
        if self.memory_used_bytes is None or not self.memory_total_bytes:
            return None
        return self.memory_used_bytes / self.memory_total_bytes

    @property
    def engine_memory_bytes(self) -> int | None:
        """GPU memory held by our engine's processes (None when processes are n/a)."""
        if self.processes is None:
            return None
        return sum(p.used_memory_bytes or 0 for p in self.processes if p.is_engine)

    @property
    def has_engine_process(self) -> bool:
        return any(p.is_engine for p in self.processes or ())

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "name": self.name,
            "uuid": _na(self.uuid),
            "pci_bus_id": _na(self.pci_bus_id),
            "gpu_util_pct": _na(self.gpu_util_pct),
            "mem_util_pct": _na(self.mem_util_pct),
            "memory_used_bytes": _na(self.memory_used_bytes),
            "memory_total_bytes": _na(self.memory_total_bytes),
            "memory_reserved_bytes": _na(self.memory_reserved_bytes),
            "power_w": _na(self.power_w),
            "power_limit_w": _na(self.power_limit_w),
            "energy_j": _na(self.energy_j),
            "temperature_c": _na(self.temperature_c),
            "sm_clock_mhz": _na(self.sm_clock_mhz),
            "mem_clock_mhz": _na(self.mem_clock_mhz),
            "sm_clock_max_mhz": _na(self.sm_clock_max_mhz),
            "clock_event_mask": _na(self.clock_event_mask),
            "clock_event_reasons": list(self.clock_event_reasons) if self.clock_event_reasons else NA,
            "pstate": NA if self.pstate is None else f"P{self.pstate}",
            "fan_pct": _na(self.fan_pct),
            "processes": NA if self.processes is None else [p.to_dict() for p in self.processes],
            "engine_memory_bytes": _na(self.engine_memory_bytes),
            "unsupported": list(self.unsupported),
        }


@dataclass(frozen=True, slots=True)
class GpuSnapshot:
    """Every GPU at one instant, or why there are none."""

    state: GpuState
    message: str
    """One sentence for the user: ``"2 GPUs"``, ``"no GPU: …"``."""
    t_mono: float
    t_wall: float
    devices: tuple[GpuDevice, ...] = ()
    driver_version: str | None = None
    read_s: float = 0.0
    """Wall time the NVML calls of this snapshot took."""

    @property
    def ok(self) -> bool:
        return self.state is GpuState.OK

    @property
    def total_power_w(self) -> float | None:
        powers = [d.power_w for d in self.devices if d.power_w is not None]
        return sum(powers) if powers else None

    @property
    def total_energy_j(self) -> float | None:
        """Sum of the devices' energy counters, None unless every device has one."""
        if not self.devices or any(d.energy_j is None for d in self.devices):
            return None
        return sum(d.energy_j or 0.0 for d in self.devices)

    def to_dict(self) -> dict[str, Any]:
        return {
            "state": self.state.value,
            "message": self.message,
            "driver_version": _na(self.driver_version),
            "t_wall": self.t_wall,
            "read_ms": round(self.read_s * 1e3, 3),
            "devices": [d.to_dict() for d in self.devices],
        }


def _na(value: Any) -> Any:
    return NA if value is None else value


def no_gpu_snapshot(state: GpuState, message: str) -> GpuSnapshot:
    return GpuSnapshot(state=state, message=message, t_mono=time.monotonic(), t_wall=time.time())


@dataclass(slots=True)
class _DeviceStatic:
    handle: Any
    index: int
    name: str
    uuid: str | None
    pci_bus_id: str | None
    sm_clock_max_mhz: int | None
    unsupported: set[str] = field(default_factory=set)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class NvmlReader:
    """Reads every GPU through NVML. Not thread-safe: one thread calls it."""

    def __init__(
        self,
        nvml: ModuleType | None = None,
        *,
        only: Iterable[int] | None = None,
        process_name: Callable[[int], str | None] | None = None,
    ):
        """``only``: NVML indices to read (default every device)."""
        self._nv = nvml
        self._only = None if only is None else frozenset(only)
        self._process_name = process_name or _process_name
        self._devices: list[_DeviceStatic] = []
        self._driver: str | None = None
        self._memory_v2: Any = None
        self._started = False
        self.state = GpuState.NO_NVML
        self.message = "NVML not started"

    # ----------------------------------------------------------------- life cycle
    def open(self) -> GpuState:
        """Start NVML and learn the devices; returns the state (never raises for NVML)."""
        if self._nv is None:
            try:
                import pynvml
            except ImportError:
                return self._set(GpuState.NO_NVML, "no GPU: nvidia-ml-py is not installed")
            self._nv = pynvml
        nv = self._nv
        try:
            nv.nvmlInit()
        except nv.NVMLError as exc:
            if getattr(exc, "value", None) == 12:  # NVML_ERROR_LIBRARY_NOT_FOUND
                return self._set(GpuState.NO_NVML, "no GPU: the NVIDIA driver library (NVML) was not found")
            return self._set(GpuState.NO_NVML, f"no GPU: NVML did not start ({exc})")
        self._started = True
        try:
            self._driver = _text(nv.nvmlSystemGetDriverVersion())
        except nv.NVMLError:
            self._driver = None
        try:
            count = nv.nvmlDeviceGetCount()
        except nv.NVMLError as exc:
            return self._set(GpuState.ERROR, f"no GPU: NVML could not count devices ({exc})")
        if count == 0:
            return self._set(GpuState.NO_GPU, "no GPU: NVML found no NVIDIA device")
        self._memory_v2 = getattr(nv, "nvmlMemory_v2", None)
        self._devices = []
        for i in range(count):
            if self._only is not None and i not in self._only:
                continue
            try:
                handle = nv.nvmlDeviceGetHandleByIndex(i)
            except nv.NVMLError as exc:
                log.warning("GPU %d: no handle (%s); skipped", i, exc)
                continue
            static = _DeviceStatic(handle=handle, index=i, name=f"GPU {i}", uuid=None,
                                   pci_bus_id=None, sm_clock_max_mhz=None)
            static.name = self._get(static, "name", lambda h: _text(nv.nvmlDeviceGetName(h))) or static.name
            static.uuid = self._get(static, "uuid", lambda h: _text(nv.nvmlDeviceGetUUID(h)))
            static.pci_bus_id = self._get(
                static, "pci_bus_id", lambda h: _text(nv.nvmlDeviceGetPciInfo(h).busId)
            )
            static.sm_clock_max_mhz = self._get(
                static, "sm_clock_max_mhz", lambda h: int(nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_SM))
            )
            self._devices.append(static)
        if not self._devices:
            if self._only is not None:
                return self._set(GpuState.NO_GPU, f"no GPU: none of {sorted(self._only)} among {count} devices")
            return self._set(GpuState.ERROR, "no GPU: NVML listed devices but none could be opened")
        n = len(self._devices)
        return self._set(GpuState.OK, f"{n} GPU{'s' if n != 1 else ''}")

    def close(self) -> None:
        if self._started and self._nv is not None:
            try:
                self._nv.nvmlShutdown()
            except self._nv.NVMLError as exc:
                log.debug("nvmlShutdown: %s", exc)
        self._started = False
        self._devices = []

    def _set(self, state: GpuState, message: str) -> GpuState:
        self.state = state
        self.message = message
        if state is not GpuState.OK:
            log.info("GPU meters: %s", message)
        return state

    @property
    def device_count(self) -> int:
        return len(self._devices)

    # ----------------------------------------------------------------- reading
    def _get(self, dev: _DeviceStatic, name: str, fn: Callable[[Any], Any]) -> Any:
        """One NVML query; None (and remembered) where unsupported, None once on a glitch."""
        if name in dev.unsupported:
            return None
        try:
            return fn(dev.handle)
        except self._nv.NVMLError as exc:  # type: ignore[union-attr]
            code = getattr(exc, "value", None)
            if code in _PERMANENT_ERRORS:
                dev.unsupported.add(name)
            elif code == _ERROR_GPU_IS_LOST:
                raise
            else:
                log.debug("GPU %d %s: %s", dev.index, name, exc)
            return None

    def read(self, engine_root_pid: int | None = None, app_root_pid: int | None = None) -> GpuSnapshot:
        """One snapshot of every device. A GPU process that is ``engine_root_pid`` or one of
        its descendants is marked as the engine's (likewise ``app_root_pid``)."""
        t0 = time.perf_counter()
        t_mono, t_wall = time.monotonic(), time.time()
        if self.state is not GpuState.OK:
            return GpuSnapshot(state=self.state, message=self.message, t_mono=t_mono, t_wall=t_wall,
                               driver_version=self._driver)
        devices: list[GpuDevice] = []
        try:
            for dev in self._devices:
                devices.append(self._read_device(dev, engine_root_pid, app_root_pid))
        except self._nv.NVMLError as exc:  # type: ignore[union-attr]
            self._set(GpuState.ERROR, f"GPU lost: {exc}")
            return GpuSnapshot(state=self.state, message=self.message, t_mono=t_mono, t_wall=t_wall,
                               driver_version=self._driver, read_s=time.perf_counter() - t0)
        return GpuSnapshot(
            state=GpuState.OK, message=self.message, t_mono=t_mono, t_wall=t_wall,
            devices=tuple(devices), driver_version=self._driver, read_s=time.perf_counter() - t0,
        )

    def _read_device(self, dev: _DeviceStatic, engine_root: int | None, app_root: int | None) -> GpuDevice:
        nv = self._nv
        assert nv is not None
        util = self._get(dev, "utilization", nv.nvmlDeviceGetUtilizationRates)
        mem = self._get(dev, "memory", self._memory_info)
        power_mw = self._get(dev, "power", nv.nvmlDeviceGetPowerUsage)
        limit_mw = self._get(dev, "power_limit", nv.nvmlDeviceGetEnforcedPowerLimit)
        energy_mj = self._get(dev, "energy", nv.nvmlDeviceGetTotalEnergyConsumption)
        temp = self._get(dev, "temperature", lambda h: nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU))
        sm = self._get(dev, "sm_clock", lambda h: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM))
        memclk = self._get(dev, "mem_clock", lambda h: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM))
        reasons = self._get(dev, "clock_event_reasons", self._clock_reasons)
        pstate = self._get(dev, "pstate", nv.nvmlDeviceGetPerformanceState)
        fan = self._get(dev, "fan", nv.nvmlDeviceGetFanSpeed)
        raw_procs = self._get(dev, "processes", nv.nvmlDeviceGetComputeRunningProcesses)
        processes = None
        if raw_procs is not None:
            processes = tuple(
                GpuProcess(
                    pid=int(p.pid),
                    name=self._process_name(int(p.pid)),
                    used_memory_bytes=_memory_or_none(getattr(p, "usedGpuMemory", None)),
                    is_engine=engine_root is not None and descends_from(int(p.pid), engine_root),
                    is_app=app_root is not None and descends_from(int(p.pid), app_root),
                )
                for p in raw_procs
            )
        return GpuDevice(
            index=dev.index,
            name=dev.name,
            uuid=dev.uuid,
            pci_bus_id=dev.pci_bus_id,
            gpu_util_pct=None if util is None else int(util.gpu),
            mem_util_pct=None if util is None else int(util.memory),
            memory_used_bytes=None if mem is None else int(mem.used),
            memory_total_bytes=None if mem is None else int(mem.total),
            memory_reserved_bytes=None if mem is None else _memory_or_none(getattr(mem, "reserved", None)),
            power_w=None if power_mw is None else power_mw / 1000.0,
            power_limit_w=None if limit_mw is None else limit_mw / 1000.0,
            energy_j=None if energy_mj is None else energy_mj / 1000.0,
            temperature_c=None if temp is None else int(temp),
            sm_clock_mhz=None if sm is None else int(sm),
            mem_clock_mhz=None if memclk is None else int(memclk),
            sm_clock_max_mhz=dev.sm_clock_max_mhz,
            clock_event_mask=None if reasons is None else int(reasons),
            clock_event_reasons=None if reasons is None else decode_clock_event_reasons(int(reasons)),
            pstate=None if pstate is None or int(pstate) == 32 else int(pstate),  # 32: unknown
            fan_pct=None if fan is None else int(fan),
            processes=processes,
            unsupported=tuple(sorted(dev.unsupported)),
        )

    def _memory_info(self, handle: Any) -> Any:
        nv = self._nv
        assert nv is not None
        if self._memory_v2 is not None:
            try:
                return nv.nvmlDeviceGetMemoryInfo(handle, version=self._memory_v2)
            except nv.NVMLError as exc:
                if getattr(exc, "value", None) not in _PERMANENT_ERRORS:
                    raise
                self._memory_v2 = None  # driver without the v2 struct: plain v1 from now on
        return nv.nvmlDeviceGetMemoryInfo(handle)

    def _clock_reasons(self, handle: Any) -> int:
        nv = self._nv
        assert nv is not None
        fn = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None)
        if fn is not None:
            try:
                return int(fn(handle))
            except nv.NVMLError as exc:
                if getattr(exc, "value", None) != _ERROR_FUNCTION_NOT_FOUND:
                    raise
        return int(nv.nvmlDeviceGetCurrentClocksThrottleReasons(handle))


_UNAVAILABLE = {2**64 - 1, 2**32 - 1}


def _memory_or_none(value: Any) -> int | None:
    if value is None:
        return None
    value = int(value)
    return None if value in _UNAVAILABLE else value


def descends_from(pid: int, root_pid: int) -> bool:
    """Whether ``pid`` is ``root_pid`` or one of its descendants (walks up the parents:
    a few /proc reads per GPU process, cheaper than listing the whole tree)."""
    if pid == root_pid:
        return True
    try:
        return any(parent.pid == root_pid for parent in psutil.Process(pid).parents())
    except psutil.Error:
        return False


def _process_name(pid: int) -> str | None:
    try:
        return psutil.Process(pid).name()
    except psutil.Error:  # gone, not ours to see, or in another PID namespace
        return None
