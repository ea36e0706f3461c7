"""MCP servers as tools, against a real small server written with the official SDK
(``mcp_servers/notes_server.py``): stdio inside the session's sandbox and streamable HTTP,
tools offered as ``mcp__<server>__<tool>``, every call through the approval policy."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil
import pytest

from tests.helpers.prerequisites import needs_bwrap
from tests.helpers.scripted_server import Reply, ScriptedServer, ToolCall
from workstation.agent.config import ProtocolChoice
from workstation.agent.mcp.hub import tool_name
from workstation.agent.mcp_servers import McpServer, load_servers, parse_servers, servers_from_json, servers_json
from workstation.agent.sandbox import SandboxMode, SandboxPolicy
from workstation.agent.tool_specs import OPENAI_TOOLS
from workstation.core import agent_events as ev
from workstation.core.agent_events import AgentMode, RunStatus
from workstation.core.approvals import ApprovalDecision, ApprovalPolicy, ToolCategory
from workstation.core.errors import UserError
from workstation.engine.launcher import free_port

SERVER = Path(__file__).parent / "mcp_servers" / "notes_server.py"
DONE = Reply(tool_calls=[ToolCall("attempt_completion", {"result": "ok"})])


def notes(**extra: object) -> McpServer:
    return parse_servers({"mcpServers": {"notes": {"command": sys.executable, "args": [str(SERVER)],
                                                   **extra}}}, "test")[0]


def call(name: str, **args: object) -> Reply:
    return Reply(tool_calls=[ToolCall(name, dict(args))])


def server_processes() -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        if str(SERVER) in " ".join(proc.info.get("cmdline") or ()):
            found.append(proc)
    return found


# ----------------------------------------------------------------------------- config
def test_config_shape_and_mistakes(tmp_path: Path) -> None:
    f = tmp_path / "mcp.json"
    f.write_text(json.dumps({"mcpServers": {
        "notes": {"command": "python", "args": ["s.py", 3], "env": {"A": "1"}, "autoApprove": ["x"]},
        "web": {"url": "http://127.0.0.1:9/mcp", "headers": {"Authorization": "Bearer t"}, "timeout": 5,
                "type": "streamable-http"},
        "off": {"command": "x", "disabled": True},
    }}))
    servers = load_servers(f)
    assert [s.name for s in servers] == ["notes", "web", "off"]
    assert servers[0].stdio and servers[0].args == ("s.py", "3") and servers[0].env == (("A", "1"),)
    assert not servers[1].stdio and servers[1].timeout_s == 5 and servers[2].disabled
    assert servers_from_json(servers_json(servers)) == servers  # what a session's spec keeps
    cases = {
        '{"mcpServers": {"a b": {"command": "x"}}}': "must be 1–32 letters",
        '{"mcpServers": {"a__b": {"command": "x"}}}': "no __",
        '{"mcpServers": {"a": {}}}': "exactly one of",
        '{"mcpServers": {"a": {"command": "x", "url": "http://h"}}}': "exactly one of",
        '{"mcpServers": {"a": {"url": "ftp://h"}}}': "url must start with",
        '{"mcpServers": {"a": {"command": "x", "bogus": 1}}}': "unknown key(s) bogus",
        '{"mcpServers": {"a": {"command": "x", "type": "sse"}}}': "SSE transport is not supported",
        '{"mcpServers": {"a": {"command": "x", "env": {"A": [1]}}}}': "env must be an object of text",
        '{"mcpServers": []}': "must be an object of servers",
        '{"servers": {}, "mcpServers": {}}': "unknown top-level key(s) servers",
        "{not json": "not valid JSON",
    }
    for text, message in cases.items():
        f.write_text(text)
        with pytest.raises(UserError, match=message.replace("(", r"\(").replace(")", r"\)")):
            load_servers(f)
    with pytest.raises(UserError, match="does not exist"):
        load_servers(tmp_path / "missing.json")


def test_tool_names_fit_openai() -> None:
    taken: set[str] = set()
    first = tool_name("notes", "read.file/v2", taken)
    assert first == "mcp__notes__read_file_v2"
    taken.add(first)
    assert tool_name("notes", "read.file/v2", taken) == "mcp__notes__read_file_v2_2"
    assert len(tool_name("s", "x" * 100, set())) == 64


def test_mcp_is_its_own_approval_category() -> None:
    assert ApprovalPolicy.parse("read,edit").reason_to_ask(ToolCategory.MCP) == "mcp actions need approval"
    assert ApprovalPolicy.parse("read,edit,command,other").reason_to_ask(ToolCategory.MCP)
    assert ApprovalPolicy.parse("mcp").reason_to_ask(ToolCategory.MCP) == ""
    assert ApprovalPolicy.parse("all").reason_to_ask(ToolCategory.MCP) == ""


# ----------------------------------------------------------------------------- the agent and a stdio server
@needs_bwrap
async def test_stdio_server_tools_offered_called_and_stopped_with_the_run(
        server: ScriptedServer, make_agent, git_repo: Path) -> None:
    server.push(call("mcp__notes__add", a=2, b=40), call("mcp__notes__note", text="hello"),
                call("mcp__notes__whereami"), DONE)
    agent, rec = make_agent(server, mcp_servers=(notes(env={"NOTES_TAG": "t-42"}),),
                            approval=ApprovalPolicy.parse("read,edit,mcp"))
    outcome = await agent.run()
    assert outcome.status is RunStatus.COMPLETED, [e.result for e in rec.results()]
    ready = rec.of(ev.McpServerReady)
    assert len(ready) == 1 and ready[0].error == "" and ready[0].confined
    assert set(ready[0].tools) == {"mcp__notes__add", "mcp__notes__note", "mcp__notes__peek",
                                   "mcp__notes__whereami", "mcp__notes__fail"}
    tools = server.requests[0]["tools"]
    assert tools[: len(OPENAI_TOOLS)] == list(OPENAI_TOOLS)  # the built-in part stays byte-identical
    add = next(t["function"] for t in tools if t["function"]["name"] == "mcp__notes__add")
    assert add["parameters"]["properties"]["a"]["type"] == "integer" and "strict" not in add
    assert "Add two whole numbers." in add["description"]
    results = {e.tool: e for e in rec.results()}
    assert results["mcp__notes__add"].result == "42"
    assert results["mcp__notes__note"].status == "ok" and (git_repo / "notes.txt").read_text() == "hello\n"
    where = results["mcp__notes__whereami"].result
    assert f"cwd={git_repo}" in where and "tag=t-42" in where  # in the worktree, with its env
    assert int(where.split("pid=")[1].split()[0]) < 50  # its own pid namespace: the sandbox's
    assert not server_processes()  # stopped with the run


@needs_bwrap
async def test_sandbox_hides_what_commands_cannot_see(server: ScriptedServer, make_agent, tmp_path: Path) -> None:
    secret = tmp_path / "secret-dir"
    secret.mkdir()
    (secret / "key").write_text("TOP SECRET")
    server.push(call("mcp__notes__peek", path=str(secret / "key")), DONE)
    agent, rec = make_agent(server, mcp_servers=(notes(),), approval=ApprovalPolicy.parse("read,mcp"),
                            sandbox=SandboxPolicy(hidden_paths=(str(secret),)))
    await agent.run()
    assert rec.results()[0].result.startswith("cannot read"), rec.results()[0].result


@needs_bwrap
async def test_edit_never_approves_mcp_and_a_person_does(server: ScriptedServer, make_agent) -> None:
    server.push(call("mcp__notes__note", text="x"), DONE)
    headless, rec = make_agent(server, mcp_servers=(notes(),), approval=ApprovalPolicy.parse("read,edit"),
                               user_present=False)
    await headless.run()
    refused = rec.results()[0]
    assert refused.status == "denied" and "mcp actions need approval" in refused.result
    asked: list[object] = []

    async def approver(request):  # type: ignore[no-untyped-def]
        asked.append(request)
        return ApprovalDecision.approve()

    server.push(call("mcp__notes__add", a=1, b=1), DONE)
    attended, rec2 = make_agent(server, mcp_servers=(notes(),), approval=ApprovalPolicy.parse("read,edit"),
                                approver=approver, session_id="s2")
    await attended.run()
    assert [r.category for r in asked] == [ToolCategory.MCP] and asked[0].tool == "mcp__notes__add"
    assert rec2.results()[0].result == "2"


@needs_bwrap
async def test_plan_mode_allows_read_only_tools_and_errors_reach_the_model(
        server: ScriptedServer, make_agent) -> None:
    server.push(call("mcp__notes__add", a=1, b=2), call("mcp__notes__note", text="no"),
                call("mcp__notes__add", a=3), DONE)
    agent, rec = make_agent(server, mcp_servers=(notes(),), mode=AgentMode.PLAN)
    await agent.run()
    first, second, third = rec.results()[:3]
    assert first.status == "ok" and first.result == "3"
    assert second.status == "error" and "not allowed in PLAN mode" in second.result
    assert third.status == "error" and "missing the required argument 'b'" in third.result


@needs_bwrap
async def test_text_protocol_uses_use_mcp_tool(make_agent) -> None:
    block = ("<use_mcp_tool>\n<server_name>notes</server_name>\n<tool_name>add</tool_name>\n"
             "<arguments>{\"a\": 5, \"b\": 6}</arguments>\n</use_mcp_tool>")
    done = "<attempt_completion>\n<result>ok</result>\n</attempt_completion>"
    async with ScriptedServer([Reply(text=block), Reply(text=done)]) as srv:
        agent, rec = make_agent(srv, mcp_servers=(notes(),), protocol=ProtocolChoice.TEXT)
        outcome = await agent.run()
        system = srv.requests[0]["messages"][0]["content"]
    assert outcome.status is RunStatus.COMPLETED
    assert "# MCP tools" in system and "## add (server notes)" in system and "tools" not in srv.requests[0]
    assert rec.results()[0].tool == "mcp__notes__add" and rec.results()[0].result == "11"


async def test_a_server_that_cannot_start_is_told_and_the_session_goes_on(
        server: ScriptedServer, make_agent, git_repo: Path) -> None:
    broken = git_repo / "broken.py"  # in the worktree: the sandbox's /tmp is its own
    broken.write_text("import sys\nprint('cannot start: no config', file=sys.stderr)\nsys.exit(3)\n")
    bad = parse_servers({"broken": {"command": sys.executable, "args": [str(broken)]}}, "t")[0]
    server.push(DONE)
    agent, rec = make_agent(server, mcp_servers=(bad,), mcp_start_timeout_s=20)
    outcome = await agent.run()
    assert outcome.status is RunStatus.COMPLETED
    ready = rec.of(ev.McpServerReady)[0]
    assert ready.server == "broken" and ready.error.startswith("could not start")
    assert "cannot start: no config" in ready.error  # its last words on stderr
    assert server.requests[0]["tools"] == list(OPENAI_TOOLS)


async def test_unconfined_and_nobody_there_means_not_started(server: ScriptedServer, make_agent,
                                                             fresh_notices) -> None:
    missing = SandboxPolicy(bwrap="/nonexistent/bwrap")
    server.push(DONE)
    agent, rec = make_agent(server, mcp_servers=(notes(),), sandbox=missing, user_present=False)
    await agent.run()
    ready = rec.of(ev.McpServerReady)[0]
    assert "not started" in ready.error and "nobody" in ready.error and not server_processes()
    required = SandboxPolicy(bwrap="/nonexistent/bwrap", mode=SandboxMode.REQUIRED)
    server.push(DONE)
    agent2, rec2 = make_agent(server, mcp_servers=(notes(),), sandbox=required, session_id="s2")
    await agent2.run()
    assert "sandbox is required" in rec2.of(ev.McpServerReady)[0].error


@pytest.mark.parametrize("mode", [SandboxMode.AUTO, SandboxMode.OFF])
async def test_stopping_the_agent_mid_call_stops_the_server(server: ScriptedServer, make_agent,
                                                            mode: SandboxMode, bwrap_usable: None) -> None:
    slow = parse_servers({"slow": {"command": sys.executable, "args": ["-c", (
        "import time\nfrom mcp.server.mcpserver import MCPServer\ns = MCPServer('slow')\n"
        "@s.tool()\ndef wait() -> str:\n    time.sleep(60)\n    return 'late'\ns.run()\n")]}}, "t")[0]
    server.push(call("mcp__slow__wait"))
    agent, rec = make_agent(server, mcp_servers=(slow,), approval=ApprovalPolicy.parse("all"),
                            sandbox=SandboxPolicy(mode=mode))
    task = asyncio.create_task(agent.run())
    for _ in range(300):
        if rec.of(ev.ToolCallStarted):
            break
        await asyncio.sleep(0.05)
    pids = [p.pid for p in psutil.process_iter(["cmdline"]) if "MCPServer('slow')" in " ".join(p.info["cmdline"] or ())]
    assert pids
    agent.stop()
    outcome = await asyncio.wait_for(task, 30)
    assert outcome.status is RunStatus.STOPPED
    assert not [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]


# ----------------------------------------------------------------------------- streamable HTTP
async def test_streamable_http_server(server: ScriptedServer, make_agent) -> None:
    port = free_port()
    proc = subprocess.Popen([sys.executable, str(SERVER), "--http", str(port)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        async with httpx.AsyncClient() as probe:
            while time.monotonic() < deadline:
                try:
                    await probe.get(f"http://127.0.0.1:{port}/mcp")
                    break
                except httpx.HTTPError:
                    await asyncio.sleep(0.2)
        web = parse_servers({"web": {"url": f"http://127.0.0.1:{port}/mcp"}}, "t")[0]
        server.push(call("mcp__web__add", a=20, b=22), DONE)
        agent, rec = make_agent(server, mcp_servers=(web,), approval=ApprovalPolicy.parse("mcp"))
        outcome = await agent.run()
    finally:
        proc.terminate()
        proc.wait(10)
    assert outcome.status is RunStatus.COMPLETED
    assert rec.of(ev.McpServerReady)[0].tools and rec.results()[0].result == "42"


# ----------------------------------------------------------------------------- the verbs
@needs_bwrap
def test_agent_verb_takes_mcp_config(git_repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from workstation.cli import main

    monkeypatch.setenv("WORKSTATION_DATA_DIR", str(tmp_path / "data"))
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {"notes": {"command": sys.executable, "args": [str(SERVER)]}}}))
    with ScriptedServer([call("mcp__notes__add", a=20, b=22), DONE]).in_thread() as srv:
        code = main(["agent", "--endpoint", srv.base_url, "--api-key", srv.api_key, "--model", srv.model,
                     "--repo", str(git_repo), "--task", "add", "--mcp-config", str(config),
                     "--auto-approve", "read,mcp"])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert "· MCP server notes: 5 tools" in out.out and "mcp__notes__add" in out.out
    assert "✓ mcp__notes__add ok: 42" in out.out
    assert any(t["function"]["name"] == "mcp__notes__add" for t in srv.requests[0]["tools"])
    bad = tmp_path / "bad.json"
    bad.write_text('{"mcpServers": {"x": {}}}')
    assert main(["agent", "--endpoint", "http://127.0.0.1:9", "--model", "m", "--repo", str(git_repo),
                 "--task", "t", "--mcp-config", str(bad)]) == 2
    assert "exactly one of" in capsys.readouterr().err
