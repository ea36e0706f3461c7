import json

import pytest

from tests.helpers.prerequisites import installed_engine, prepared_model
from workstation.core.profiles import PRESETS, Profile, effective
from workstation.tuning.checks import (
    Severity,
    agents_constrain_output,
    check_profile,
    check_resolved,
    model_traits,
    parse_count,
)

LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 49152}
# shapes of real configs, reduced to the keys that matter
NEMOTRON_H_MTP = {"architectures": ["NemotronHForCausalLM"], "model_type": "nemotron_h",
                  "hybrid_override_pattern": "M-M-M*-M-", "num_nextn_predict_layers": 1}
JAMBA = {"architectures": ["JambaForCausalLM"], "model_type": "jamba", "attn_layer_period": 8, "mamba_d_state": 16}
QWEN3_NEXT = {"architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next",
              "layer_types": ["linear_attention", "full_attention"], "num_nextn_predict_layers": 1}
DEEPSEEK_V3 = {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "num_nextn_predict_layers": 1}
QWEN35_VL = {"architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5",
             "text_config": {"model_type": "qwen3_5_text", "mtp_num_hidden_layers": 1,
                             "layer_types": ["linear_attention", "full_attention"]}}

HELP = {"--max-num-seqs", "--max-num-batched-tokens", "--speculative-config", "--async-scheduling",
        "--mamba-backend", "--mamba-ssm-cache-dtype", "--enable-mamba-cache-stochastic-rounding",
        "--enforce-eager", "--no-enforce-eager", "--gpu-memory-utilization", "--performance-mode",
        "--no-enable-chunked-prefill", "--kv-cache-memory-bytes"}


def run(args, *, platform="cpu", config=LLAMA, env=None, help_flags=HELP, **kw):
    return check_profile(args, env or {}, platform=platform, engine_version="0.32.0", help_flags=help_flags,
                         traits=model_traits("m", config), **kw)


def messages(findings, severity=None):
    return [f.message for f in findings if severity is None or f.severity is severity]


@pytest.mark.parametrize("config, hybrid, mtp", [
    (LLAMA, False, 0), (NEMOTRON_H_MTP, True, 1), (JAMBA, True, 0), (QWEN3_NEXT, True, 1),
    (DEEPSEEK_V3, False, 1), (QWEN35_VL, True, 1),
])
def test_model_traits_from_config(config, hybrid, mtp):
    t = model_traits("m", config)
    assert (t.hybrid_mamba, t.mtp_layers) == (hybrid, mtp)


def test_unknown_flags_are_errors_with_a_suggestion():
    found = run(["--max-num-seq", "8"])
    assert found[0].severity is Severity.ERROR
    assert "does not know --max-num-seq (did you mean --max-num-seqs?)" in found[0].message


def test_mamba_flags_need_a_hybrid_model():
    assert any("hybrid Mamba models only" in m for m in messages(run(["--mamba-ssm-cache-dtype", "float16"],
                                                                      platform="cuda"), Severity.ERROR))
    assert not messages(run(["--mamba-ssm-cache-dtype", "float16"], platform="cuda", config=NEMOTRON_H_MTP),
                        Severity.ERROR)
    unknown = run(["--mamba-backend", "triton"], platform="cuda", config=None)
    assert any("cannot be read" in m for m in messages(unknown, Severity.WARNING))


def test_mtp_needs_the_head():
    spec = ["--speculative-config", '{"method":"mtp","num_speculative_tokens":1}']
    assert any("multi-token-prediction head" in m for m in messages(run(spec, platform="cuda"), Severity.ERROR))
    assert not messages(run(spec, platform="cuda", config=NEMOTRON_H_MTP), Severity.ERROR)
    assert not messages(run(spec, platform="cuda", config=DEEPSEEK_V3), Severity.ERROR)


def test_cpu_platform_rules_in_plain_words():
    found = run(["--async-scheduling", "--gpu-memory-utilization", "0.9", "--enforce-eager"])
    assert "forces async scheduling off" in " ".join(messages(found, Severity.WARNING))
    assert any("--gpu-memory-utilization does not apply" in m for m in messages(found, Severity.NOTE))
    fi = run(["--mamba-backend", "flashinfer", "--enforce-eager"], config=NEMOTRON_H_MTP)
    assert any("needs an NVIDIA GPU" in m for m in messages(fi, Severity.ERROR))
    fp16 = run(["--mamba-ssm-cache-dtype", "float16", "--enforce-eager"], config=NEMOTRON_H_MTP)
    assert any("float32" in m for m in messages(fp16, Severity.WARNING))
    assert any("crashes" in m for m in messages(run(["--enforce-eager"], env={"VLLM_CPU_KVCACHE_SPACE": ""}),
                                                Severity.ERROR))
    # the same async flag on a GPU is fine
    assert not run(["--async-scheduling"], platform="cuda")


def test_batch_limits_vllm_refuses():
    assert any("must be at least" in m for m in messages(run(["--max-num-batched-tokens", "64"]), Severity.ERROR))
    assert not messages(run(["--max-num-batched-tokens", "4k", "--max-num-seqs", "256"]), Severity.ERROR)
    no_chunk = run(["--no-enable-chunked-prefill", "--max-num-batched-tokens", "4096"], max_model_len=8192)
    assert any("chunked prefill" in m for m in messages(no_chunk, Severity.ERROR))
    assert parse_count("1.5k") == 1500 and parse_count("2M") == 2_000_000 and parse_count("x") is None


def test_profile_made_for_another_platform():
    report = check_resolved(PRESETS["ladder-1-mtp3"], PRESETS, platform="cpu", engine_version="0.32.0",
                            help_text=" ".join(HELP), traits=model_traits("m", NEMOTRON_H_MTP))
    assert not report.ok
    assert "made for cuda" in report.lines()[1]


def test_ladder_is_clean_on_a_gpu_with_a_hybrid_mtp_model():
    report = check_resolved(PRESETS["ladder-5-ssm-fp16"], PRESETS, platform="cuda", engine_version="0.33.0",
                            help_text=" ".join(HELP), traits=model_traits("nemotron", NEMOTRON_H_MTP))
    assert report.ok and not report.findings


# ----- against the really installed engine -----
@pytest.fixture(scope="module")
def installed():
    from workstation.config import load_settings
    from workstation.engine.environment import engine_help_text

    settings = load_settings()
    engine = installed_engine(settings)
    return settings, engine, engine_help_text(engine, settings.cache_dir)


@pytest.mark.engine
def test_every_preset_flag_exists_in_the_installed_engine(installed):
    from workstation.engine.flags import known_flags

    _, engine, help_text = installed
    known = known_flags(help_text)
    for profile in PRESETS.values():
        args, _ = effective(profile, PRESETS)
        missing = [a for a in args if a.startswith("--") and a not in known]
        assert not missing, f"{profile.name}: {missing} unknown to vLLM {engine.version}"


@pytest.mark.engine
def test_real_check_of_a_typo_and_of_the_ladder_on_this_machine(installed):
    from workstation.tuning.checks import check_against_engine

    settings, engine, _ = installed
    model = prepared_model(settings, "tiny")
    typo = Profile("typo", "", args=("--max-num-seqz", "8"), parent="default")
    report = check_against_engine(settings, engine, model, typo, {**PRESETS, "typo": typo})
    assert not report.ok
    assert f"the installed vLLM ({engine.version}) does not know --max-num-seqz (did you mean --max-num-seqs?)" in \
        report.lines()[1]
    ladder = check_against_engine(settings, engine, model, PRESETS["ladder-2-async"], PRESETS)
    text = "\n".join(ladder.lines())
    assert "does not know" not in text  # every ladder flag exists in this build …
    assert "multi-token-prediction head" in text  # … but the tiny Qwen2 has no MTP head
    if engine.platform == "cpu":
        assert "forces async scheduling off" in text
    assert check_against_engine(settings, engine, model, PRESETS["default"], PRESETS).ok


NGRAM_GPU = ["--speculative-config", '{"method":"ngram_gpu","num_speculative_tokens":8,"prompt_lookup_max":5}']


def test_gpu_ngram_drafts_are_refused_where_agents_hold_replies_to_a_schema():
    def check(args, guided):
        return check_profile(args, {}, platform="cuda", engine_version="0.26.0", help_flags=HELP | {"--no-async-scheduling"},
                             traits=model_traits("m", LLAMA, structured_outputs=guided))

    refused = messages(check(NGRAM_GPU, True), Severity.ERROR)
    assert len(refused) == 1 and "#49694" in refused[0] and "guided protocol" in refused[0]
    # a model the agents do not constrain, an unknown one, async scheduling off: no refusal
    assert not messages(check(NGRAM_GPU, False), Severity.ERROR)
    assert not messages(check(NGRAM_GPU, None), Severity.ERROR)
    sync = check([*NGRAM_GPU, "--no-async-scheduling"], True)
    assert not messages(sync, Severity.ERROR) and "not been measured" in messages(sync, Severity.WARNING)[0]
    # drafts of the CPU engine's own n-gram method are another code path
    host = ["--speculative-config", '{"method":"ngram","num_speculative_tokens":3}']
    assert not messages(check(host, True), Severity.ERROR)


def test_host_side_ngram_drafts_on_a_gpu_turn_async_scheduling_off():
    """vLLM 0.26 (config/vllm.py) runs async scheduling only with EAGLE, MTP, a draft model and
    ngram_gpu: it turns it off by itself for method ngram, and refuses to start when asked for both."""
    host = ["--speculative-config", '{"method":"ngram","num_speculative_tokens":8,"prompt_lookup_max":5}']

    def check(args):
        return check_profile(args, {}, platform="cuda", engine_version="0.26.0",
                             help_flags=HELP | {"--async-scheduling"}, traits=model_traits("m", LLAMA))

    assert "turns async scheduling off" in " ".join(messages(check(host), Severity.NOTE))
    assert not messages(check(host), Severity.ERROR)
    refused = messages(check([*host, "--async-scheduling"]), Severity.ERROR)
    assert len(refused) == 1 and "refuses to start" in refused[0]


def test_the_guided_rule_follows_the_agents_protocol_choice(tmp_path):
    from workstation.config import Settings
    from workstation.engine.models import ModelSpec

    def spec(name, config):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps(config))
        return ModelSpec(served_name=name, source=str(folder), local_dir=folder)

    small = {**LLAMA, "hidden_size": 576, "intermediate_size": 1536, "num_hidden_layers": 30,
             "num_attention_heads": 9, "num_key_value_heads": 3}
    big = {**LLAMA, "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
           "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256}
    settings = Settings()
    assert agents_constrain_output(settings, spec("tiny-llama", small)) is True
    assert agents_constrain_output(settings, spec("llama-8b", big)) is False
    # the setting moves the line
    settings.agent.guided_max_parameters = 10_000_000
    assert agents_constrain_output(settings, spec("tiny-llama-2", small)) is False


def test_every_cuda_preset_and_tuner_change_is_a_flag_of_the_cuda_vllm_the_h200_ran():
    """vLLM 0.26.0's ``vllm serve --help=all`` as the GPU suite brought it back from the H200
    (tests/data): the CUDA profiles and the tuner's CUDA changes are checked against the build
    they run on, though no CUDA engine is installed here."""
    import gzip
    from pathlib import Path

    from workstation.core.profiles import STAND_IN_VALUES
    from workstation.engine.flags import known_flags, unknown_flags
    from workstation.tuning.autotune import candidates_for

    text = gzip.decompress((Path(__file__).parents[1] / "data" / "vllm-serve-help-0.26.0-cuda.txt.gz").read_bytes())
    known = known_flags(text.decode())
    assert len(known) > 300 and "--stream-interval" in known and "--max-cudagraph-capture-size" in known
    for name, profile in PRESETS.items():
        if "cuda" not in profile.platforms:
            continue
        args, _ = effective(profile, PRESETS, platform="cuda", values=STAND_IN_VALUES)
        assert not unknown_flags(split(args), known), name
    base, _ = effective(PRESETS["default"], PRESETS, platform="cuda", values=STAND_IN_VALUES)
    for hybrid in (LLAMA, NEMOTRON_H_MTP):
        for guided in (False, True):  # with a grammar, the grammar backend is a candidate too
            traits = model_traits("m", hybrid, structured_outputs=guided)
            for cand in candidates_for("cuda", traits, concurrency=32, base_args=base):
                assert not unknown_flags(split(list(cand.args)), known), cand.change


def split(args):
    from workstation.core.profiles import split_flags

    return split_flags(list(args))
