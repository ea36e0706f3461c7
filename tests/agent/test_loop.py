"""The agent loop against the scripted server: tools, protocols, errors, mistakes, budgets."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import orjson

from tests.agent.conftest import git
from tests.helpers.prerequisites import needs_bwrap
from tests.helpers.scripted_server import Fault, Reply, ScriptedServer, ToolCall
from workstation.agent.prompts import NO_TOOL_USED, SYSTEM_PROMPT_NATIVE, SYSTEM_PROMPT_TEXT
from workstation.agent.transcript import TranscriptBuilder
from workstation.core import agent_events as ev
from workstation.core.agent_events import AgentState, RunStatus, ToolProtocol
from workstation.core.endpoints import Endpoint


def call(name: str, **args: object) -> Reply:
    return Reply(tool_calls=[ToolCall(name, dict(args))])


DONE = call("attempt_completion", result="finished")
DIFF = "------- SEARCH\n    return a + b\n=======\n    return a * b\n+++++++ REPLACE"


@needs_bwrap  # its agents run commands unattended: only inside the sandbox
async def test_every_tool_round_trip(server: ScriptedServer, make_agent, git_repo: Path) -> None:
    server.push(
        call("list_files", path=".", recursive=True),
        call("read_file", path="app.py"),
        call("search_files", path=".", regex="def ", file_pattern="*.py"),
        call("list_code_definition_names", path="."),
        call("replace_in_file", path="app.py", diff=DIFF),
        call("write_to_file", path="docs/notes.md", content="# notes\n"),
        call("execute_command", command="python3 -c \"import app; print(app.add(3, 4))\""),
        call("attempt_completion", result="multiplied", command="python3 app.py"),
    )
    agent, rec = make_agent(server)
    outcome = await agent.run()
    assert outcome.status is RunStatus.COMPLETED and outcome.result == "multiplied"
    results = {e.tool: e for e in rec.results()}
    assert all(e.status == "ok" for e in rec.results()), [e.result for e in rec.results()]
    assert "app.py" in results["list_files"].result and "README.md" in results["list_files"].result
    assert results["read_file"].result.startswith("def add")
    assert "app.py:1: def add(a, b):" in results["search_files"].result
    assert "def add(a, b)" in results["list_code_definition_names"].result
    assert results["execute_command"].result == "Exit code: 0\nOutput:\n12\n"
    assert (git_repo / "app.py").read_text().endswith("return a * b\n")
    assert (git_repo / "docs/notes.md").read_text() == "# notes\n"
    labels = [e.label for e in rec.of(ev.CheckpointCreated)]
    assert labels[0] == "session start" and "replace_in_file app.py" in labels
    assert "write_to_file docs/notes.md" in labels
    assert git(git_repo, "status", "--porcelain") != ""  # the user's tree is changed, not committed
    assert rec.of(ev.TaskCompleted)[0].command == "python3 app.py"
    assert agent.state is AgentState.DONE
    # every assistant tool call got exactly one tool result, in order
    msgs = agent.messages
    for i, m in enumerate(msgs):
        if m["role"] == "assistant":
            assert msgs[i + 1]["role"] == "tool" and msgs[i + 1]["tool_call_id"] == m["tool_calls"][0]["id"]


async def test_requests_are_append_only_with_byte_stable_prefix(server: ScriptedServer, make_agent) -> None:
    server.push(call("read_file", path="app.py"), call("list_files", path="."), DONE)
    agent, _ = make_agent(server)
    await agent.run()
    reqs = server.requests
    assert len(reqs) == 3
    for a, b in zip(reqs, reqs[1:]):
        assert orjson.dumps(a["tools"]) == orjson.dumps(b["tools"])
        assert b["messages"][: len(a["messages"])] == a["messages"]
    assert reqs[0]["messages"][0] == {"role": "system", "content": SYSTEM_PROMPT_NATIVE}
    assert reqs[0]["tool_choice"] == "auto" and reqs[0]["parallel_tool_calls"] is False
    assert all(t["function"]["strict"] for t in reqs[0]["tools"])
    # a second session with another task shares the system prompt and tools byte for byte
    other = ScriptedServer([DONE])
    async with other:
        agent2, _ = make_agent(other, task="something else entirely", session_id="s2")
        await agent2.run()
    first, second = reqs[0], other.requests[0]
    assert orjson.dumps(first["messages"][0]) == orjson.dumps(second["messages"][0])
    assert orjson.dumps(first["tools"]) == orjson.dumps(second["tools"])
    assert first["messages"][1] != second["messages"][1]


async def test_model_turns_reuse_one_connection(server: ScriptedServer, make_agent) -> None:
    server.push(call("list_files", path="."), call("read_file", path="app.py"), DONE)
    agent, _ = make_agent(server)
    assert (await agent.run()).ok
    assert len(server.requests) == 3 and server.connections == 1


async def test_mistakes_limit_waits_for_user_then_continues(server: ScriptedServer, make_agent) -> None:
    server.push(
        Reply(tool_calls=[ToolCall("delete_everything", {})]),
        Reply(tool_calls=[ToolCall("read_file", '{"path": "app.py"')], finish_reason="length"),
        call("read_file", file="app.py"),
    )
    agent, rec = make_agent(server)
    outcome = await agent.run()
    assert outcome.status is RunStatus.NEEDS_INPUT and "3 mistakes" in outcome.message
    errors = [e.result for e in rec.results()]
    assert "unknown tool 'delete_everything'" in errors[0] and "read_file, write_to_file" in errors[0]
    assert "not valid JSON" in errors[1] and "cut off" in errors[1]
    assert "missing the required argument 'path'" in errors[2]
    assert [m.count for m in rec.of(ev.MistakeCounted)] == [1, 2, 3]
    assert agent.state is AgentState.NEEDS_INPUT
    # run() again without an answer does not call the model
    assert (await agent.run()).status is RunStatus.NEEDS_INPUT and len(server.requests) == 3
    agent.reply("read app.py please")
    server.push(call("read_file", path="app.py"), DONE)
    assert (await agent.run()).status is RunStatus.COMPLETED
    assert "<feedback>\nread app.py please\n</feedback>" in server.requests[3]["messages"][-1]["content"]


async def test_native_text_reply_is_a_mistake_and_escalates_to_required(server: ScriptedServer, make_agent) -> None:
    server.push(Reply(text="I think I should read it."), Reply(text="Still thinking."), DONE)
    agent, rec = make_agent(server)
    outcome = await agent.run()
    assert outcome.status is RunStatus.COMPLETED
    assert server.requests[1]["messages"][-1] == {"role": "user", "content": NO_TOOL_USED}
    assert [r["tool_choice"] for r in server.requests] == ["auto", "auto", "required"]
    assert [p.protocol for p in rec.of(ev.ProtocolSelected)] == [ToolProtocol.NATIVE, ToolProtocol.TOOL_ONLY]
    assert orjson.dumps(server.requests[1]["tools"]) == orjson.dumps(server.requests[2]["tools"])


async def test_guided_protocol_for_small_models(make_agent, git_repo: Path) -> None:
    code = Reply(text="```python\ndef add(a, b):\n    return a - b\n```")
    async with ScriptedServer(responder=lambda body, n: code, model="SmolLM2-135M") as srv:  # size from the name
        agent, rec = make_agent(srv, task="Make add in app.py subtract.")
        assert (await agent.run()).ok
    assert rec.of(ev.ProtocolSelected)[0].protocol is ToolProtocol.GUIDED
    # the named file and function leave only the code to write: a greedy and sampled drafts
    assert sorted(r["temperature"] for r in srv.requests) == [0.0, 0.5]
    assert all("tools" not in r and "regex" in r["structured_outputs"] for r in srv.requests)
    assert [e.tool for e in rec.of(ev.ToolCallStarted)] == ["read_file", "replace_in_file", "attempt_completion"]
    assert (git_repo / "app.py").read_text() == "def add(a, b):\n    return a - b\n"


async def test_recovers_tool_call_left_in_content(server: ScriptedServer, make_agent) -> None:
    server.push(Reply(text='<tool_call>\n{"name": "read_file", "arguments": {"path": "app.py"}}\n</tool_call>'), DONE)
    agent, rec = make_agent(server)
    assert (await agent.run()).ok
    assert rec.results()[0].status == "ok" and rec.results()[0].result.startswith("def add")
    assistant = agent.messages[2]
    assert assistant["tool_calls"][0]["function"] == {"name": "read_file", "arguments": '{"path":"app.py"}'}


TEXT_READ = "Let me read it.\n<read_file>\n<path>app.py</path>\n</read_file>"
TEXT_WRITE = "<write_to_file>\n<path>hello.py</path>\n<content>\nprint('hi')\n</content>\n</write_to_file>"
TEXT_DONE = "<attempt_completion>\n<result>wrote hello.py</result>\n</attempt_completion>"


async def test_text_protocol_without_tool_support(make_agent, git_repo: Path) -> None:
    async with ScriptedServer([Reply(text=TEXT_READ), Reply(text=TEXT_WRITE), Reply(text=TEXT_DONE)],
                              native_tools=False) as srv:
        agent, rec = make_agent(srv)
        outcome = await agent.run()
    assert outcome.ok and outcome.result == "wrote hello.py"
    assert (git_repo / "hello.py").read_text() == "print('hi')\n"
    assert srv.rejected == [] and all("tools" not in r for r in srv.requests)
    first = srv.requests[0]["messages"]
    assert first[0]["content"] == SYSTEM_PROMPT_TEXT and "<write_to_file>" in SYSTEM_PROMPT_TEXT
    result_msg = srv.requests[1]["messages"][-1]
    assert result_msg["role"] == "user" and result_msg["content"].startswith("[read_file for 'app.py'] Result:\ndef add")


async def test_server_refusing_tools_steps_down_to_text(http, git_repo: Path) -> None:
    from workstation.agent import Agent, AgentConfig
    from workstation.engine.chat_client import ChatClient

    async with ScriptedServer([Reply(text=TEXT_READ), Reply(text=TEXT_DONE)], native_tools=False) as srv:
        endpoint = Endpoint(srv.base_url, srv.api_key, srv.model, native_tools=None)
        events: list[object] = []
        agent = Agent("s", git_repo, "t", ChatClient(http, endpoint), AgentConfig(), on_event=events.append)
        assert (await agent.run()).ok
    assert [r.get("tool_choice") for r in srv.rejected] == ["auto", "required"]
    chosen = [e.protocol for e in events if isinstance(e, ev.ProtocolSelected)]
    assert chosen == [ToolProtocol.NATIVE, ToolProtocol.TOOL_ONLY, ToolProtocol.TEXT]
    assert srv.requests[0]["messages"][0]["content"] == SYSTEM_PROMPT_TEXT


async def test_retries_server_errors_and_broken_streams(server: ScriptedServer, make_agent) -> None:
    server.push(Fault.http(500), Fault.http(429, "slow down"), Fault.truncated_json(2),
                Fault.disconnect(2), Fault.stall(seconds=8), DONE)
    agent, rec = make_agent(server, max_retries=5)
    outcome = await agent.run()
    assert outcome.ok
    errors = rec.of(ev.ErrorOccurred)
    assert len(errors) == 5 and all(e.retrying for e in errors)
    assert "HTTP 500" in errors[0].message and "HTTP 429" in errors[1].message
    assert "malformed stream chunk" in errors[2].message
    assert "read timeout" in errors[4].message
    assert [t.finish_reason for t in rec.of(ev.TurnFinished)][-1] == "tool_calls"


async def test_gives_up_after_retries_and_on_wrong_content_type(server: ScriptedServer, make_agent) -> None:
    server.push(*[Fault.http(503)] * 3)
    agent, _ = make_agent(server, max_retries=2)
    outcome = await agent.run()
    assert outcome.status is RunStatus.FAILED and "HTTP 503" in outcome.message
    assert agent.state is AgentState.FAILED
    server.push(Fault.wrong_content_type())
    outcome = await agent.run()
    assert outcome.status is RunStatus.FAILED and "did not stream" in outcome.message
    server.push(Fault.http(401, "bad key"))
    assert "HTTP 401" in (await agent.run()).message
    assert len(server.requests) == 5  # 3 + 1 + 1: no retries of what retrying cannot cure


async def test_budget_of_turns(server: ScriptedServer, make_agent) -> None:
    server.push(call("list_files", path="."), call("list_files", path="."), call("list_files", path="."))
    agent, _ = make_agent(server, max_turns=2)
    outcome = await agent.run()
    assert outcome.status is RunStatus.BUDGET_EXHAUSTED and outcome.turns == 2
    assert agent.state is AgentState.FAILED


async def test_token_budget(server: ScriptedServer, make_agent) -> None:
    server.push(Reply(tool_calls=[ToolCall("list_files", {"path": "."})], prompt_tokens=900, completion_tokens=200),
                call("list_files", path="."))
    agent, _ = make_agent(server, max_total_tokens=1000)
    outcome = await agent.run()
    assert outcome.status is RunStatus.BUDGET_EXHAUSTED and outcome.prompt_tokens == 900


async def test_generation_slot_wraps_each_model_turn(server: ScriptedServer, make_agent) -> None:
    server.push(call("list_files", path="."), DONE)
    entered: list[str] = []

    @contextlib.asynccontextmanager
    async def slot():
        entered.append("in")
        yield
        entered.append("out")

    agent, rec = make_agent(server, slot=slot)
    assert (await agent.run()).ok
    assert entered == ["in", "out", "in", "out"]
    states = [e.new for e in rec.of(ev.AgentStateChanged)]
    assert AgentState.WAITING_SLOT in states and AgentState.GENERATING in states


async def test_usage_and_transcript_from_events(server: ScriptedServer, make_agent) -> None:
    server.push(Reply(text="Reading. ", tool_calls=[ToolCall("read_file", {"path": "app.py"})],
                      prompt_tokens=120, completion_tokens=30), DONE)
    agent, rec = make_agent(server)
    await agent.run()
    usage = rec.of(ev.UsageReported)[0]
    assert (usage.prompt_tokens, usage.completion_tokens, usage.context_tokens) == (120, 30, 150)
    builder = TranscriptBuilder()
    for e in rec.events:
        builder.feed(e)
    text = builder.text()
    assert "assistant: Reading." in text and "[ok] read_file app.py" in text and "def add" in text
    assert "completed: finished" in text
    streamed = "".join(e.arguments_delta for e in rec.of(ev.ToolCallStreamed))
    assert streamed.startswith('{"path"')
    finished = rec.of(ev.RunFinished)[-1]
    assert finished.status is RunStatus.COMPLETED and finished.turns == 2


async def test_context_overflow_is_condensed_and_retried(server: ScriptedServer, make_agent) -> None:
    server.push(call("list_files", path="."), call("read_file", path="app.py"),
                Fault.http(400, "This model's maximum context length is 8192 tokens. However, you requested 9000 tokens."),
                Reply(text="Summary: listed and read app.py."), DONE)
    agent, rec = make_agent(server)
    assert (await agent.run()).ok
    assert len(rec.of(ev.ContextCondensed)) == 1
    assert "tools" not in server.requests[3]  # the summary request
    assert "Summary: listed and read" in server.requests[4]["messages"][2]["content"]


async def test_event_listener_errors_do_not_break_the_agent(server: ScriptedServer, http, tmp_path: Path) -> None:
    from workstation.agent import Agent, AgentConfig
    from workstation.engine.chat_client import ChatClient

    def broken(_event: object) -> None:
        raise RuntimeError("listener bug")

    server.push(DONE)
    agent = Agent("s", tmp_path, "t", ChatClient(http, server.endpoint),
                  AgentConfig(checkpoints=False), on_event=broken)
    assert (await agent.run()).ok


async def test_run_twice_at_once_is_refused(server: ScriptedServer, make_agent) -> None:
    server.push(Reply(tool_calls=[ToolCall("list_files", {"path": "."})], delay_s=0.05), DONE)
    agent, _ = make_agent(server)
    first = asyncio.create_task(agent.run())
    await asyncio.sleep(0.05)
    try:
        await agent.run()
    except RuntimeError as exc:
        assert "already running" in str(exc)
    else:
        raise AssertionError("a second run() must be refused")
    assert (await first).ok


async def test_an_os_error_of_a_tool_is_a_tool_error_not_a_crash(server: ScriptedServer, make_agent) -> None:
    """A path the system refuses (a name longer than 255 bytes: ENAMETOOLONG from the path
    jail's realpath, for reads and writes alike) comes back to the model as the tool's
    error, and the session goes on (two mistakes stay under the limit of three)."""
    long_name = "x" * 300
    server.push(
        call("read_file", path=long_name),
        call("write_to_file", path=f"docs/{long_name}.md", content="x"),
        DONE,
    )
    agent, rec = make_agent(server)
    outcome = await agent.run()
    assert outcome.status is RunStatus.COMPLETED and outcome.result == "finished"
    results = rec.results()
    assert [r.status for r in results[:2]] == ["error"] * 2
    assert all("File name too long" in r.result and "Traceback" not in r.result for r in results[:2])
    assert "use a shorter path" in results[0].result
    assert not rec.of(ev.ErrorOccurred)
    sent = orjson.dumps(server.requests[1]["messages"][-1]).decode()
    assert "[ERROR] the system refused" in sent
