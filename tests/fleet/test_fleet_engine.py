"""The fleet against the real vLLM CPU engine with SmolLM2 (marked ``engine``)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.agent.conftest import git
from workstation.core import agent_events as ev
from workstation.core.endpoints import Endpoint
from workstation.core.session_state import SessionState as S
from workstation.engine.http import make_http_client
from workstation.fleet import Fleet, SessionSpec, real_agent_factory

pytestmark = [pytest.mark.engine, pytest.mark.slow]


async def test_two_sessions_on_the_real_engine(tmp_path: Path, git_repo: Path, smollm2_engine: Endpoint) -> None:
    calls: dict[str, list[ev.ToolCallFinished]] = {}
    started: dict[tuple[str, str], ev.ToolCallStarted] = {}
    original = (git_repo / "app.py").read_text()
    main_head = git(git_repo, "rev-parse", "main")

    def on_agent(e) -> None:  # type: ignore[no-untyped-def]
        if isinstance(e.event, ev.ToolCallFinished):
            calls.setdefault(e.session_id, []).append(e.event)
        elif isinstance(e.event, ev.ToolCallStarted):
            started[(e.session_id, e.event.call_id)] = e.event

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
            # the worktree holds exactly what the session's own tool calls did to app.py
            edits = [c for c in calls[s.session_id] if c.status == "ok" and c.tool in ("write_to_file", "replace_in_file")
                     and started[(s.session_id, c.call_id)].arguments.get("path") in ("app.py", "./app.py")]
            now = (Path(s.worktree_path) / "app.py").read_text()
            if not edits:
                assert now == original
            else:  # each change was checkpointed: the last checkpoint holds what the worktree holds
                checkpoints = [e for _, e in stored if isinstance(e, ev.CheckpointCreated)]
                assert checkpoints, "an edit without a checkpoint"
                assert git(Path(s.worktree_path), "show", f"{checkpoints[-1].commit}:app.py") == now.strip()
        # the sessions worked in worktrees of their own: the user's checkout is untouched
        assert (git_repo / "app.py").read_text() == original
        assert git(git_repo, "rev-parse", "main") == main_head
        assert git(git_repo, "status", "--porcelain", "--untracked-files=no") == ""
        assert {Path(s.worktree_path) for s in made} == {Path(s.worktree_path) for s in fleet.sessions()}
        await fleet.aclose()
