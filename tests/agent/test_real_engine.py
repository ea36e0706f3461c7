"""The agent against the real vLLM engine serving SmolLM2-135M-Instruct (temperature 0).

SmolLM2-135M cannot plan a multi-step task on its own; what it does reliably is follow the
most recent instruction it reads. The read-then-write task therefore puts the next step in
the file the agent reads first — the agent must parse and run both real tool calls, and
the written file must be real Python committed as a checkpoint.
"""

from __future__ import annotations

import ast
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import orjson
import pytest
import pytest_asyncio

from tests.agent.conftest import git
from workstation.agent import Agent, AgentConfig, ProtocolChoice
from workstation.core import agent_events as ev
from workstation.core.agent_events import RunStatus, ToolProtocol
from workstation.core.approvals import ApprovalPolicy
from workstation.core.endpoints import Endpoint
from workstation.engine.chat_client import ChatClient
from workstation.engine.http import make_http_client
from workstation.fleet.sample_repos import scratch_repository

pytestmark = pytest.mark.engine

TODO = "Next step: write_to_file with path \"hello.py\" and content \"print('hello')\".\n"


@pytest_asyncio.fixture(loop_scope="function")
async def http() -> AsyncIterator[httpx.AsyncClient]:
    """The engine is shared with other work (a benchmark's sessions, other tests): a pause of
    some seconds between two pieces of a stream is its load, not a hang (the scripted tests'
    3-s limit made these fail as read timeouts while eight demo sessions ran)."""
    client = make_http_client(read_timeout_s=120.0)
    yield client
    await client.aclose()


def _agent(http, endpoint: Endpoint, root: Path, task: str, events: list, **config) -> Agent:
    cfg = AgentConfig(**{"approval": ApprovalPolicy.parse("all"), "temperature": 0.0, "max_turns": 6,
                         "max_tokens_per_turn": 512, "user_present": False, **config})
    return Agent("real", root, task, ChatClient(http, endpoint), cfg, on_event=events.append)


async def test_smollm2_reads_then_writes_python_and_checkpoints(smollm2_engine: Endpoint, http, tmp_path: Path) -> None:
    git_repo = scratch_repository(tmp_path / "todo-repo", {"TODO.txt": TODO}, message="todo")
    head = git(git_repo, "rev-parse", "HEAD")
    events: list = []
    agent = _agent(http, smollm2_engine, git_repo, "Read TODO.txt and do what it says.", events)
    outcome = await agent.run()

    assert any(isinstance(e, ev.ProtocolSelected) and e.protocol is ToolProtocol.GUIDED for e in events)
    done = [e for e in events if isinstance(e, ev.ToolCallFinished)]
    started = {e.call_id: e for e in events if isinstance(e, ev.ToolCallStarted)}
    ok = [(started[e.call_id].tool, started[e.call_id].arguments.get("path")) for e in done if e.status == "ok"]
    assert ok[0] == ("read_file", "TODO.txt"), [(started.get(e.call_id), e.result) for e in done]
    writes = [path for tool, path in ok if tool == "write_to_file"]
    assert writes, f"no successful write; results: {[e.result for e in done]}"
    written = git_repo / writes[0]
    source = written.read_text()
    ast.parse(source)  # the model wrote real Python
    # every change was committed to the session's private ref; no branch moved
    checkpoints = [e for e in events if isinstance(e, ev.CheckpointCreated)]
    assert checkpoints[0].label == "session start"
    last = checkpoints[-1]
    assert last.label == f"write_to_file {writes[0]}"
    assert git(git_repo, "rev-parse", "refs/workstation/real/checkpoints") == last.commit
    assert git(git_repo, "show", f"{last.commit}:{writes[0]}") == source.rstrip("\n")
    assert git(git_repo, "rev-parse", "HEAD") == head
    # the run ended by itself: finished, or handed back after repeating itself
    assert outcome.status in (RunStatus.COMPLETED, RunStatus.NEEDS_INPUT), outcome
    assert outcome.prompt_tokens > 0 and outcome.turns >= 2


async def test_native_auto_protocol_against_the_engine(smollm2_engine: Endpoint, http, git_repo: Path) -> None:
    """``tool_choice: auto`` through vLLM's hermes parser: the first turn's call is parsed and run."""
    events: list = []
    agent = _agent(http, smollm2_engine, git_repo, "Read app.py.", events, protocol=ProtocolChoice.NATIVE,
                   max_turns=1)
    outcome = await agent.run()
    assert outcome.status is RunStatus.BUDGET_EXHAUSTED
    calls = [e for e in events if isinstance(e, ev.ToolCallStarted)]
    assert calls and calls[0].tool == "read_file" and calls[0].arguments["path"] == "app.py"
    assert [e.status for e in events if isinstance(e, ev.ToolCallFinished)] == ["ok"]
    usage = [e for e in events if isinstance(e, ev.UsageReported)]
    assert usage and usage[0].prompt_tokens > 200


async def test_text_protocol_against_the_engine(smollm2_engine: Endpoint, http, git_repo: Path) -> None:
    """No ``tools`` in the request; whatever the model writes is parsed or answered as a mistake."""
    events: list = []
    agent = _agent(http, smollm2_engine, git_repo, "Read app.py.", events, protocol=ProtocolChoice.TEXT,
                   max_turns=2, max_tokens_per_turn=200)
    outcome = await agent.run()
    assert outcome.status in (RunStatus.BUDGET_EXHAUSTED, RunStatus.COMPLETED, RunStatus.NEEDS_INPUT)
    assert outcome.turns >= 1 and not any(isinstance(e, ev.ErrorOccurred) for e in events)
    first = orjson.loads(next(e for e in events if isinstance(e, ev.MessageAppended) and e.index == 0).message_json)
    assert "<read_file>" in first["content"]
    assert any(isinstance(e, (ev.ToolCallFinished, ev.MistakeCounted)) for e in events)


async def test_guided_protocol_works_a_demo_bug_against_the_engine(smollm2_engine: Endpoint, http,
                                                                  tmp_path: Path) -> None:
    """The embedded model on a real demo task: every call valid by construction (no mistake),
    read before edit, the tests after each edit, and the run ends by itself."""
    from workstation.agent.model_info import fetch_model_parameters
    from workstation.fleet.demo_manifest import load_manifest
    from workstation.fleet.sample_repos import create_sample_repository

    task = next(t for t in load_manifest().tasks if t.name == "fix-leap-year")
    repo = create_sample_repository("datekit", tmp_path / "datekit")
    git(repo, "checkout", "-q", task.base_branch)
    size = await fetch_model_parameters(http, smollm2_engine)
    assert size is not None and size < 200_000_000  # read from the served model's config
    events: list = []
    agent = _agent(http, smollm2_engine, repo, task.prompt, events, model_parameters=size, max_turns=8,
                   max_tokens_per_turn=1024, temperature=None)
    outcome = await agent.run()
    assert [e.protocol for e in events if isinstance(e, ev.ProtocolSelected)] == [ToolProtocol.GUIDED]
    assert not [e for e in events if isinstance(e, ev.MistakeCounted)]
    tools = [e.tool for e in events if isinstance(e, ev.ToolCallStarted)]
    assert tools[:3] == ["read_file", "replace_in_file", "execute_command"], tools
    for i, tool in enumerate(tools):
        if tool == "replace_in_file" and i + 1 < len(tools):
            assert tools[i + 1] in ("execute_command", "replace_in_file"), tools
    assert outcome.status in (RunStatus.COMPLETED, RunStatus.BUDGET_EXHAUSTED), outcome
    if outcome.status is RunStatus.COMPLETED:
        assert tools[-2] == "execute_command" and "passes" in outcome.result
