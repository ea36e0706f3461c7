"""NvmlReader against a scripted NVML (deterministic) and the real library's absence here."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator

import psutil
import pytest

from tests.telemetry.fake_nvml import GPU_IS_LOST, LIBRARY_NOT_FOUND, NOT_SUPPORTED, UNKNOWN, Fail, FakeNvml, device
from workstation.telemetry.nvml import (
    GpuState,
    NvmlReader,
    decode_clock_event_reasons,
    descends_from,
)


@pytest.fixture
def engine_tree() -> Iterator[tuple[int, int]]:
    """A stand-in engine: a shell (the root) with a child process. Yields (root, child)."""
    proc = subprocess.Popen(["sh", "-c", "sleep 60 & wait"], start_new_session=True)
    try:
        deadline = time.monotonic() + 10
        children: list[psutil.Process] = []
        while time.monotonic() < deadline and not children:
            children = psutil.Process(proc.pid).children()
            time.sleep(0.01)
        assert children, "the stand-in engine did not start its child"
        yield proc.pid, children[0].pid
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)


def test_clock_event_reasons_in_words() -> None:
    assert decode_clock_event_reasons(0) == ("none",)
    assert decode_clock_event_reasons(0x1) == ("idle",)
    assert decode_clock_event_reasons(0x4) == ("software power cap",)
    assert decode_clock_event_reasons(0x44) == ("software power cap", "hardware thermal slowdown")
    assert decode_clock_event_reasons(0x1001) == ("idle", "other (0x1000)")


def test_no_nvml_library_is_a_state_not_a_crash() -> None:
    reader = NvmlReader(FakeNvml(init_error=LIBRARY_NOT_FOUND))
    assert reader.open() is GpuState.NO_NVML
    snap = reader.read()
    assert snap.state is GpuState.NO_NVML
    assert snap.message.startswith("no GPU")
    assert "NVML" in snap.message
    assert snap.devices == ()
    assert json.loads(json.dumps(snap.to_dict()))["devices"] == []


def test_nvml_without_devices_says_no_gpu() -> None:
    reader = NvmlReader(FakeNvml(devices=[]))
    assert reader.open() is GpuState.NO_GPU
    assert reader.read().message == "no GPU: NVML found no NVIDIA device"


def test_real_library_absent_on_this_machine() -> None:
    reader = NvmlReader()
    state = reader.open()
    try:
        if state is GpuState.OK:
            pytest.skip("this machine has an NVIDIA GPU; the gpu-marked tests cover it")
        snap = reader.read()
        assert snap.state in (GpuState.NO_NVML, GpuState.NO_GPU)
        assert snap.message.startswith("no GPU")
    finally:
        reader.close()


def test_every_field_of_two_gpus() -> None:
    fake = FakeNvml(devices=[device(), device(uuid="GPU-0001", bus_id="00000000:2A:00.0", pstate=8,
                                              util=(0, 0), reasons=0x1, power_mw=125_000)])
    reader = NvmlReader(fake)
    assert reader.open() is GpuState.OK
    snap = reader.read()
    assert snap.ok and snap.message == "2 GPUs" and snap.driver_version == "580.159.04"
    d0, d1 = snap.devices
    assert (d0.index, d1.index) == (0, 1)
    assert d0.name == "NVIDIA H200" and d0.uuid == "GPU-0000" and d1.pci_bus_id == "00000000:2A:00.0"
    assert (d0.gpu_util_pct, d0.mem_util_pct) == (97, 61)
    assert d0.memory_used_bytes == 121 * 2**30 and d0.memory_total_bytes == 143 * 2**30
    assert d0.memory_reserved_bytes == 500 * 2**20
    assert d0.power_w == pytest.approx(690.5) and d0.power_limit_w == pytest.approx(700.0)
    assert d0.energy_j == pytest.approx(5000.0)
    assert d0.temperature_c == 62
    assert (d0.sm_clock_mhz, d0.mem_clock_mhz, d0.sm_clock_max_mhz) == (1755, 3201, 1980)
    assert d0.clock_event_reasons == ("software power cap",) and d1.clock_event_reasons == ("idle",)
    assert d0.pstate == 0 and d1.pstate == 8
    assert d0.fan_pct is None and "fan" in d0.unsupported
    assert snap.total_power_w == pytest.approx(815.5)
    assert snap.total_energy_j == pytest.approx(10_000.0)
    out = json.loads(json.dumps(snap.to_dict()))
    assert out["devices"][0]["fan_pct"] == "n/a"
    assert out["devices"][1]["pstate"] == "P8"
    assert out["devices"][0]["clock_event_reasons"] == ["software power cap"]


def test_unsupported_fields_are_na_and_not_asked_again() -> None:
    fake = FakeNvml(devices=[device(energy_mj=Fail(NOT_SUPPORTED), processes=Fail(NOT_SUPPORTED))])
    reader = NvmlReader(fake)
    reader.open()
    for _ in range(3):
        snap = reader.read()
    d = snap.devices[0]
    assert d.energy_j is None and d.processes is None and d.engine_memory_bytes is None
    assert set(d.unsupported) == {"energy", "fan", "processes"}
    assert fake.calls["energy_mj"] == 1 and fake.calls["fan"] == 1 and fake.calls["processes"] == 1
    assert fake.calls["power_mw"] == 3
    assert snap.total_energy_j is None
    assert snap.to_dict()["devices"][0]["processes"] == "n/a"


def test_a_transient_error_is_na_once_then_asked_again() -> None:
    fake = FakeNvml(devices=[device(temperature=Fail(UNKNOWN))])
    reader = NvmlReader(fake)
    reader.open()
    assert reader.read().devices[0].temperature_c is None
    fake.devices[0]["temperature"] = 55
    assert reader.read().devices[0].temperature_c == 55
    assert "temperature" not in reader.read().devices[0].unsupported


def test_gpu_lost_turns_the_state_to_error() -> None:
    fake = FakeNvml(devices=[device()])
    reader = NvmlReader(fake)
    reader.open()
    fake.devices[0]["power_mw"] = Fail(GPU_IS_LOST)
    snap = reader.read()
    assert snap.state is GpuState.ERROR and "GPU lost" in snap.message and snap.devices == ()


def test_unknown_pstate_and_unavailable_process_memory() -> None:
    fake = FakeNvml(devices=[device(pstate=32, processes=[(4242424, 2**64 - 1)])])
    reader = NvmlReader(fake)
    reader.open()
    d = reader.read().devices[0]
    assert d.pstate is None
    assert d.processes is not None and d.processes[0].used_memory_bytes is None
    assert d.processes[0].name is None  # not visible here
    assert d.processes[0].is_engine is False


def test_engine_process_tree_is_attributed(engine_tree: tuple[int, int]) -> None:
    root, child = engine_tree
    other = os.getpid()
    fake = FakeNvml(devices=[
        device(processes=[(child, 40 * 2**30), (other, 2**30)]),
        device(processes=[(root, 3 * 2**30)]),
        device(processes=[]),
    ])
    reader = NvmlReader(fake)
    reader.open()
    snap = reader.read(engine_root_pid=root, app_root_pid=other)
    d0, d1, d2 = snap.devices
    by_pid = {p.pid: p for p in d0.processes}
    assert by_pid[child].is_engine and by_pid[child].name == "sleep"
    assert not by_pid[other].is_engine and by_pid[other].is_app
    assert d0.engine_memory_bytes == 40 * 2**30
    assert d1.processes[0].is_engine and d1.engine_memory_bytes == 3 * 2**30
    assert d2.processes == () and d2.engine_memory_bytes == 0 and not d2.has_engine_process
    # without an engine pid nothing is marked
    assert not any(p.is_engine for p in reader.read().devices[0].processes)


def test_descends_from(engine_tree: tuple[int, int]) -> None:
    root, child = engine_tree
    assert descends_from(child, root)
    assert descends_from(root, root)
    assert not descends_from(root, child)
    assert not descends_from(4242424, root)


def test_close_shuts_nvml_down() -> None:
    fake = FakeNvml(devices=[device()])
    reader = NvmlReader(fake)
    reader.open()
    reader.close()
    assert fake.calls["shutdown"] == 1


def test_only_some_devices() -> None:
    fake = FakeNvml(devices=[device(), device(uuid="GPU-1"), device(uuid="GPU-2")])
    reader = NvmlReader(fake, only=[0, 2])
    reader.open()
    assert [d.uuid for d in reader.read().devices] == ["GPU-0000", "GPU-2"]
    none = NvmlReader(FakeNvml(devices=[device()]), only=[5])
    assert none.open() is GpuState.NO_GPU
