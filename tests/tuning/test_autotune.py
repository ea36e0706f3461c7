import asyncio
import json

import pytest

from workstation.core.profiles import PRESETS, Profile, flatten, split_flags
from workstation.tuning.autotune import (
    Autotuner,
    Candidate,
    _Measured,
    candidates_for,
    cv_pct,
    decide,
    pooled_noise_pct,
)
from workstation.tuning.checks import model_traits
from workstation.tuning.results import Workload

LLAMA = model_traits("smollm2", {"architectures": ["LlamaForCausalLM"], "model_type": "llama"})
NEMOTRON = model_traits("nemotron", {"architectures": ["NemotronHForCausalLM"], "model_type": "nemotron_h",
                                     "hybrid_override_pattern": "M-M*", "num_nextn_predict_layers": 1})


def test_noise_and_decision_rule():
    assert cv_pct([100, 100, 100]) == 0.0
    assert cv_pct([90, 100, 110]) == pytest.approx(10.0)
    assert pooled_noise_pct([[90, 100, 110], [100, 100, 100]]) == pytest.approx(10 / 2 ** 0.5)
    assert decide(100.0, 106.0, 2.0) == (pytest.approx(6.0), True)
    assert decide(100.0, 106.0, 3.5) == (pytest.approx(6.0), False)  # gain must exceed twice the noise
    assert decide(100.0, 90.0, 0.0)[1] is False


def test_cpu_candidates_cover_the_knobs_that_exist_there():
    base = list(flatten(PRESETS["default"], PRESETS, platform="cpu").args)
    cands = candidates_for("cpu", LLAMA, concurrency=8, base_args=base, kv_cache_bytes=1 << 30)
    flags = [next(iter(split_flags(list(c.args)))) for c in cands]
    assert flags == ["--max-num-batched-tokens", "--max-num-seqs", "--speculative-config", "--kv-cache-memory-bytes",
                     "--stream-interval", "--no-enforce-eager"]
    assert cands[0].args == ("--max-num-batched-tokens", "4096")
    assert cands[1].args == ("--max-num-seqs", "4")
    assert json.loads(cands[2].args[1])["method"] == "ngram"
    assert cands[3].change == "KV cache 1 -> 2 GiB"
    assert cands[-1].slow_start
    # a compiled baseline has no eager/compiled step to try
    compiled = candidates_for("cpu", LLAMA, concurrency=8, base_args=[], kv_cache_bytes=None)
    assert all("--no-enforce-eager" not in c.args for c in compiled)


def test_gpu_candidates_follow_the_reports_ladder_for_hybrid_mtp_models():
    cands = candidates_for("cuda", NEMOTRON, concurrency=256, base_args=[])
    assert [c.change for c in cands[:5]] == [
        "MTP 3 + OMP_NUM_THREADS=1", "--async-scheduling", "Mamba backend FlashInfer", "MTP 3 -> 1",
        "SSM state FP16 + stochastic rounding"]
    assert cands[0].env == (("OMP_NUM_THREADS", "1"),)
    assert ("--max-num-seqs", "256") in [c.args for c in cands]
    plain = candidates_for("cuda", LLAMA, concurrency=20, base_args=["--enforce-eager"])
    assert plain[0].slow_start and all("mtp" not in c.change.lower() for c in plain)
    assert ("--max-num-seqs", "32") in [c.args for c in plain]


def make_tuner(values, *, budget_s=1000.0, candidates=None, durations=None):
    """An autotuner whose measurements are scripted: profile args → runs."""
    calls = []

    async def measure(profile: Profile):
        calls.append(profile)
        key = len(calls) - 1
        if durations:
            await asyncio.sleep(durations[key])
        runs = values[key]
        if isinstance(runs, Exception):
            raise runs
        return _Measured(list(runs), [], start_s=0.0)

    from pathlib import Path

    from workstation.engine.environment import EngineInstall
    from workstation.engine.models import ModelSpec

    engine = EngineInstall(python=Path("/nonexistent/python"), platform="cpu", version="0.32.0+cpu", managed=True)
    model = ModelSpec("smollm2", "x", None, max_model_len=8192, builtin=True)
    help_flags = {"--enforce-eager", "--no-enforce-eager", "--max-num-seqs", "--max-num-batched-tokens",
                  "--speculative-config", "--stream-interval"}
    tuner = Autotuner(
        None, engine, model, None, flatten(PRESETS["default"], PRESETS),  # type: ignore[arg-type]
        Workload(kind="synthetic", concurrency=8, input_len=64, output_len=64, duration_s=1.0, warmup_s=0.0),
        shape=None, traits=LLAMA, help_flags=help_flags,
        candidates=candidates or [Candidate.of(["--max-num-seqs", "4"]), Candidate.of(["--max-num-batched-tokens", "4096"]),
                                  Candidate.of(["--stream-interval", "4"])],
        budget_s=budget_s, log_dir=Path("/nonexistent"), measure=measure,
    )
    return tuner, calls


async def test_keeps_only_gains_above_twice_the_noise_and_builds_on_them():
    tuner, calls = make_tuner([
        [100, 101, 99],     # baseline, noise ~1%
        [103, 102, 104],    # +3%: above 2x noise -> kept
        [104, 102, 103],    # +0%: not kept
        [80, 81, 79],       # worse
    ])
    report = await tuner.run()
    assert [s.kept for s in report.steps] == [True, True, False, False]
    assert report.steps[1].delta_pct == pytest.approx(3.0)
    assert report.noise_pct == pytest.approx(pooled_noise_pct([[100, 101, 99], [103, 102, 104], [104, 102, 103],
                                                               [80, 81, 79]]))
    # the change kept in step 1 is in every later trial and in the best profile
    assert "--max-num-seqs" in calls[2].args and "--max-num-seqs" in calls[3].args
    assert "--max-num-batched-tokens" not in calls[3].args
    assert report.best_profile is not None and "--max-num-seqs" in report.best_profile.args
    data = report.to_json()
    assert set(data["steps"][0]) >= {"change", "output_tok_s", "delta_pct", "kept"}
    assert data["noise_pct"] == round(report.noise_pct, 2) and data["baseline_tok_s"] == 100.0
    assert "noise" in report.table()[-1]


def _runs(tok_s: float, ttft_p95_ms: float, ended_early: int = 0):
    from dataclasses import replace

    from tests.tuning.test_screening import _result

    return replace(_result(tok_s, ttft_p95_ms), ended_early=ended_early)


def test_the_verdict_guards_ttft_and_refuses_a_change_that_ends_requests_early():
    from workstation.tuning.autotune import RunsSummary, verdict

    base = RunsSummary.of(100.0, [_runs(100, 80)])
    assert verdict(base, RunsSummary.of(130.0, [_runs(130, 85)]), 5.0) == (pytest.approx(30.0), True, "")
    delta, kept, note = verdict(base, RunsSummary.of(130.0, [_runs(130, 95)]), 5.0)  # +19 % TTFT p95
    assert not kept and "TTFT p95 95 ms vs 80 ms" in note
    # ignore_eos: only the engine ends a request early (the H200's n-gram drafts under a grammar)
    delta, kept, note = verdict(base, RunsSummary.of(117.0, [_runs(117, 60, ended_early=4)]), 5.0)
    assert delta == pytest.approx(17.0) and not kept and "ended 40% of the requests before their length" in note
    # what the baseline does too is no fault of the change
    early = RunsSummary.of(100.0, [_runs(100, 80, ended_early=4)])
    assert verdict(early, RunsSummary.of(130.0, [_runs(130, 80, ended_early=4)]), 5.0)[1]


async def test_the_sequential_tuner_has_the_same_guards():
    calls = []
    scripted = [[100, 101, 99], [140, 141, 139], [130, 131, 129], [120, 121, 119]]
    p95 = [80, 120, 81, 80]
    early = [0, 0, 0, 5]

    tuner, _ = make_tuner(scripted)

    async def measure(profile: Profile):
        i = len(calls)
        calls.append(profile)
        return _Measured(list(scripted[i]), [_runs(x, p95[i], early[i]) for x in scripted[i]], start_s=0.0)

    tuner._measure_override = measure
    report = await tuner.run()
    assert [s.kept for s in report.steps] == [True, False, True, False]
    assert "TTFT p95" in report.steps[1].note and "before their length" in report.steps[3].note


async def test_noise_raises_the_bar():
    tuner, _ = make_tuner([[90, 100, 110], [106, 105, 107], [100, 100, 100], [100, 100, 100]])
    report = await tuner.run()
    assert report.steps[1].delta_pct == pytest.approx(6.0)
    assert not report.steps[1].kept  # 6% < 2 x ~5.8% pooled noise


async def test_a_change_that_breaks_the_engine_is_a_row_not_a_crash():
    tuner, _ = make_tuner([[100, 100, 100], RuntimeError("engine exited with code 1 during start-up"),
                           [120, 121, 119], [100, 100, 100]])
    report = await tuner.run()
    assert report.steps[1].note.startswith("failed: engine exited")
    assert report.steps[2].kept


async def test_changes_the_engine_cannot_take_are_skipped_with_the_reason():
    tuner, calls = make_tuner([[100, 100, 100]], candidates=[Candidate.of(["--async-schedulingg"])])
    report = await tuner.run()
    assert "not applicable" in report.steps[1].note and "does not know" in report.steps[1].note
    assert len(calls) == 1


async def test_stops_at_the_time_budget():
    tuner, calls = make_tuner([[100, 100, 100]] * 4, budget_s=0.5, durations=[0.05, 0.05, 0.05, 0.05])
    # each step is estimated from the baseline's start time and the workload: far more than 0.5 s
    report = await tuner.run()
    assert len(calls) == 1 and report.stopped_by_budget
    assert all(s.note.startswith("skipped") for s in report.steps[1:])


async def test_a_step_running_at_the_deadline_is_cancelled():
    tuner, calls = make_tuner([[100, 100, 100], [100, 100, 100]], budget_s=0.4, durations=[0.0, 5.0],
                              candidates=[Candidate.of(["--max-num-seqs", "4"])])
    tuner._estimate_s = lambda c: 0.0  # pretend it fits
    report = await tuner.run()
    assert report.steps[1].note == "stopped at the time budget" and report.stopped_by_budget
    assert report.elapsed_s < 5.0  # the 5-second step was cancelled, not waited for


def test_the_grammar_backend_is_a_candidate_only_where_the_agents_send_a_grammar():
    guided = model_traits("smollm2", {"architectures": ["LlamaForCausalLM"], "model_type": "llama"},
                          structured_outputs=True)
    for platform in ("cpu", "cuda"):
        with_grammar = candidates_for(platform, guided, concurrency=8, base_args=[])
        without = candidates_for(platform, LLAMA, concurrency=8, base_args=[])
        picked = [c for c in with_grammar if c.change == "structured outputs by llguidance"]
        assert len(picked) == 1 and json.loads(picked[0].args[1]) == {"backend": "guidance"}
        assert all("--structured-outputs-config" not in c.args for c in without)


def test_candidates_are_sized_for_the_sequences_in_flight_not_the_streams():
    from dataclasses import replace

    from workstation.core.traffic import Distribution
    from workstation.tuning.tune_plan import sequences_in_flight

    plain = Workload(kind="synthetic", concurrency=4, input_len=64, output_len=32)
    assert sequences_in_flight(plain) == 4
    assert sequences_in_flight(replace(plain, guided_choices=6)) == 24  # a guided draw asks for n=6

    class Shape:  # what sequences_in_flight reads of a captured shape
        choices = Distribution.of([6, 6, 6, 2])

    replay = Workload(kind="replay", concurrency=32, shape="s")
    assert sequences_in_flight(replay, Shape()) == 32 * 6  # type: ignore[arg-type]
    assert sequences_in_flight(replay, None) == 32


async def test_a_profile_of_two_engines_is_measured_on_both_started_one_after_another(tmp_path, monkeypatch):
    """The sequential tuner's engines for ``engines_per_gpu=2``: each sized by the launcher for
    its share (``engines_on_device``, its place), the second started once the first serves
    (vLLM's memory profiling would see the other's allocations), both stopped at the end."""
    from pathlib import Path

    from workstation.config import Settings
    from workstation.engine.environment import EngineInstall
    from workstation.engine.models import ModelSpec
    from workstation.tuning import bench

    events: list[str] = []

    class _Launcher:
        def __init__(self, kw: dict) -> None:
            self.kw, self.endpoint = kw, f"e{kw['place']}"

        async def start(self, progress=None):  # type: ignore[no-untyped-def]
            events.append(f"start {self.endpoint}")
            await asyncio.sleep(0.01)
            events.append(f"ready {self.endpoint}")

        async def stop(self) -> None:
            events.append(f"stop {self.endpoint}")

    made: list[_Launcher] = []

    class _Launchers:
        def __init__(self, *a, **k) -> None:  # type: ignore[no-untyped-def]
            pass

        def __call__(self, profile, env, **kw):  # type: ignore[no-untyped-def]
            made.append(_Launcher(kw))
            return made[-1]

    monkeypatch.setattr(bench, "Launchers", _Launchers)
    engine = EngineInstall(python=Path("python3"), platform="cuda", version="0.26.0", managed=False)
    model = ModelSpec("smollm2", "smollm2", None, max_model_len=8192, builtin=True)
    profile = Profile("two", "", engines_per_gpu=2)
    async with bench.managed_engines(Settings(data_dir=tmp_path), engine, model, profile, log_dir=tmp_path,
                                     sessions=32) as launchers:
        assert [launcher.endpoint for launcher in launchers] == ["e1", "e2"]
        assert events == ["start e1", "ready e1", "start e2", "ready e2"]
    assert events[-2:] == ["stop e1", "stop e2"]
    assert [(m.kw["sessions"], m.kw["engines_on_device"], m.kw["place"]) for m in made] == [(32, 2, 1), (32, 2, 2)]
    assert [m.kw["log_dir"].name for m in made] == ["engine1", "engine2"]
