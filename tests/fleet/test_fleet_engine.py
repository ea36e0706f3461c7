"""The fleet against the real vLLM CPU engine with SmolLM2 (marked ``engine``)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from workstation.core import agent_events as ev
from workstation.core.endpoints import Endpoint
from workstation.core.session_state import SessionState as S
from workstation.engine.http import make_http_client
from workstation.fleet import Fleet, SessionSpec, real_agent_factory

pytestmark = [pytest.mark.engine, pytest.mark.slow]


async def test_two_sessions_on_the_real_engine(tmp_path: Path, git_repo: Path, smollm2_engine: Endpoint) -> None:
    calls: dict[str, list[ev.ToolCallFinished]] = {}

    def on_agent(e) -> None:  # type: ignore[no-untyped-def]
        if isinstance(e.event, ev.ToolCallFinished):
            calls.setdefault(e.session_id, []).append(e.event)

    async with make_http_client() as http:
        fleet = Fleet(data_dir=tmp_path / "data", endpoints=[smollm2_engine], http=http,
                      agent_factory=real_agent_factory(http), max_generating=2)
        fleet.agent_event.connect(on_agent)
        await fleet.start()
        made = await fleet.create_sessions(
            SessionSpec(task="Read app.py, then add a function sub(a, b) that returns a - b to app.py.",
                        repo=str(git_repo), auto_approve=("read", "edit"), headless=True,
                        max_steps=4, temperature=0.0), 2, start=True)
        await asyncio.wait_for(fleet.wait_settled(), 900)
        for s in fleet.sessions():
            assert s.state in (S.DONE, S.NEEDS_INPUT, S.FAILED), s
            assert s.state is not S.FAILED or "turns" in s.error, s.error  # only a step budget may end it
            assert s.completion_tokens > 0 and s.prompt_tokens > 0
            assert calls.get(s.session_id), "the model's tool calls were parsed and run"
            stored = await fleet.transcript(s.session_id)
            assert any(isinstance(e, ev.ToolCallFinished) for _, e in stored)
            assert (Path(s.worktree_path) / "app.py").exists()
        assert {Path(s.worktree_path) for s in made} == {Path(s.worktree_path) for s in fleet.sessions()}
        await fleet.aclose()
