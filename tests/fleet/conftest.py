"""Fixtures of the fleet tests: a git runner, repository builders."""

from __future__ import annotations

import os
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from workstation.fleet.gitproc import GitRunner

GIT_ENV = {
    **os.environ,
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.invalid",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.invalid",
}


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(cwd), *args], check=True, env=GIT_ENV,
                          capture_output=True, text=True).stdout.strip()


@pytest.fixture
async def runner() -> AsyncIterator[GitRunner]:
    r = GitRunner()
    yield r
    await r.aclose()


class EngineSwitch:
    """An httpx transport standing in for an engine's ``/v1/models``: up or down at will."""

    def __init__(self) -> None:
        self.up = True
        self.dead_hosts: set[str] = set()
        """``host:port`` that never answer (an engine that moved elsewhere)."""

    def handler(self, request):  # type: ignore[no-untyped-def]
        import httpx

        if not self.up or f"{request.url.host}:{request.url.port}" in self.dead_hosts:
            raise httpx.ConnectError("connection refused", request=request)
        return httpx.Response(200, json={"data": [{"id": "m"}]})


@pytest.fixture
def engine_switch() -> EngineSwitch:
    return EngineSwitch()


@pytest.fixture
async def mock_http(engine_switch: EngineSwitch):  # type: ignore[no-untyped-def]
    import httpx

    async with httpx.AsyncClient(transport=httpx.MockTransport(engine_switch.handler)) as client:
        yield client
