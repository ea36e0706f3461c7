"""The tuning verbs on the command line, on an empty data dir (no engine started)."""

import json

from workstation.cli import main


def test_profiles_save_list_delete(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("WORKSTATION_DATA_DIR", str(tmp_path))
    assert main(["profiles", "save", "fast", "--from", "default", "--args", "--max-num-seqs 64",
                 "--env", "OMP_NUM_THREADS=1", "--description", "mine"]) == 0
    assert main(["profiles"]) == 0
    out = capsys.readouterr().out
    assert "fast (from default): mine  [yours]" in out and "    --max-num-seqs 64" in out
    assert "ladder-3-flashinfer (from ladder-2-async)" in out and "[cuda only]" in out
    assert main(["profiles", "save", "bad", "--env", "NOEQUALS"]) == 2
    assert main(["profiles", "delete", "fast"]) == 0
    assert main(["profiles", "delete", "fast"]) == 2


def test_shape_bench_and_tune_without_data_say_what_to_do(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("WORKSTATION_DATA_DIR", str(tmp_path))
    assert main(["shape", "list"]) == 0
    assert "no captured traffic shapes yet" in capsys.readouterr().out
    assert main(["bench", "results"]) == 0
    assert "no results" in capsys.readouterr().out
    assert main(["tune", "--shape", "latest", "--budget-s", "60"]) == 2
    err = capsys.readouterr().err
    assert "no captured traffic shape yet" in err and "workstation shape capture" in err
    # with no shape asked for, tune goes on with the built-in agent-like workload (here it then
    # stops: this data dir has no engine)
    # the default model is SmolLM2, for which the app's agents are guided: the built-in
    # workload is what the guided protocol sends, and the verb says so
    assert main(["tune", "--budget-s", "60"]) == 2
    err = capsys.readouterr().err
    assert ("tuning for the built-in agent-like workload, as the guided protocol sends it (the app's agents "
            "are guided for smollm2) (guided agent turns of 500 (+300 shared) tokens") in err
    assert "guided: regex, n=6 draws" in err
    assert "engine" in err.splitlines()[-1]
    assert main(["tune", "--budget-s", "60", "--guided", "no"]) == 2
    err = capsys.readouterr().err
    assert "tuning for the built-in agent-like workload, plain (--guided no) (256 (+1300 shared)/48 x 4 streams" in err
    assert main(["tune", "--budget-s", "60", "--model", "Qwen2.5-Coder-32B"]) == 2
    assert "plain (the app's agents are not guided for Qwen2.5-Coder-32B) (256 (+1300" in capsys.readouterr().err
    # bench, with no shape captured either, benchmarks the same built-in workload
    assert main(["bench", "--endpoint", "http://127.0.0.1:9", "--model", "smollm2", "--tool", "vllm"]) == 2
    err = capsys.readouterr().err
    assert "benchmarking the built-in agent-like workload, as the guided protocol sends it" in err
    assert "vllm bench serve cannot send the guided protocol's regex" in err
    assert main(["bench", "--input-len", "8"]) == 2
    assert "both --input-len and --output-len" in capsys.readouterr().err
    assert main(["bench", "--input-len", "8", "--output-len", "8"]) == 2
    assert "--start" in capsys.readouterr().err


def test_tune_report_json_line_has_the_interface_keys():
    from workstation.tuning.autotune import TuneReport, TuneStep

    report = TuneReport(steps=[TuneStep(0, "baseline (default)", 100.0, 0.0, True, (99.0, 101.0, 100.0)),
                               TuneStep(1, "--max-num-seqs 4", 110.0, 10.0, True, (110.0, 111.0, 109.0)),
                               TuneStep(2, "compiled graphs", None, None, False, note="skipped: needs ~200 s")],
                        noise_pct=1.0, budget_s=600)
    line = json.loads(json.dumps(report.to_json()))
    assert [s["change"] for s in line["steps"]] == ["baseline (default)", "--max-num-seqs 4"]
    assert all(set(s) >= {"change", "output_tok_s", "delta_pct", "kept"} for s in line["steps"])
    assert line["noise_pct"] == 1.0 and line["not_run"][0]["note"].startswith("skipped")


def test_no_constraints_turns_off_the_replays_structured_outputs(tmp_path):
    import argparse

    from workstation.commands.tuning_cmd import _workload, register
    from workstation.core.requests import RequestRecord
    from workstation.core.traffic import shape_from_records
    from workstation.tuning.store import TuningStore

    store = TuningStore(tmp_path)
    store.save_shape(shape_from_records("guided", [RequestRecord("e", "m", "a", 0.0, 0.1, 1.0, 100, 10, 0, 0.1, True,
                                                                 constraint="regex")]))
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers(dest="cmd"))
    on, _, _ = _workload(parser.parse_args(["bench", "--shape", "guided"]), store)
    off, _, _ = _workload(parser.parse_args(["bench", "--shape", "guided", "--no-constraints"]), store)
    assert on.constrained and not off.constrained and "no constraints" in off.describe()


def test_bench_against_an_endpoint_that_refuses_says_so_in_one_line(tmp_path, capsys, monkeypatch):
    """The load generator's plain error (the endpoint refused every request: wrong URL, key or
    model) ends the verb like any other mistake the user can fix, not with a traceback."""
    monkeypatch.setenv("WORKSTATION_DATA_DIR", str(tmp_path))
    assert main(["bench", "--endpoint", "http://127.0.0.1:9", "--model", "m", "--duration-s", "0.5",
                 "--warmup-s", "0"]) == 2
    assert "the endpoint refused the benchmark's requests" in capsys.readouterr().err


def test_what_a_tune_kept_is_saved_as_a_profile_the_app_can_run(tmp_path, capsys):
    """The screening's winner (here the H200's 4 engines with llguidance) becomes the user
    profile ``tuned-default``: its whole flags, its engines, the platform it was measured on and
    what it gained; a run that kept nothing saves nothing, and ``--no-save`` leaves it out."""
    import argparse

    from workstation.commands.tuning_cmd import _save_tuned
    from workstation.core.profiles import PRESETS, Profile, flatten
    from workstation.tuning.autotune import TuneReport, TuneStep
    from workstation.tuning.store import TuningStore

    base = flatten(PRESETS["default"], PRESETS, platform="cuda")
    best = Profile("default+4-engines", "", args=(*base.args, "--structured-outputs-config", '{"backend":"guidance"}',
                                                 "--no-async-scheduling"), engines_per_gpu=4)
    change = "4 engines on each GPU, llguidance, no async scheduling"
    report = TuneReport(steps=[TuneStep(0, "baseline (default)", 5607.5, 0.0, True), TuneStep(1, change, 11344.0, 102.3, True)],
                        best_profile=best, best_tok_s=11344.0, baseline_tok_s=5607.5, shape="gpu-fleet-32",
                        hardware={"gpus": ["NVIDIA H200"]})
    store = TuningStore(tmp_path)
    args = argparse.Namespace(save=None, save_profile=True)
    _save_tuned(args, store, report, "default", "cuda", change=change)
    out = capsys.readouterr().err  # said as the run goes, like the tuner's progress
    assert "saved profile 'tuned-default'" in out and "4 engines on each GPU" in out
    saved = store.catalogue()["tuned-default"]
    assert saved.args == best.args and saved.engines_per_gpu == 4 and saved.parent is None
    assert saved.platforms == {"cuda"} and "{max_num_seqs}" in saved.args  # sized where it starts
    assert saved.description.startswith("tuned ") and "1x NVIDIA H200" in saved.description
    assert "+102% output tok/s over 'default'" in saved.description and change in saved.description
    _save_tuned(args, store, report, "default", "cuda", change=change)  # a later tune replaces it
    assert "replaced profile 'tuned-default'" in capsys.readouterr().err

    nothing = TuneReport(steps=[TuneStep(0, "baseline (default)", 5607.5, 0.0, True),
                                TuneStep(1, "--stream-interval 8", 5700.0, 1.6, False)],
                         best_profile=base, best_tok_s=5607.5, baseline_tok_s=5607.5)
    _save_tuned(argparse.Namespace(save="mine", save_profile=True), store, nothing, "default", "cuda")
    assert "nothing was kept: no profile saved" in capsys.readouterr().err and "mine" not in store.catalogue()
    _save_tuned(argparse.Namespace(save="mine", save_profile=False), store, report, "default", "cuda")
    assert "mine" not in store.catalogue() and capsys.readouterr().err == ""
