import json

import pytest

from workstation.config import Settings
from workstation.core.errors import UserError
from workstation.engine.models import ModelError, check_model_dir, resolve_model


def _fake_model(path, files):
    path.mkdir(parents=True)
    manifest = {"name": "x", "files": {}}
    for name, data in files.items():
        (path / name).write_bytes(data)
        manifest["files"][name] = {"bytes": len(data), "sha256": "0" * 64}
    (path / "workstation-model.json").write_text(json.dumps(manifest))


def test_missing_manifest_means_half_written(tmp_path):
    d = tmp_path / "m"
    d.mkdir()
    (d / "config.json").write_text("{}")
    assert "half-written" in check_model_dir(d)


def test_truncated_file_is_detected(tmp_path):
    d = tmp_path / "m"
    _fake_model(d, {"config.json": b"{}", "model.safetensors": b"x" * 100})
    assert check_model_dir(d) is None
    (d / "model.safetensors").write_bytes(b"x" * 10)
    assert "corrupt" in check_model_dir(d)


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
