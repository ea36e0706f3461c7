"""MCP tools in front of the real engine: vLLM takes the servers' own JSON schemas next to the
built-in tools (the grammar of ``tool_choice: "required"`` covers them), and SmolLM2 calls
one when its task names it; the server, in the session's sandbox, writes into the worktree."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.agent.test_mcp import SERVER
from tests.helpers.prerequisites import needs_bwrap
from workstation.agent import Agent, AgentConfig
from workstation.agent.mcp_servers import parse_servers
from workstation.core import agent_events as ev
from workstation.core.approvals import ApprovalPolicy
from workstation.core.endpoints import Endpoint
from workstation.engine.chat_client import ChatClient
from workstation.engine.http import make_http_client
from workstation.fleet.sample_repos import scratch_repository

pytestmark = pytest.mark.engine

TASK = 'Call the tool mcp__notes__note with text "hello from the model".'


@needs_bwrap
async def test_smollm2_calls_an_mcp_tool(smollm2_engine: Endpoint, tmp_path: Path) -> None:
    repo = scratch_repository(tmp_path / "repo", {"README.md": "notes\n"}, message="first")
    notes = parse_servers({"notes": {"command": sys.executable, "args": [str(SERVER)]}}, "t")[0]
    events: list = []
    cfg = AgentConfig(approval=ApprovalPolicy.parse("read,edit,mcp"), temperature=0.0, max_turns=5,
                      max_tokens_per_turn=512, user_present=False, mcp_servers=(notes,))
    async with make_http_client(read_timeout_s=120.0) as http:  # a new tool set's grammar compiles first
        agent = Agent("real-mcp", repo, TASK, ChatClient(http, smollm2_engine),
                      cfg, on_event=events.append)
        await agent.run()
    errors = [e.message for e in events if isinstance(e, ev.ErrorOccurred)]
    assert not errors, errors  # the engine took every request with the MCP tools in it
    started = {e.call_id: e for e in events if isinstance(e, ev.ToolCallStarted)}
    calls = [(started[e.call_id].tool, e.status, e.result) for e in events
             if isinstance(e, ev.ToolCallFinished) and e.call_id in started]
    assert calls and calls[0][:2] == ("mcp__notes__note", "ok"), calls
    assert (repo / "notes.txt").read_text() == "hello from the model\n"  # the server wrote it, in the worktree
