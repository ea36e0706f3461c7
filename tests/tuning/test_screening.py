"""The side-by-side tuner's rules (no engine: measurements as data)."""

from pathlib import Path

import pytest

from workstation.config import Settings
from workstation.core.engine_sizing import GIB, GpuMemory
from workstation.core.profiles import PRESETS, Profile, flatten, split_flags
from workstation.engine.environment import EngineInstall
from workstation.engine.models import ModelSpec
from workstation.tuning.autotune import Candidate, candidates_for
from workstation.tuning.checks import model_traits
from workstation.tuning.results import BenchResult, LatencyStats, Slo, Workload
from workstation.tuning.screening import Measured, ScreeningTuner, SideBySide, Trial

LLAMA = model_traits("smollm2", {"architectures": ["LlamaForCausalLM"], "model_type": "llama"})
H200 = GpuMemory(0, "NVIDIA H200", total_bytes=150_754_820_096, free_bytes=150_000_000_000)
W = Workload(kind="synthetic", concurrency=4, input_len=512, output_len=512)


def _result(tok_s: float, ttft_p95_ms: float) -> BenchResult:
    return BenchResult(tool="loadgen", workload=W, profile="p", profile_args=(), profile_env=(), engine_version="0.26.0",
                       platform="cuda", model="smollm2", hardware={}, duration_s=8, completed=10, failed=0, cut=0,
                       output_tokens=1000, prompt_tokens=1000, output_tok_s=tok_s, total_tok_s=2 * tok_s,
                       requests_per_s=1.0, ttft=LatencyStats(p50_ms=ttft_p95_ms / 2, p95_ms=ttft_p95_ms),
                       tpot=LatencyStats(), itl=LatencyStats(), e2e=LatencyStats(), slo=Slo(), goodput_req_s=None,
                       goodput_pct=None)


def _measured(label: str, runs: list[float], ttft_p95: float = 100.0) -> Measured:
    return Measured(Trial(label, Profile(label, "")), [_result(x, ttft_p95) for x in runs])


def _tuner(tmp_path: Path) -> ScreeningTuner:
    engine = EngineInstall(python=Path("python3"), platform="cuda", version="0.26.0", managed=False)
    model = ModelSpec("smollm2", "smollm2", None, max_model_len=8192, builtin=True)
    base = flatten(PRESETS["default"], PRESETS, platform="cuda")
    return ScreeningTuner(Settings(data_dir=tmp_path), engine, model, None, base, traits=LLAMA,  # type: ignore[arg-type]
                          help_flags=None, candidates=[], side=SideBySide(8 * GIB, 0.1), log_dir=tmp_path)


def test_each_engine_gets_the_same_share_and_the_round_must_fit():
    side = SideBySide.for_round(6, H200, 8 * GIB)
    assert side.args() == ["--kv-cache-memory-bytes", str(8 * GIB), "--gpu-memory-utilization", "0.09"]
    assert side.gpu_memory_utilization * H200.total_bytes >= 12 * GIB  # 8 GiB cache + 4 GiB working memory
    with pytest.raises(ValueError, match="do not fit"):
        SideBySide.for_round(12, H200, 8 * GIB)


def test_a_gain_is_kept_above_twice_the_noise_and_within_the_ttft_guard(tmp_path):
    tuner = _tuner(tmp_path)
    base = _measured("base", [1000, 1010, 990])
    assert tuner._verdict(base, _measured("fast", [1200, 1210, 1190]), 1.0)[1] is True
    assert tuner._verdict(base, _measured("slightly", [1015, 1020, 1010]), 1.0)[1] is False
    delta, kept, note = tuner._verdict(base, _measured("laggy", [1300, 1300, 1300], ttft_p95=150.0), 1.0)
    assert delta == pytest.approx(30.0) and kept is False and "TTFT p95" in note


def test_kept_changes_combine_with_the_bigger_gain_winning_a_shared_flag():
    base = flatten(PRESETS["default"], PRESETS, platform="cuda")
    kept = [(Candidate.of(["--max-num-batched-tokens", "16384"]), 12.0),
            (Candidate.of(["--stream-interval", "8"]), 30.0),
            (Candidate.of(["--max-num-batched-tokens", "32768"]), 5.0)]
    combined = split_flags(list(ScreeningTuner.combine(base, kept).args))
    assert combined["--stream-interval"] == ["8"]
    assert combined["--max-num-batched-tokens"] == ["16384"]
    assert combined["--max-num-seqs"] == ["{max_num_seqs}"]  # the baseline's sized flags stay for the launcher


def test_cuda_candidates_lead_with_what_cuts_host_work_and_have_no_duplicates():
    base = list(flatten(PRESETS["default"], PRESETS, platform="cuda").args)
    cands = candidates_for("cuda", LLAMA, concurrency=32, base_args=base)
    # engines side by side on the GPU first (one engine's host work is the limit: 11 % GPU busy)
    assert [(c.change, c.engines, c.args) for c in cands[:2]] == [("2 engines on each GPU", 2, ()),
                                                                  ("4 engines on each GPU", 4, ())]
    flags = [next(iter(split_flags(list(c.args)))) for c in cands[2:]]
    assert flags[:4] == ["--stream-interval", "--api-server-count", "--speculative-config", "--max-num-batched-tokens"]
    assert len({(c.args, c.engines) for c in cands}) == len(cands)
    assert "--enforce-eager" not in base and "--no-enforce-eager" not in flags  # the GPU default is not eager


def test_guided_agents_get_two_and_four_engines_with_llguidance_first_on_cuda():
    """The H200's agent round: two engines lost to their xgrammar pools' CPU; llguidance takes
    1.2 cores, so two and four engines with it lead where the agents' replies are held to a grammar."""
    from dataclasses import replace

    base = list(flatten(PRESETS["default"], PRESETS, platform="cuda").args)
    guided = candidates_for("cuda", replace(LLAMA, structured_outputs=True), concurrency=32, base_args=base)
    first = guided[0]
    assert [(c.change, c.engines) for c in guided[:2]] == [
        ("2 engines on each GPU, llguidance, no async scheduling", 2),
        ("4 engines on each GPU, llguidance, no async scheduling", 4)]
    assert split_flags(list(first.args)) == split_flags(list(guided[1].args)) == {
        "--structured-outputs-config": ['{"backend":"guidance"}'], "--no-async-scheduling": []}
    assert [c.engines for c in guided[2:4]] == [2, 4]
    assert first.change not in {c.change for c in candidates_for("cuda", LLAMA, concurrency=32, base_args=base)}


@pytest.mark.engine  # the CLI reads the installed engine's options before it looks for a GPU
def test_side_by_side_without_a_gpu_is_refused_in_words(monkeypatch, capsys):
    from workstation import cli
    from workstation.engine import gpu_memory

    monkeypatch.setattr(gpu_memory, "read_gpu_memory", lambda *a, **k: [])
    assert cli.main(["tune", "--side-by-side", "2", "--reference", "vllm-defaults"]) != 0
    err = capsys.readouterr().err
    assert "--side-by-side needs a GPU" in err and "leave --side-by-side out" in err


@pytest.mark.engine
def test_side_by_side_gives_the_trial_engines_the_users_env_and_sizes_by_the_gpu_it_names(monkeypatch, capsys):
    from workstation import cli
    from workstation.core.errors import UserError
    from workstation.core.engine_sizing import GpuMemory
    from workstation.engine import gpu_memory
    from workstation.services import Services

    gib = 1 << 30
    gpus = [GpuMemory(0, "GPU zero", 80 * gib, 2 * gib), GpuMemory(1, "GPU one", 141 * gib, 140 * gib)]
    monkeypatch.setattr(gpu_memory, "read_gpu_memory", lambda *a, **k: list(gpus))
    seen = {}

    def screening_tuner(self, *args, **kw):  # type: ignore[no-untyped-def]
        seen.update(kw)
        raise UserError("stopped by the test before any engine starts")

    monkeypatch.setattr(Services, "screening_tuner", screening_tuner)
    argv = ["tune", "--side-by-side", "2", "--reference", "vllm-defaults",
            "--env", "CUDA_VISIBLE_DEVICES=1", "--env", "VLLM_LOGGING_LEVEL=DEBUG"]
    assert cli.main(argv) != 0
    assert seen["env"] == {"CUDA_VISIBLE_DEVICES": "1", "VLLM_LOGGING_LEVEL": "DEBUG"}
    assert [g.index for g in seen["gpu_memory"]()] == [1]  # GPU 0 is nearly full; the round fits on 1
    assert cli.main(["tune", "--side-by-side", "2", "--env", "CUDA_VISIBLE_DEVICES=7"]) != 0
    assert "CUDA_VISIBLE_DEVICES=7" in capsys.readouterr().err


async def test_every_repeat_sends_fresh_contents_to_every_engine_alike_and_the_order_turns(tmp_path, monkeypatch):
    from workstation.tuning import screening

    tuner = _tuner(tmp_path)
    seen: list[tuple[str, int, float]] = []

    async def run_workload(http, endpoint, workload, context, **kw):  # type: ignore[no-untyped-def]
        seen.append((endpoint, workload.seed, workload.warmup_s))
        return _result(1000.0, 100.0)

    monkeypatch.setattr(screening, "run_workload", run_workload)

    class _Launcher:
        def __init__(self, name: str) -> None:
            self.endpoint = name

    trials = [Trial(name, Profile(name, ""), launcher=_Launcher(name)) for name in ("a", "b", "c")]  # type: ignore[arg-type]
    w = Workload(kind="synthetic", concurrency=4, input_len=64, output_len=64, seed=7, warmup_s=4.0)
    measured = await tuner._measure(trials, w, None)
    assert [e for e, _, _ in seen] == ["a", "b", "c", "b", "c", "a", "c", "a", "b"]
    # repeat r: seed 7 + r on every engine (the same sizes and sharing, contents new to the
    # engine's prefix and grammar caches), the same warm-up
    assert [(e, seed) for e, seed, _ in seen] == [("a", 7), ("b", 7), ("c", 7), ("b", 8), ("c", 8), ("a", 8),
                                                  ("c", 9), ("a", 9), ("b", 9)]
    assert {warmup for _, _, warmup in seen} == {4.0}
    assert [len(m.runs) for m in measured] == [3, 3, 3] and [m.trial.label for m in measured] == ["a", "b", "c"]


async def test_a_run_probe_watches_every_run_and_its_record_reaches_the_summary(tmp_path, monkeypatch):
    from workstation.tuning import screening

    tuner = _tuner(tmp_path)
    calls: list[str] = []

    async def run_workload(http, endpoint, workload, context, **kw):  # type: ignore[no-untyped-def]
        calls.append(f"run {endpoint}")
        if endpoint == "bad":
            raise RuntimeError("the engine went away")
        return _result(1000.0, 100.0)

    class _Probe:
        def __init__(self, name: str) -> None:
            self.name = name

        def start(self) -> None:
            calls.append(f"start {self.name}")

        def stop(self, *, tokens: int) -> dict:
            calls.append(f"stop {self.name}")
            return {"engine": self.name, "tokens": tokens}

    monkeypatch.setattr(screening, "run_workload", run_workload)

    class _Launcher:
        def __init__(self, name: str) -> None:
            self.endpoint = name

    tuner.run_probe = lambda launchers: _Probe(launchers[0].endpoint)
    trials = [Trial(name, Profile(name, ""), launcher=_Launcher(name)) for name in ("a", "bad")]  # type: ignore[arg-type]
    w = Workload(kind="synthetic", concurrency=4, input_len=64, output_len=64)
    a, bad = await tuner._measure(trials, w, None)
    assert calls[:6] == ["start a", "run a", "stop a", "start bad", "run bad", "stop bad"]
    assert a.summary()["probes"] == [{"engine": "a", "tokens": _result(1000.0, 100.0).output_tokens}] * 3
    # a failed run is still watched to its end; its record says no tokens came
    assert bad.error and bad.probes[0] == {"engine": "bad", "tokens": 0}


async def test_a_trial_of_two_engines_starts_both_sized_for_half_the_sessions_and_loads_them_together(tmp_path, monkeypatch):
    from workstation.tuning import screening

    made: list[dict] = []

    class _Launcher:
        def __init__(self, n: int, kw: dict) -> None:
            self.endpoint, self.kw, self.stopped = f"e{n}", kw, False

        async def start(self, progress=None):  # type: ignore[no-untyped-def]
            return self.endpoint

        async def stop(self) -> None:
            self.stopped = True

    class _Launchers:
        def __init__(self, *a, **k) -> None:  # type: ignore[no-untyped-def]
            pass

        def __call__(self, profile, env, **kw):  # type: ignore[no-untyped-def]
            made.append({"profile": profile, **kw})
            return _Launcher(len(made), kw)

    loads: list[object] = []

    async def run_workload(http, endpoint, workload, context, **kw):  # type: ignore[no-untyped-def]
        loads.append(endpoint)
        return _result(1000.0, 100.0)

    monkeypatch.setattr(screening, "Launchers", _Launchers)
    monkeypatch.setattr(screening, "run_workload", run_workload)
    tuner = _tuner(tmp_path)
    tuner.sessions = 32
    two = Candidate.of([], engines=2)
    trial = Trial(two.change, tuner.trial_profile(two), candidate=two)
    assert trial.engines == 2 and trial.profile.args == tuner.baseline.args
    await tuner._start_one(trial, 0.0)
    # each sized by the launcher for its share of the sessions (32 over 2)
    assert [(m["sessions"], m["engines_on_device"], m["place"]) for m in made] == [(32, 2, 1), (32, 2, 2)]
    assert all(m["extra_args"] == tuner.side.args() for m in made)  # the round's fixed memory share each
    assert [str(m["log_dir"].name) for m in made] == ["engine1", "engine2"]
    (measured,) = await tuner._measure([trial], W, None)
    assert loads == [["e1", "e2"]] * 3 and len(measured.runs) == 3
    assert measured.summary()["engines"] == 2
    launchers, tuner.trials = trial.launchers, [trial]
    await tuner.close()
    assert all(launcher.stopped for launcher in launchers) and trial.launcher is None
    # kept with another change, the combination keeps the engines
    combined = ScreeningTuner.combine(tuner.baseline, [(two, 40.0), (Candidate.of(["--stream-interval", "8"]), 10.0)])
    assert combined.engines_per_gpu == 2 and split_flags(list(combined.args))["--stream-interval"] == ["8"]
