"""The launcher's argv and environment per platform (no engine is started)."""

import json
import os
from pathlib import Path

import pytest

from workstation.config import Settings
from workstation.core.engine_sizing import GIB, GpuMemory
from workstation.core.profiles import split_flags
from workstation.engine.environment import EngineInstall
from workstation.engine.launcher import EngineLauncher, EngineStartError
from workstation.engine.models import ModelSpec

SMOLLM2 = {"model_type": "llama", "num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3,
           "hidden_size": 576, "max_position_embeddings": 8192, "torch_dtype": "bfloat16"}
H200 = GpuMemory(0, "NVIDIA H200", total_bytes=150_754_820_096, free_bytes=150_000_000_000)


def _model(tmp_path: Path, config: dict, *, builtin: bool = True) -> ModelSpec:
    d = tmp_path / "model"
    d.mkdir(exist_ok=True)
    (d / "config.json").write_text(json.dumps(config))
    (d / "model.safetensors").write_bytes(b"\0" * 1024)
    return ModelSpec(served_name="smollm2", source=str(d), local_dir=d, max_model_len=8192 if builtin else None,
                     builtin=builtin)


def _launcher(tmp_path, platform, profile="default", gpus=(H200,), config=SMOLLM2, builtin=True, **kw):
    settings = Settings(data_dir=tmp_path / "data")
    engine = EngineInstall(python=Path("/nonexistent/python"), platform=platform, version="0.26.0", managed=False)
    return EngineLauncher(settings, engine, _model(tmp_path, config, builtin=builtin), profile=profile,
                          gpu_memory=lambda: list(gpus), **kw)


def _flags(launcher: EngineLauncher) -> dict[str, list[str]]:
    launcher.sizing = launcher.size()
    argv = launcher.command()
    return split_flags(argv[argv.index("serve") + 2:])


def test_cuda_default_is_compiled_and_sized_for_the_gpu_and_the_sessions(tmp_path):
    flags = _flags(_launcher(tmp_path, "cuda"))
    assert "--enforce-eager" not in flags
    assert flags["--max-num-seqs"] == ["64"]  # 32 sessions by default
    assert flags["--max-model-len"] == ["8192"]
    assert flags["--gpu-memory-utilization"] == ["0.90"]
    assert "--enable-prefix-caching" in flags and "--enable-chunked-prefill" in flags
    # graphs for mixed prefill+decode steps, not only for the sized batch (2 x 64 = 128)
    assert flags["--max-cudagraph-capture-size"] == ["512"]
    assert flags["--tool-call-parser"] == ["hermes"]
    assert "--kv-cache-memory-bytes" not in flags


def test_cpu_default_stays_eager_with_a_sized_kv_cache(tmp_path):
    flags = _flags(_launcher(tmp_path, "cpu"))
    assert "--enforce-eager" in flags and "--kv-cache-memory-bytes" in flags
    assert "--gpu-memory-utilization" not in flags and "--max-num-seqs" not in flags


def test_vllm_defaults_add_nothing_sized(tmp_path):
    flags = _flags(_launcher(tmp_path, "cuda", profile="vllm-defaults"))
    assert not {"--max-num-seqs", "--gpu-memory-utilization", "--enforce-eager"} & set(flags)


def test_sessions_and_busy_memory_change_the_sizing(tmp_path):
    busy = GpuMemory(0, "NVIDIA H200", H200.total_bytes, 40 * GIB)
    flags = _flags(_launcher(tmp_path, "cuda", gpus=(busy,), sessions=256))
    assert flags["--max-num-seqs"] == ["512"]
    assert float(flags["--gpu-memory-utilization"][0]) * H200.total_bytes < 40 * GIB


def test_the_batch_holds_every_sequence_of_the_sessions_requests(tmp_path):
    # guided sessions draw n=6 drafts a request: sized for requests alone, 32 of them queued
    # on an H200 behind --max-num-seqs 64 (0.70x vLLM's own default on their replayed traffic)
    flags = _flags(_launcher(tmp_path, "cuda", sequences_per_session=6))
    assert flags["--max-num-seqs"] == ["512"]
    assert flags["--max-model-len"] == ["8192"]  # the context is still sized per session


def test_no_gpu_facts_leave_memory_and_context_to_vllm(tmp_path):
    flags = _flags(_launcher(tmp_path, "cuda", gpus=()))
    assert "--gpu-memory-utilization" not in flags and flags["--max-num-seqs"] == ["64"]


def test_a_model_that_does_not_fit_is_refused_before_launch(tmp_path):
    busy = GpuMemory(0, "NVIDIA H200", H200.total_bytes, 2 * GIB)
    with pytest.raises(EngineStartError, match="GiB free"):
        _launcher(tmp_path, "cuda", gpus=(busy,)).size()


def test_tool_call_parser_follows_the_model_family_and_the_setting(tmp_path):
    qwen = {**SMOLLM2, "model_type": "qwen2"}
    assert _launcher(tmp_path, "cuda", config=qwen, builtin=False).tool_call_parser() == "hermes"
    other = _launcher(tmp_path, "cuda", config={**SMOLLM2, "model_type": "gpt_bigcode"}, builtin=False)
    assert other.tool_call_parser() is None and "--tool-call-parser" not in _flags(other)
    off = _launcher(tmp_path, "cuda")
    off.settings.engine.tool_call_parser = "none"
    assert "--enable-auto-tool-choice" not in _flags(off)


def test_users_vllm_variables_reach_the_engine_unless_the_app_or_profile_sets_them(tmp_path, monkeypatch):
    monkeypatch.setenv("VLLM_USE_FLASHINFER_SAMPLER", "0")
    monkeypatch.setenv("VLLM_API_KEY", "users-own-key")
    monkeypatch.setenv("VLLM_LOGGING_LEVEL", "DEBUG")
    launcher = _launcher(tmp_path, "cuda", env={"VLLM_LOGGING_LEVEL": "INFO"})
    launcher._api_key = "launch-key"
    env = launcher.environment()
    assert env["VLLM_USE_FLASHINFER_SAMPLER"] == "0"
    assert env["VLLM_API_KEY"] == "launch-key"
    assert env["VLLM_LOGGING_LEVEL"] == "INFO"
    notes = "\n".join(launcher.env_notes)
    assert "VLLM_USE_FLASHINFER_SAMPLER='0' from your environment" in notes
    assert "VLLM_API_KEY: the app's own value wins over yours" in notes and "users-own-key" not in notes
    assert "VLLM_LOGGING_LEVEL: the profile's 'INFO' wins over yours ('DEBUG')" in notes


def test_engine_profiles_json_lists_every_cuda_profile_unvalidated_without_a_cuda_engine(tmp_path, capsys, monkeypatch):
    from workstation import cli

    monkeypatch.setenv("WORKSTATION_DATA_DIR", str(tmp_path))  # no engine installed there
    assert cli.main(["engine", "profiles", "--platform", "cuda", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    by_name = {r["name"]: r for r in rows}
    assert {"default", "vllm-defaults", "ladder-1-mtp3"} <= set(by_name)
    assert all(set(r) >= {"name", "args", "env", "validated"} and r["validated"] is False for r in rows)
    default = by_name["default"]["args"]
    assert "--enforce-eager" not in default and "--enable-prefix-caching" in default
    # the built-in model's agents are guided: 32 sessions x n=6 drafts, twice, as a power of two
    assert default[default.index("--max-num-seqs") + 1] == "512"
    assert by_name["ladder-1-mtp3"]["env"] == {"OMP_NUM_THREADS": "1"}


def test_engine_profiles_say_how_many_engines_share_each_gpu_and_list_one_engines_flags(tmp_path, capsys, monkeypatch):
    from workstation import cli
    from workstation.core.profiles import PRESETS, Profile

    monkeypatch.setenv("WORKSTATION_DATA_DIR", str(tmp_path))
    monkeypatch.setitem(PRESETS, "two-engines", Profile("two-engines", "two on each GPU", parent="default",
                                                        engines_per_gpu=2))
    monkeypatch.setitem(PRESETS, "two-small", Profile("two-small", "inherits two", args=("--stream-interval", "2"),
                                                      parent="two-engines"))
    assert cli.main(["engine", "profiles", "--json"]) == 0
    rows = {(r["platform"], r["name"]): r for r in json.loads(capsys.readouterr().out)}
    assert rows[("cuda", "default")]["engines_per_gpu"] == 1
    assert rows[("cuda", "two-engines")]["engines_per_gpu"] == rows[("cuda", "two-small")]["engines_per_gpu"] == 2
    assert rows[("cpu", "two-engines")]["engines_per_gpu"] == 1  # the CPU engine shares out cores instead
    assert all(set(r) >= {"name", "args", "env", "validated"} for r in rows.values())
    args = rows[("cuda", "two-small")]["args"]
    # each engine's own flags: half the memory, 16 of the 32 guided sessions (n=6) -> a batch of 256
    assert args[args.index("--gpu-memory-utilization") + 1] == "0.45"
    assert args[args.index("--max-num-seqs") + 1] == "256"
    assert cli.main(["engine", "profiles", "--platform", "cuda"]) == 0
    text = capsys.readouterr().out
    two = text[text.index("two-small (from two-engines)"):]
    assert "    engines 2 engines on each GPU (the flags are each one's)" in two.split("validated")[0]
    assert "engines 1 engine" not in text and "default (from vllm-defaults)" in text


def test_engine_profiles_list_the_users_saved_profiles_on_their_platforms(tmp_path, capsys, monkeypatch):
    """What a tune saved (``tuned-default``: the H200's 4 engines with llguidance) is listed
    after the presets with each engine's flags, on the platform it was measured on only."""
    from workstation import cli
    from workstation.core.profiles import Profile
    from workstation.tuning.store import TuningStore

    monkeypatch.setenv("WORKSTATION_DATA_DIR", str(tmp_path))
    TuningStore(tmp_path).save_profile(Profile(
        "tuned-default", "tuned on 1x NVIDIA H200", parent="default", engines_per_gpu=4, platforms=frozenset({"cuda"}),
        args=("--structured-outputs-config", '{"backend":"guidance"}', "--no-async-scheduling")))
    assert cli.main(["engine", "profiles", "--json"]) == 0
    rows = {(r["platform"], r["name"]): r for r in json.loads(capsys.readouterr().out)}
    tuned = rows[("cuda", "tuned-default")]
    assert tuned["yours"] is True and tuned["engines_per_gpu"] == 4 and ("cpu", "tuned-default") not in rows
    assert "yours" not in rows[("cuda", "default")]
    args = tuned["args"]
    assert "--no-async-scheduling" in args and "--enable-prefix-caching" in args  # its parent's flags folded in
    # one engine's share: a quarter of the 32 guided sessions (n=6) -> a batch of 128
    assert args[args.index("--max-num-seqs") + 1] == "128"
    assert cli.main(["engine", "profiles", "--platform", "cuda"]) == 0
    text = capsys.readouterr().out
    assert "tuned-default (from default): tuned on 1x NVIDIA H200  [yours]" in text


def test_engine_keys_never_look_like_an_option():
    """A key starting with '-' breaks `--api-key KEY` on every command line (seen in CI)."""
    from workstation.engine.launcher import new_api_key

    keys = {new_api_key() for _ in range(2000)}
    assert len(keys) == 2000
    assert all(len(k) == 48 and k[0] != "-" and k.isalnum() for k in keys)


def test_the_engines_temporary_folder_is_short_enough_for_vllms_sockets(tmp_path):
    """vLLM binds ZeroMQ sockets at ipc://$TMPDIR/<uuid4> (an AF_UNIX path, 107 bytes at most):
    under a deep data directory the engine gets a short private folder instead."""
    import shutil
    import stat
    import tempfile

    from workstation.engine.launcher import IPC_TMP_MAX, engine_tmp

    deep = tmp_path / ("d" * 80) / "engine" / "tmp"
    got = engine_tmp(deep)
    assert got.is_dir() and not deep.exists() and len(f"{got}/{'x' * 36}") <= 107
    assert stat.S_IMODE(got.stat().st_mode) & 0o077 == 0 and got.stat().st_uid == os.getuid()
    short_root = Path(tempfile.mkdtemp(dir="/tmp"))
    try:
        short = short_root / "engine" / "tmp"
        assert len(str(short)) <= IPC_TMP_MAX and engine_tmp(short) == short and short.is_dir()
    finally:
        shutil.rmtree(short_root)
