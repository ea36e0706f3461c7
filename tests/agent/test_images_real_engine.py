"""The real engine's model decides: SmolLM2's config has no vision part, so an image is refused
before any request, with the reason."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.agent.test_images import png
from workstation.agent.model_info import fetch_takes_images
from workstation.cli import main
from workstation.core.endpoints import Endpoint
from workstation.engine.http import make_http_client

pytestmark = pytest.mark.engine


async def test_the_served_models_config_says_no_images(smollm2_engine: Endpoint) -> None:
    async with make_http_client() as http:
        assert await fetch_takes_images(http, smollm2_engine) is False


def test_agent_refuses_an_image_for_smollm2(smollm2_engine: Endpoint, git_repo: Path, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WORKSTATION_DATA_DIR", str(tmp_path / "data"))
    code = main(["agent", "--endpoint", smollm2_engine.base_url, "--api-key", smollm2_engine.api_key, "--model",
                 smollm2_engine.model, "--repo", str(git_repo), "--task", "like this",
                 "--image", str(png(tmp_path / "s.png"))])
    assert code == 2
    assert f"the model '{smollm2_engine.model}' does not take images" in capsys.readouterr().err
