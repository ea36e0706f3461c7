import json

import pytest

from workstation.config import Settings
from workstation.core.errors import UserError
from workstation.engine.models import ModelError, check_model_dir, resolve_model


def _fake_model(path, files, *, real_digests=False):
    import hashlib

    path.mkdir(parents=True)
    manifest = {"name": "x", "files": {}}
    for name, data in files.items():
        (path / name).write_bytes(data)
        digest = hashlib.sha256(data).hexdigest() if real_digests else "0" * 64
        manifest["files"][name] = {"bytes": len(data), "sha256": digest}
    (path / "workstation-model.json").write_text(json.dumps(manifest))


def test_missing_manifest_means_half_written(tmp_path):
    d = tmp_path / "m"
    d.mkdir()
    (d / "config.json").write_text("{}")
    assert "half-written" in check_model_dir(d)


def test_truncated_file_is_detected(tmp_path):
    d = tmp_path / "m"
    _fake_model(d, {"config.json": b"{}", "tokenizer_config.json": b"{}", "model.safetensors": b"x" * 100})
    assert check_model_dir(d) is None
    (d / "model.safetensors").write_bytes(b"x" * 10)
    assert "corrupt" in check_model_dir(d)


def test_a_model_without_its_tokenizer_is_not_ready(tmp_path):
    d = tmp_path / "m"
    _fake_model(d, {"config.json": b"{}", "model.safetensors": b"x"})
    assert "no tokenizer_config.json" in check_model_dir(d)


def test_two_prepares_of_one_model_take_turns(tmp_path):
    import threading

    from workstation.engine import models

    settings = Settings(data_dir=tmp_path)
    inside, overlap = [], []

    def build(*_a, **_k):
        inside.append(1)
        if len(inside) > 1:
            overlap.append(1)
        d = models.model_dir(settings, "tiny")
        if not d.exists():
            _fake_model(d, {"config.json": b"{}", "tokenizer_config.json": b"{}"}, real_digests=True)
        threading.Event().wait(0.3)
        inside.pop()

    said = []
    orig = models._run_in_engine
    models._run_in_engine = build
    try:
        threads = [threading.Thread(target=models.prepare_model, args=(settings, None, "tiny"),
                                    kwargs={"progress": said.append}) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        models._run_in_engine = orig
    assert not overlap
    assert any("being prepared by another process" in m for m in said)
    assert check_model_dir(models.model_dir(settings, "tiny")) is None


def test_deep_check_compares_digests(tmp_path):
    d = tmp_path / "m"
    _fake_model(d, {"config.json": b"{}"})
    assert "checksum" in check_model_dir(d, deep=True)


def test_resolve_builtin_missing_tells_what_to_run(tmp_path):
    settings = Settings(data_dir=tmp_path)
    with pytest.raises(ModelError) as err:
        resolve_model(settings, "smollm2")
    assert "workstation model prepare smollm2" in err.value.describe()


def test_resolve_directory_without_config_is_refused(tmp_path):
    settings = Settings(data_dir=tmp_path)
    (tmp_path / "notamodel").mkdir()
    with pytest.raises(UserError, match="no config.json"):
        resolve_model(settings, str(tmp_path / "notamodel"))
    with pytest.raises(UserError, match="does not exist"):
        resolve_model(settings, str(tmp_path / "nowhere"))


def test_resolve_hub_id_is_passed_to_vllm(tmp_path):
    spec = resolve_model(Settings(data_dir=tmp_path), "Qwen/Qwen2.5-Coder-7B-Instruct")
    assert spec.local_dir is None and spec.source == "Qwen/Qwen2.5-Coder-7B-Instruct"


# transformers 5.17's rebuild of SmolLM2's GGUF tokenizer (see workstation/engine/scripts/byte_level.py)
CHAIN_517 = {"type": "Sequence", "decoders": [
    {"type": "ByteFallback"}, {"type": "Fuse"}, {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
    {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}]}
BYTE_LEVEL = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}


def test_a_byte_level_vocabulary_decoded_through_a_sentencepiece_chain_is_rebuilt(tmp_path):
    from workstation.engine.scripts.byte_level import needs_mending

    def model(name, decoder):
        tok = {"model": {"type": "BPE"}, "pre_tokenizer": BYTE_LEVEL, "decoder": decoder}
        d = tmp_path / name
        _fake_model(d, {"config.json": b"{}", "tokenizer_config.json": b"{}",
                        "tokenizer.json": json.dumps(tok).encode()}, real_digests=True)
        return d

    old, good = model("old", CHAIN_517), model("good", BYTE_LEVEL)
    assert "llguidance would read its tokens as text" in check_model_dir(old, deep=True)
    assert check_model_dir(old) is None  # the engine still serves it: only a prepare rebuilds it
    assert check_model_dir(good, deep=True) is None
    # a sentencepiece vocabulary keeps its own chain
    assert not needs_mending({"pre_tokenizer": {"type": "Metaspace"}, "decoder": CHAIN_517})
    assert needs_mending({"pre_tokenizer": {"type": "Sequence", "pretokenizers": [BYTE_LEVEL]}, "decoder": None})


@pytest.mark.engine
def test_the_mended_tokenizer_gives_llguidance_the_newline_byte(tmp_path):
    """The real thing, in the engine's Python: SmolLM2's tokenizer with 5.17's decoder chain
    makes llguidance read token 198 ('Ċ') as b'\\xc4\\x8a'; mended, it is b'\\n'."""
    import subprocess

    from workstation.config import load_settings
    from workstation.engine.environment import SCRIPTS_DIR
    from tests.helpers.prerequisites import installed_engine, prepared_model

    settings = load_settings()
    engine = installed_engine(settings)
    spec = json.loads((prepared_model(settings, "smollm2").local_dir / "tokenizer.json").read_text())
    spec["decoder"] = CHAIN_517
    (tmp_path / "tokenizer.json").write_text(json.dumps(spec))
    probe = f"""
import sys; sys.path.insert(0, {str(SCRIPTS_DIR)!r})
import byte_level, llguidance.hf
from transformers import PreTrainedTokenizerFast
tok = PreTrainedTokenizerFast(tokenizer_file={str(tmp_path / "tokenizer.json")!r})
before = llguidance.hf.from_tokenizer(tok).decode_bytes([198])
mended = byte_level.mend(tok)
after = llguidance.hf.from_tokenizer(tok).decode_bytes([198])
print(repr((before, mended, after, byte_level.mend(tok), tok.decode([198, 1184]))))
"""
    out = subprocess.run([str(engine.python), "-c", probe], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    before, mended, after, again, text = eval(out.stdout.strip().splitlines()[-1])
    assert (before, mended, after, again) == (b"\xc4\x8a", True, b"\n", False)
    assert text.startswith("\n")
