"""Fixtures of the agent tests: a shared HTTP client, a scripted server, an agent factory."""

from __future__ import annotations

import os
import subprocess
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio

from tests.helpers.scripted_server import ScriptedServer
from workstation.agent import Agent, AgentConfig
from workstation.agent import sandbox as sb
from workstation.core import agent_events as ev
from workstation.core.approvals import ApprovalPolicy
from workstation.engine.chat_client import ChatClient
from workstation.engine.http import make_http_client

GIT_ENV = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid"}


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                          text=True, env=GIT_ENV).stdout.strip()


@pytest.fixture
def fresh_notices() -> Iterator[None]:
    """The sandbox's notices and probes start empty (each is said once per process)."""
    said = list(sb.notices.said)
    sb.notices.said.clear()
    sb.forget_probes()
    try:
        yield
    finally:
        sb.notices.said[:] = said
        sb.forget_probes()


@pytest_asyncio.fixture(loop_scope="function")
async def http() -> AsyncIterator[httpx.AsyncClient]:
    client = make_http_client(read_timeout_s=3.0)
    yield client
    await client.aclose()


@pytest_asyncio.fixture(loop_scope="function")
async def server() -> AsyncIterator[ScriptedServer]:
    async with ScriptedServer() as srv:
        yield srv


@dataclass
class Recorder:
    events: list[Any] = field(default_factory=list)

    def __call__(self, event: Any) -> None:
        self.events.append(event)

    def of(self, kind: type) -> list[Any]:
        return [e for e in self.events if isinstance(e, kind)]

    def results(self) -> list[ev.ToolCallFinished]:
        return self.of(ev.ToolCallFinished)


FAST = dict(retry_backoff_s=0.01, approval=ApprovalPolicy.parse("all"), context_window_tokens=32_768)


@pytest.fixture
def make_agent(http: httpx.AsyncClient, git_repo: Path) -> Callable[..., tuple[Agent, Recorder]]:
    """``make_agent(server, **config) -> (agent, recorder)`` in the ``git_repo`` fixture's repo."""

    def build(srv: ScriptedServer, *, root: Path | None = None, task: str = "do the task",
              approver: Any = None, slot: Any = None, snapshot: Any = None, history: Any = None,
              session_id: str = "s1", task_images: Any = (), **config: Any) -> tuple[Agent, Recorder]:
        rec = Recorder()
        cfg = AgentConfig(**{**FAST, **config})
        agent = Agent(session_id, root or git_repo, task, ChatClient(http, srv.endpoint), cfg,
                      on_event=rec, approver=approver, generation_slot=slot, snapshot=snapshot,
                      history=history, task_images=task_images)
        return agent, rec

    return build
