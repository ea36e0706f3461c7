"""The live cost meter: token and energy deltas from samples, re-priced on change."""

from __future__ import annotations

import pytest

from tests.telemetry.fake_nvml import FakeNvml, Fail, NOT_SUPPORTED, device
from workstation.core.cost import ApiPrice, SelfHostAssumptions, SelfHostMode
from workstation.telemetry.cost_meter import CostMeter
from workstation.telemetry.nvml import GpuSnapshot, GpuState, NvmlReader, no_gpu_snapshot
from workstation.telemetry.vllm_metrics import EngineMetricsSample, down_sample

API = ApiPrice("openai", "gpt-4.1-mini", 0.40, 0.10, 1.60)


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def engine(endpoint: str, gen: float, prompt: float, cached: float = 0.0) -> EngineMetricsSample:
    return EngineMetricsSample(endpoint=endpoint, t_mono=0.0, t_wall=0.0, up=True,
                               generation_tokens_total=gen, prompt_tokens_total=prompt,
                               cached_prompt_tokens_total=cached)


def test_tokens_are_counter_deltas_from_the_first_scrape() -> None:
    m = CostMeter(api=API, assumptions=SelfHostAssumptions(), clock=Clock())
    m.on_engine_sample(engine("a", 5000, 9000))  # baseline: tokens before the meter don't count
    m.on_engine_sample(engine("a", 6000, 11000, 500))
    m.on_engine_sample(engine("b", 10, 10))  # second endpoint's baseline
    m.on_engine_sample(engine("b", 110, 60))
    m.on_engine_sample(down_sample("a", "gone"))  # ignored
    t = m.tokens
    assert (t.output_tokens, t.prompt_tokens, t.cached_prompt_tokens) == (1100, 2050, 500)


def test_engine_restart_counts_from_zero() -> None:
    m = CostMeter(api=API, assumptions=SelfHostAssumptions(), clock=Clock())
    m.on_engine_sample(engine("a", 5000, 9000))
    m.on_engine_sample(engine("a", 40, 100))  # restarted: 40 and 100 are new tokens
    assert (m.tokens.output_tokens, m.tokens.prompt_tokens) == (40, 100)


def _snap(fake: FakeNvml, t: float) -> GpuSnapshot:
    reader = NvmlReader(fake)
    reader.open()
    s = reader.read()
    return GpuSnapshot(state=s.state, message=s.message, t_mono=t, t_wall=t, devices=s.devices)


def test_energy_from_counters_or_power_and_priced() -> None:
    clock = Clock()
    a = SelfHostAssumptions(mode=SelfHostMode.ENERGY, electricity_usd_per_kwh=0.15, pue=1.0)
    m = CostMeter(api=API, assumptions=a, clock=clock)
    # GPU 0 has an energy counter; GPU 1 has none, so its 500 W are integrated over time
    fake = FakeNvml(devices=[device(energy_mj=1_000_000), device(energy_mj=Fail(NOT_SUPPORTED), power_mw=500_000)])
    m.on_gpu_snapshot(_snap(fake, 0.0))
    fake.devices[0]["energy_mj"] = 1_000_000 + 3_600_000_000  # +3.6 MJ = 1 kWh
    m.on_gpu_snapshot(_snap(fake, 3600.0))
    # GPU 1: 500 W × 3600 s = 1.8 MJ = 0.5 kWh
    assert m.energy_j == pytest.approx(3.6e6 + 1.8e6)
    clock.t = 3600.0
    m.on_engine_sample(engine("a", 0, 0))
    m.on_engine_sample(engine("a", 1_000_000, 0))
    est = m.estimate()
    # 1.5 kWh × $0.15 = $0.225; API: 1 M output × $1.60 = $1.60; saving 1 − 0.225/1.6 = 85.9375 %
    assert est.self_host_usd == pytest.approx(0.225)
    assert est.api_usd == pytest.approx(1.60)
    assert est.savings_pct == pytest.approx(85.9375)
    assert est.joules_per_token == pytest.approx(5.4)


def test_no_gpu_leaves_energy_unknown() -> None:
    m = CostMeter(api=API, assumptions=SelfHostAssumptions(), clock=Clock())
    m.on_gpu_snapshot(no_gpu_snapshot(GpuState.NO_NVML, "no GPU: the NVIDIA driver library (NVML) was not found"))
    assert m.energy_j is None
    assert m.estimate().self_host_usd is None


def test_changing_price_or_assumptions_reprices_the_window() -> None:
    clock = Clock()
    m = CostMeter(api=API, assumptions=SelfHostAssumptions(mode=SelfHostMode.GPU_HOURLY, gpu_hourly_usd=2.0), clock=clock)
    seen = []
    m.updated.connect(seen.append)
    clock.t = 1800.0
    m.set_assumptions(SelfHostAssumptions(mode=SelfHostMode.GPU_HOURLY, gpu_hourly_usd=4.0))
    assert seen[-1].self_host_usd == pytest.approx(2.0)  # $4/h × 0.5 h
    m.set_api(None)
    assert seen[-1].api_usd is None and "no paid-API price chosen" in seen[-1].notes
    m.reset()
    assert m.estimate().elapsed_s == 0.0
