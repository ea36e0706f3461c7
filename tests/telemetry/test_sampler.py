"""Samplers run their reader on a thread of their own and publish on the loop."""

from __future__ import annotations

import asyncio
import threading

from tests.telemetry.fake_nvml import LIBRARY_NOT_FOUND, FakeNvml, device
from workstation.telemetry.nvml import GpuState, NvmlReader
from workstation.telemetry.sampler import GpuSampler, HostSampler


class ThreadRecordingReader(NvmlReader):
    def __init__(self, fake: FakeNvml) -> None:
        super().__init__(fake)
        self.threads: set[str] = set()

    def read(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        self.threads.add(threading.current_thread().name)
        return super().read(*args, **kwargs)


async def test_gpu_sampler_reads_off_the_loop_and_emits_on_it() -> None:
    reader = ThreadRecordingReader(FakeNvml(devices=[device(), device()]))
    sampler = GpuSampler(interval_s=0.05, reader=reader, engine_pid=lambda: None)
    got: list = []
    emit_threads: set[str] = set()

    def on_sample(snap) -> None:  # type: ignore[no-untyped-def]
        got.append(snap)
        emit_threads.add(threading.current_thread().name)

    sampler.sampled.connect(on_sample)
    await sampler.start()
    try:
        for _ in range(200):
            if len(got) >= 3:
                break
            await asyncio.sleep(0.02)
    finally:
        await sampler.aclose()
    assert len(got) >= 3
    assert all(s.state is GpuState.OK and len(s.devices) == 2 for s in got)
    assert reader.threads == {n for n in reader.threads if n.startswith("ws-nvml")} and reader.threads
    assert emit_threads == {threading.current_thread().name}
    assert not sampler.running


async def test_no_gpu_emits_once_and_stops() -> None:
    sampler = GpuSampler(interval_s=0.05, reader=NvmlReader(FakeNvml(init_error=LIBRARY_NOT_FOUND)))
    got: list = []
    sampler.sampled.connect(got.append)
    await sampler.start()
    for _ in range(100):
        if not sampler.running:
            break
        await asyncio.sleep(0.02)
    assert not sampler.running
    assert len(got) == 1 and got[0].state is GpuState.NO_NVML
    assert sampler.latest is got[0]
    await sampler.aclose()


async def test_host_sampler_once_and_interval_setter() -> None:
    sampler = HostSampler(interval_s=5.0)
    sampler.interval_s = 0.0
    assert sampler.interval_s > 0  # clamped, never a busy loop
    s = await sampler.read_once()
    assert s.app is not None and sampler.ticks == 1
    await sampler.aclose()
