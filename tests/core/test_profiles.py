import pytest

from workstation.core.profiles import (
    PRESETS,
    Profile,
    apply_changes,
    diff_against_parent,
    effective,
    engine_count,
    flatten,
    profile_from_mapping,
    profile_to_toml,
    split_flags,
)


def test_split_and_apply_changes_replace_values_and_remove_negated_flags():
    base = ["--max-num-seqs", "64", "--enforce-eager", "--kv-cache-dtype", "auto"]
    out = apply_changes(base, ["--max-num-seqs", "128", "--no-enforce-eager"])
    assert split_flags(out) == {"--kv-cache-dtype": ["auto"], "--max-num-seqs": ["128"], "--no-enforce-eager": []}


def test_negative_numbers_are_values_not_flags():
    assert split_flags(["--seed", "-1"]) == {"--seed": ["-1"]}


def test_equals_form_is_understood():
    assert split_flags(["--speculative-config={\"method\":\"ngram\"}"]) == {
        "--speculative-config": ['{"method":"ngram"}']
    }


def test_effective_walks_parents_and_merges_env():
    cat = {
        "a": Profile("a", "", args=("--x", "1"), env=(("OMP_NUM_THREADS", "4"),)),
        "b": Profile("b", "", args=("--x", "2", "--y"), env=(("OMP_NUM_THREADS", "1"),), parent="a"),
    }
    args, env = effective(cat["b"], cat)
    assert args == ["--x", "2", "--y"]
    assert env == {"OMP_NUM_THREADS": "1"}


def test_cycles_and_unknown_parents_are_refused():
    cat = {"a": Profile("a", "", parent="b"), "b": Profile("b", "", parent="a")}
    with pytest.raises(ValueError, match="ancestor"):
        effective(cat["a"], cat)
    with pytest.raises(ValueError, match="unknown parent"):
        effective(Profile("c", "", parent="zzz"), {})


def test_default_preset_is_eager_on_cpu_only_and_shows_its_diff():
    cpu, _ = effective(PRESETS["default"], PRESETS, platform="cpu")
    assert cpu == ["--enforce-eager"]
    cuda, _ = effective(PRESETS["default"], PRESETS, platform="cuda", values={})
    assert "--enforce-eager" not in cuda
    assert {"--enable-prefix-caching", "--enable-chunked-prefill"} <= set(cuda)
    assert diff_against_parent(PRESETS["default"])[0] == "on cpu: --enforce-eager"


def test_cuda_default_fills_sized_flags_and_drops_unknown_ones():
    values = {"max_num_seqs": "64", "max_model_len": "8192", "gpu_memory_utilization": "0.90"}
    args, _ = effective(PRESETS["default"], PRESETS, platform="cuda", values=values)
    flags = split_flags(args)
    assert flags["--max-num-seqs"] == ["64"] and flags["--max-model-len"] == ["8192"]
    assert flags["--gpu-memory-utilization"] == ["0.90"]
    # no GPU facts: the memory share and context are left to vLLM, the batch is still sized
    args, _ = effective(PRESETS["default"], PRESETS, platform="cuda", values={"max_num_seqs": "64"})
    assert "--gpu-memory-utilization" not in args and "--max-model-len" not in args
    assert split_flags(args)["--max-num-seqs"] == ["64"]
    # vLLM's own defaults add nothing on any platform
    for platform in ("cpu", "cuda"):
        assert effective(PRESETS["vllm-defaults"], PRESETS, platform=platform, values=values) == ([], {})


def test_a_childs_change_wins_over_its_parents_platform_change():
    cpu, _ = effective(PRESETS["compiled"], PRESETS, platform="cpu")
    assert "--enforce-eager" not in cpu and "--no-enforce-eager" in cpu


def test_flattening_keeps_what_each_platform_gets():
    for name, profile in PRESETS.items():
        flat = flatten(profile, PRESETS)
        assert flat.parent is None
        for platform in ("cpu", "cuda"):
            assert split_flags(effective(flat, {}, platform=platform)[0]) == \
                split_flags(effective(profile, PRESETS, platform=platform)[0]), (name, platform)
        only_cuda = flatten(profile, PRESETS, platform="cuda")
        assert not only_cuda.platform_args
        assert effective(only_cuda, {})[0] == effective(profile, PRESETS, platform="cuda")[0]


def test_platform_args_survive_toml_and_refuse_unknown_platforms():
    import tomllib

    flat = flatten(PRESETS["throughput"], PRESETS)
    assert profile_from_mapping(tomllib.loads(profile_to_toml(flat))) == flat
    with pytest.raises(ValueError, match="unknown platform"):
        profile_from_mapping({"name": "x", "platform_args": {"tpu": ["--a"]}})
    with pytest.raises(ValueError, match="list of strings"):
        profile_from_mapping({"name": "x", "platform_args": {"cuda": "--a"}})


def test_engines_per_gpu_is_inherited_survives_toml_and_flattening_and_is_one_on_the_cpu():
    import tomllib

    parent = Profile("two", "two engines", args=("--stream-interval", "8"), parent="default", engines_per_gpu=2)
    child = Profile("child", "a flag more", args=("--max-num-seqs", "128"), parent="two")
    catalogue = {**PRESETS, "two": parent, "child": child}
    assert engine_count(child, catalogue) == 2
    assert engine_count(child, catalogue, platform="cpu") == 1  # cores are shared out, not GPUs
    assert engine_count(PRESETS["default"], PRESETS) == 1
    flat = flatten(child, catalogue)
    assert flat.engines_per_gpu == 2 and flat.parent is None
    assert profile_from_mapping(tomllib.loads(profile_to_toml(flat))) == flat
    assert "2 engines on each GPU" in diff_against_parent(parent)
    assert flatten(PRESETS["default"], PRESETS).engines_per_gpu is None


@pytest.mark.parametrize("bad", [0, 9, 1.5, True, "2"])
def test_engines_per_gpu_out_of_range_is_refused_in_words(bad):
    with pytest.raises(ValueError, match="engines_per_gpu.*whole number from 1 to 8"):
        profile_from_mapping({"name": "x", "engines_per_gpu": bad})
