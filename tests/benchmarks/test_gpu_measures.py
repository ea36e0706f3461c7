"""The GPU suite's real fleets on the speculating and several-engine trials
(benchmarks/gpu/measures.py): the tuner's agent check at the suite's sizes, here on the real
CPU engine (which does not draft)."""

import argparse
import importlib.util
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("gpu_measures", ROOT / "benchmarks" / "gpu" / "measures.py")
measures = importlib.util.module_from_spec(_spec)
sys.modules["gpu_measures"] = measures
_spec.loader.exec_module(measures)


@dataclass
class _Launcher:
    endpoint: Any


@dataclass
class _Trial:
    label: str
    launcher: _Launcher | None
    candidate: object | None = None
    more: list[_Launcher] = field(default_factory=list)

    @property
    def engines(self) -> int:
        return 1 + len(self.more)

    @property
    def endpoints(self) -> list[Any]:
        return [x.endpoint for x in ([self.launcher] if self.launcher else []) + self.more]


class _Results:
    def __init__(self) -> None:
        self.data: dict[str, Any] = {}
        self.puts: list[str] = []

    def put(self, key: str, value: Any) -> None:
        self.data[key] = value
        self.puts.append(key)


@pytest.mark.engine
async def test_the_fleets_on_trials_are_the_agent_check_at_the_suites_sizes(smollm2_engine, tmp_path):
    from workstation.config import Settings
    from workstation.services import Services

    base = _Trial("baseline (default)", _Launcher(smollm2_engine))
    spec = _Trial("n-gram speculation (CPU), 4 tokens", _Launcher(smollm2_engine), candidate=object())
    other = _Trial("--stream-interval 8", _Launcher(smollm2_engine), candidate=object())  # not speculating
    # two engines on the GPU (here the one CPU engine under two names, as the app names them apart)
    two = _Trial("2 engines on each GPU", _Launcher(smollm2_engine), candidate=object(),
                 more=[_Launcher(replace(smollm2_engine, name=f"{smollm2_engine.name}#2"))])
    tuner = argparse.Namespace(base=base, trials=[base, spec, other, two])
    results = _Results()
    args = argparse.Namespace(sessions=2, dry_run=True)
    async with Services(Settings(data_dir=tmp_path / "data")) as services:
        await measures.fleets_on_trials(args, results, tuner, services.fleet, time.monotonic() + 400)
    out = results.data["fleet_on_trials"]
    assert set(out) == {base.label, spec.label, two.label} and results.puts == ["fleet_on_trials"] * 3
    assert out[two.label]["endpoint"].count(smollm2_engine.base_url) == 2
    for label, row in out.items():
        assert row["sessions"] == 2 and sum(row["states"].values()) == 2, label
        assert row["tool_calls_mean"] >= 1 and row["generated_tok_s"] and row["wall_s"] > 0, label
        # read from the engine's /metrics around the run: the CPU engine does not draft
        assert row["spec_draft_tokens"] is None and row["spec_acceptance_rate"] is None, label
        assert row["prefix_hit_rate"] is not None and "why_not_done" in row, label


async def test_no_fleets_without_a_speculating_or_several_engine_trial_or_without_time(tmp_path):
    base = _Trial("baseline (default)", _Launcher("http://127.0.0.1:9"))
    results = _Results()
    args = argparse.Namespace(sessions=2, dry_run=True)

    def no_fleet(**_kw: Any) -> None:
        raise AssertionError("no fleet should be made")

    await measures.fleets_on_trials(args, results, argparse.Namespace(base=base, trials=[base]), no_fleet,
                                         time.monotonic() + 400)
    spec = _Trial("n-gram speculation (CPU), 4 tokens", _Launcher("http://127.0.0.1:9"), candidate=object())
    await measures.fleets_on_trials(args, results, argparse.Namespace(base=base, trials=[base, spec]),
                                         no_fleet, time.monotonic() + 30)
    assert results.data == {}
