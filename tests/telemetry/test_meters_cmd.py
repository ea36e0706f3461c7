"""``workstation meters --once --json``."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from workstation.cli import main
from workstation.core.endpoints import Endpoint
from workstation.telemetry.nvml import GpuState, NvmlReader


@pytest.fixture(autouse=True)
def clean_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WORKSTATION_DATA_DIR", str(tmp_path))
    monkeypatch.delenv("WORKSTATION_ENGINE__EXTERNAL_URL", raising=False)


def _has_gpu() -> bool:
    r = NvmlReader()
    try:
        return r.open() is GpuState.OK
    finally:
        r.close()


def test_once_json_without_engine(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["meters", "--once", "--json", "--window", "0.1"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) >= {"gpu", "host", "engines", "sessions", "cost"}
    if not _has_gpu():
        assert out["gpu"]["devices"] == []
        assert out["gpu"]["message"].startswith("no GPU")
    assert out["engines"] == []
    assert out["host"]["cpu_count"] >= 1
    assert out["cost"]["api_model"] == "openai/gpt-4.1-mini"


def test_table_and_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["meters", "--once", "--window", "0.1"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("GPU") and "engine  no endpoint" in text
    assert main(["meters", "--once", "--api-price", "nope"]) == 2
    assert "no price for 'nope'" in capsys.readouterr().err
    assert main(["meters", "--once", "--url", "ftp://x"]) == 2
    assert main(["meters", "--once", "--window", "0"]) == 2


def test_unreachable_engine_is_reported_down(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["meters", "--once", "--json", "--window", "0.1", "--url", "http://127.0.0.1:9"]) == 0
    (engine,) = json.loads(capsys.readouterr().out)["engines"]
    assert engine["up"] is False and "cannot reach" in engine["error"]


@pytest.mark.engine
def test_once_json_against_the_real_engine(smollm2_engine: Endpoint, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["meters", "--once", "--json", "--url", smollm2_engine.base_url, "--api-key", smollm2_engine.api_key]
    assert main(args) == 0
    (engine,) = json.loads(capsys.readouterr().out)["engines"]
    assert engine["up"] is True
    assert engine["model"] == smollm2_engine.model
    assert isinstance(engine["generation_tokens_per_s"], float)
    assert isinstance(engine["running"], int) and engine["running"] >= 0
    # the counter is the engine's own: tokens it generates now show up in the next snapshot
    # (>=, not ==: the engine may be shared with other clients, which only add to it)
    before = engine["generation_tokens_total"]
    reply = httpx.post(f"{smollm2_engine.base_url}/v1/completions", timeout=120, trust_env=False,
                       headers={"Authorization": f"Bearer {smollm2_engine.api_key}"},
                       json={"model": smollm2_engine.model, "prompt": "Count: 1, 2, 3,", "max_tokens": 12,
                             "min_tokens": 12, "temperature": 0})
    reply.raise_for_status()
    generated = reply.json()["usage"]["completion_tokens"]
    assert generated == 12
    assert main(args) == 0
    (after,) = json.loads(capsys.readouterr().out)["engines"]
    assert after["generation_tokens_total"] >= before + generated
