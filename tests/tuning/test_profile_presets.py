import json
import tomllib

import pytest

from workstation.core.profiles import (
    LADDER,
    PRESETS,
    Profile,
    apply_changes,
    derive,
    describe_change,
    diff_against_parent,
    effective,
    flatten,
    profile_from_mapping,
    profile_to_mapping,
    profile_to_toml,
    required_traits,
    speculative_method,
)


def test_ladder_is_one_change_per_step_in_the_reports_order():
    names = [p.name for p in LADDER]
    assert names == ["ladder-1-mtp3", "ladder-2-async", "ladder-3-flashinfer", "ladder-4-mtp1", "ladder-5-ssm-fp16"]
    parents = [p.parent for p in LADDER]
    assert parents == ["vllm-defaults", *names[:-1]]
    assert all(p.platforms == {"cuda"} for p in LADDER)
    # each step's diff against its parent is exactly the report's change
    assert diff_against_parent(PRESETS["ladder-2-async"]) == ["--async-scheduling"]
    assert diff_against_parent(PRESETS["ladder-3-flashinfer"]) == ["--mamba-backend flashinfer"]
    assert "env OMP_NUM_THREADS=1" in diff_against_parent(PRESETS["ladder-1-mtp3"])


def test_ladder_end_state_has_mtp1_and_fp16_state_and_keeps_omp1():
    args, env = effective(PRESETS["ladder-5-ssm-fp16"], PRESETS)
    assert speculative_method(args) == ("mtp", 1)
    assert args.count("--speculative-config") == 1
    assert "--async-scheduling" in args and "--enable-mamba-cache-stochastic-rounding" in args
    assert args[args.index("--mamba-ssm-cache-dtype") + 1] == "float16"
    assert env == {"OMP_NUM_THREADS": "1"}


def test_traits_needed_by_flags():
    assert required_traits(["--max-num-seqs", "8"]) == set()
    assert required_traits(["--mamba-backend", "flashinfer"]) == {"mamba"}
    assert required_traits(["--enable-mamba-cache-stochastic-rounding"]) == {"mamba"}
    assert required_traits(["--speculative-config", '{"method":"mtp","num_speculative_tokens":1}']) == {"mtp"}
    assert required_traits(["--speculative-config", '{"method":"ngram","num_speculative_tokens":3}']) == set()
    ladder_args, _ = effective(PRESETS["ladder-5-ssm-fp16"], PRESETS)
    assert required_traits(ladder_args) == {"mamba", "mtp"}


def test_speculative_config_must_be_json():
    with pytest.raises(ValueError, match="not valid JSON"):
        speculative_method(["--speculative-config", "{method: ngram}"])


def test_positive_flag_cancels_an_inherited_negation():
    assert apply_changes(["--no-enforce-eager"], ["--enforce-eager"]) == ["--enforce-eager"]


def test_throughput_and_latency_presets_are_compiled_and_general():
    for name in ("throughput", "latency"):
        args, _ = effective(PRESETS[name], PRESETS)
        assert "--enforce-eager" not in args
        assert PRESETS[name].platforms == {"cpu", "cuda"}
    assert "--performance-mode" in effective(PRESETS["throughput"], PRESETS)[0]


def test_flatten_folds_ancestry_so_a_preset_only_launcher_can_run_user_chains():
    cat = dict(PRESETS)
    a = derive(PRESETS["default"], "mine", "more seqs", args=("--max-num-seqs", "64"))
    b = derive(a, "mine2", "ngram", args=("--speculative-config", '{"method":"ngram"}'))
    cat.update({a.name: a, b.name: b})
    flat = flatten(b, cat)
    assert flat.parent is None and flat.name == "mine2"
    assert effective(flat, PRESETS) == effective(b, cat)


def test_toml_round_trip_and_json_mapping():
    p = Profile("my-prof", 'quotes " and ü', args=("--speculative-config", '{"method":"ngram","n":3}', "--seed", "-1"),
                env=(("OMP_NUM_THREADS", "1"),), parent="default", platforms=frozenset({"cpu"}))
    back = profile_from_mapping(tomllib.loads(profile_to_toml(p)))
    assert back == p
    assert profile_from_mapping(json.loads(json.dumps(profile_to_mapping(p)))) == p


@pytest.mark.parametrize("bad, message", [
    ({"name": "has space"}, "name"),
    ({"name": "x", "args": [1, 2]}, "list of strings"),
    ({"name": "x", "args": ["value-first"]}, "before any flag"),
    ({"name": "x", "platforms": ["tpu"]}, "platforms"),
    ({"name": "x", "env": ["A=1"]}, "env"),
])
def test_bad_user_profiles_are_refused_in_plain_words(bad, message):
    with pytest.raises(ValueError, match=message):
        profile_from_mapping(bad)


def test_describe_change_is_one_line():
    assert describe_change(["--max-num-seqs", "64"], {"OMP_NUM_THREADS": "1"}) == "--max-num-seqs 64, env OMP_NUM_THREADS=1"
    assert describe_change([]) == "(no change)"
