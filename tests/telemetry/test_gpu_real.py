"""The GPU meters against the real NVML (marked ``gpu``; skipped where there is no device).

Synchronous on purpose (``asyncio.run`` inside): they also run on GPU machines that
have pytest but not pytest-asyncio.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from workstation.telemetry.nvml import GpuState, NvmlReader

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def nvml() -> Iterator[object]:
    """The real pynvml, initialised; skips the module where there is no NVML device."""
    reader = NvmlReader()
    state = reader.open()
    reader.close()
    if state is not GpuState.OK:
        pytest.skip(f"no NVML device here ({reader.message})")
    import pynvml

    pynvml.nvmlInit()
    yield pynvml
    pynvml.nvmlShutdown()


def test_reader_covers_nvmls_device_list(nvml) -> None:  # type: ignore[no-untyped-def]
    """Multi-GPU path: one GpuDevice per NVML index, in order, each matching its own handle."""
    count = nvml.nvmlDeviceGetCount()
    reader = NvmlReader()
    assert reader.open() is GpuState.OK
    try:
        snap = reader.read()
    finally:
        reader.close()
    assert snap.ok and len(snap.devices) == count
    assert snap.message == f"{count} GPU{'s' if count != 1 else ''}"
    for i, d in enumerate(snap.devices):
        handle = nvml.nvmlDeviceGetHandleByIndex(i)
        uuid = nvml.nvmlDeviceGetUUID(handle)
        assert d.index == i
        assert d.uuid == (uuid.decode() if isinstance(uuid, bytes) else uuid)
        assert d.name
        assert d.memory_total_bytes and d.memory_total_bytes > 0
        for name in ("gpu_util_pct", "memory_used_bytes", "power_w", "temperature_c", "sm_clock_mhz", "pstate"):
            assert getattr(d, name) is not None, f"GPU {i}: {name} is n/a"
        assert d.clock_event_reasons
        assert 0 <= d.gpu_util_pct <= 100 and 0 < d.power_w < 2000 and 0 < d.temperature_c < 120
    assert snap.total_power_w is not None
    # every subset reads only its own devices
    for i in range(count):
        only = NvmlReader(only=[i])
        only.open()
        try:
            (d,) = only.read().devices
        finally:
            only.close()
        assert d.index == i and d.uuid == snap.devices[i].uuid


def test_energy_counter_moves(nvml) -> None:  # type: ignore[no-untyped-def]
    reader = NvmlReader()
    reader.open()
    try:
        a = reader.read()
        time.sleep(1.1)
        b = reader.read()
    finally:
        reader.close()
    if a.total_energy_j is None:
        pytest.skip("this GPU has no energy counter (n/a)")
    assert b.total_energy_j > a.total_energy_j


def test_meters_series_for_every_gpu(nvml) -> None:  # type: ignore[no-untyped-def]
    import httpx

    from workstation.telemetry.meters import Meters

    count = nvml.nvmlDeviceGetCount()

    async def once() -> object:
        async with httpx.AsyncClient() as http:
            meters = Meters(http)
            try:
                await meters.collect_once(0.2)
            finally:
                await meters.aclose()
            return meters

    meters = asyncio.run(once())
    names = set(meters.series.names())
    for i in range(count):
        assert {f"gpu{i}.util_pct", f"gpu{i}.power_w", f"gpu{i}.memory_used_bytes"} <= names
    assert f"gpu{count}.util_pct" not in names


LOAD = """
import sys, time, torch
n = torch.cuda.device_count()
xs = [torch.ones(256, 1024, 1024, dtype=torch.uint8, device=f"cuda:{i}") for i in range(n)]
torch.cuda.synchronize()
print("ready", flush=True)
time.sleep(60)
"""


def test_a_gpu_process_of_the_engine_tree_is_attributed(nvml) -> None:  # type: ignore[no-untyped-def]
    """A stand-in engine (a shell whose child holds memory on every GPU) is marked as ours."""
    pytest.importorskip("torch")
    proc = subprocess.Popen(
        ["sh", "-c", f'"{sys.executable}" -c "$LOAD_SCRIPT"; true'],
        env={**os.environ, "LOAD_SCRIPT": LOAD}, stdout=subprocess.PIPE, text=True, start_new_session=True,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        reader = NvmlReader()
        reader.open()
        try:
            snap = reader.read(engine_root_pid=proc.pid)
        finally:
            reader.close()
        visible = [p for d in snap.devices for p in d.processes or ()]
        if not visible:
            pytest.skip("NVML lists no compute processes here (processes in another PID namespace)")
        for d in snap.devices:
            ours = [p for p in d.processes or () if p.is_engine]
            assert len(ours) == 1, f"GPU {d.index}: {d.processes}"
            assert ours[0].pid != proc.pid  # the child, found through the tree
            assert ours[0].name and "python" in ours[0].name
            assert d.engine_memory_bytes and d.engine_memory_bytes >= 256 * 2**20
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
