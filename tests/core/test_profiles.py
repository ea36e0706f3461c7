import pytest

from workstation.core.profiles import PRESETS, Profile, apply_changes, diff_against_parent, effective, split_flags


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


def test_default_preset_is_eager_and_shows_its_diff():
    args, _ = effective(PRESETS["default"], PRESETS)
    assert "--enforce-eager" in args
    assert diff_against_parent(PRESETS["default"]) == ["--enforce-eager"]
