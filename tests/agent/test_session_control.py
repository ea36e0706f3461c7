"""Approvals, modes, questions, stop, pause, resume from history, checkpoints, condensing."""

from __future__ import annotations

import asyncio
import secrets
from pathlib import Path

import psutil

from tests.helpers.prerequisites import needs_bwrap
from tests.helpers.scripted_server import Reply, ScriptedServer, ToolCall
from workstation.agent import AgentSnapshot, ApprovalBroker
from workstation.agent.prompts import HEADLESS_ANSWER, INTERRUPTED_RESULT
from workstation.core import agent_events as ev
from workstation.core.agent_events import AgentMode, AgentState, RunStatus
from workstation.core.approvals import ApprovalDecision, ApprovalPolicy


def call(name: str, **args: object) -> Reply:
    return Reply(tool_calls=[ToolCall(name, dict(args))])


DONE = call("attempt_completion", result="finished")


async def _until(predicate, timeout_s: float = 10.0) -> None:
    for _ in range(int(timeout_s / 0.02)):
        if predicate():
            return
        await asyncio.sleep(0.02)
    raise AssertionError("condition not reached")


# ----- approvals
async def test_approve_deny_and_edit_through_the_broker(server: ScriptedServer, make_agent, git_repo: Path) -> None:
    server.push(
        call("write_to_file", path="a.txt", content="one\n"),
        call("write_to_file", path="b.txt", content="two\n"),
        call("execute_command", command="echo original"),
        DONE,
    )
    broker = ApprovalBroker()
    agent, rec = make_agent(server, approver=broker.request, approval=ApprovalPolicy.parse("read"))
    task = asyncio.create_task(agent.run())
    await _until(lambda: len(broker.pending()) == 1)
    request = broker.pending()[0]
    assert request.tool == "write_to_file" and request.arguments == {"path": "a.txt", "content": "one\n"}
    assert agent.state is AgentState.AWAITING_APPROVAL
    broker.resolve(request.request_id, ApprovalDecision.approve())
    await _until(lambda: len(broker.pending()) == 1 and broker.pending()[0].request_id != request.request_id)
    broker.resolve(broker.pending()[0].request_id, ApprovalDecision.deny("not that file"))
    await _until(lambda: len(broker.pending()) == 1 and broker.pending()[0].tool == "execute_command")
    broker.resolve(broker.pending()[0].request_id, ApprovalDecision.edit({"command": "echo edited"}))
    outcome = await task
    assert outcome.ok
    assert (git_repo / "a.txt").exists() and not (git_repo / "b.txt").exists()
    results = rec.results()
    assert results[1].status == "denied" and "Their feedback: not that file" in results[1].result
    assert "edited" in results[2].result and "Output:\nedited" in results[2].result
    requested = rec.of(ev.ApprovalRequested)
    assert [r.tool for r in requested] == ["write_to_file", "write_to_file", "execute_command"]
    assert [r.edited for r in rec.of(ev.ApprovalResolved)] == [False, False, True]


async def test_headless_refuses_what_needs_approval_without_hanging(server: ScriptedServer, make_agent, git_repo: Path) -> None:
    server.push(call("execute_command", command="touch made.txt"), call("read_file", path="app.py"), DONE)
    agent, rec = make_agent(server, approval=ApprovalPolicy.parse("read,edit"))
    assert (await agent.run()).ok
    assert not (git_repo / "made.txt").exists()
    first = rec.results()[0]
    assert first.status == "denied" and "no one can approve" in first.result
    assert rec.of(ev.ApprovalResolved)[0].by == "nobody"
    assert rec.results()[1].status == "ok" and rec.of(ev.MistakeCounted) == []


async def test_deny_list_asks_even_under_auto_approve_all(server: ScriptedServer, make_agent, git_repo: Path) -> None:
    server.push(call("execute_command", command="rm -rf ."), DONE)
    agent, rec = make_agent(server, approval=ApprovalPolicy.parse("all"))
    await agent.run()
    assert (git_repo / "app.py").exists()
    assert "always-ask rule" in rec.of(ev.ApprovalRequested)[0].reason


# ----- modes
async def test_plan_mode_only_reads_and_mode_switch_is_announced(server: ScriptedServer, make_agent, git_repo: Path) -> None:
    server.push(call("read_file", path="app.py"), call("write_to_file", path="x.py", content="x"),
                call("execute_command", command="ls"), DONE)
    agent, rec = make_agent(server, mode=AgentMode.PLAN)
    assert (await agent.run()).ok
    assert [r.status for r in rec.results()] == ["ok", "error", "error", "ok"]
    assert "not allowed in PLAN mode" in rec.results()[1].result
    assert not (git_repo / "x.py").exists()
    assert "Mode: PLAN" in server.requests[0]["messages"][1]["content"]
    agent.set_mode(AgentMode.ACT)
    agent.reply("go ahead")
    server.push(call("write_to_file", path="x.py", content="x = 1\n"), DONE)
    assert (await agent.run()).ok
    assert (git_repo / "x.py").read_text() == "x = 1\n"
    sent = [m["content"] for m in server.requests[4]["messages"][-2:]]
    assert any("switched to ACT mode" in c for c in sent)
    assert rec.of(ev.ModeChanged)[0].mode is AgentMode.ACT


# ----- questions
async def test_question_waits_for_answer_which_becomes_the_tool_result(server: ScriptedServer, make_agent) -> None:
    server.push(call("ask_followup_question", question="Which file?", options=["a.py", "b.py"]))
    agent, rec = make_agent(server)
    outcome = await agent.run()
    assert outcome.status is RunStatus.NEEDS_INPUT and outcome.question == "Which file?"
    assert outcome.options == ("a.py", "b.py")
    assert rec.of(ev.QuestionAsked)[0].question == "Which file?"
    snap = AgentSnapshot.from_json(agent.snapshot().to_json())
    assert snap.pending_question_call == agent.messages[-1]["tool_calls"][0]["id"]
    agent.reply("a.py")
    server.push(DONE)
    assert (await agent.run()).ok
    answer = server.requests[1]["messages"][-1]
    assert answer["role"] == "tool" and answer["content"] == "<answer>\na.py\n</answer>"


async def test_headless_question_is_answered_at_once(server: ScriptedServer, make_agent) -> None:
    server.push(call("ask_followup_question", question="Which file?"), DONE)
    agent, _ = make_agent(server, user_present=False)
    assert (await agent.run()).ok
    assert server.requests[1]["messages"][-1]["content"] == HEADLESS_ANSWER


# ----- stop and pause
def _sleepers(marker: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        try:
            if marker in " ".join(proc.info["cmdline"] or []) and proc.info["status"] != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except psutil.Error:
            continue
    return found


@needs_bwrap  # its agents run commands unattended: only inside the sandbox
async def test_stop_kills_a_running_command_and_leaves_history_consistent(server: ScriptedServer, make_agent) -> None:
    marker = f"{secrets.randbelow(10**6) + 10**6}.5"  # a unique `sleep` argument, seen from the host
    server.push(call("execute_command", command=f"sleep {marker} & wait"))
    agent, rec = make_agent(server)
    task = asyncio.create_task(agent.run())
    await _until(lambda: bool(_sleepers(marker)))
    agent.stop()
    outcome = await task
    assert outcome.status is RunStatus.STOPPED and agent.state is AgentState.STOPPED
    try:
        await _until(lambda: not _sleepers(marker))
    except AssertionError:
        raise AssertionError(f"still running: {[(p.pid, p.info) for p in _sleepers(marker)]}") from None
    last = agent.messages[-1]
    assert last["role"] == "tool" and last["content"] == INTERRUPTED_RESULT
    assert rec.results()[-1].status == "interrupted"
    server.push(DONE)
    assert (await agent.run()).ok  # a stopped agent can continue


async def test_stop_during_generation(server: ScriptedServer, make_agent) -> None:
    server.push(Reply(text="x" * 400, chunk_chars=1, delay_s=0.01))
    agent, rec = make_agent(server)
    task = asyncio.create_task(agent.run())
    await _until(lambda: len(rec.of(ev.TextStreamed)) > 5)
    agent.stop()
    assert (await task).status is RunStatus.STOPPED
    assert rec.of(ev.TurnFinished)[-1].finish_reason == "error"
    assert [m["role"] for m in agent.messages] == ["system", "user"]


async def test_pause_between_steps_then_resume(server: ScriptedServer, make_agent) -> None:
    server.push(call("list_files", path="."), DONE)
    agent, rec = make_agent(server)
    agent.pause()
    task = asyncio.create_task(agent.run())
    await _until(lambda: agent.state is AgentState.PAUSED)
    await asyncio.sleep(0.1)
    assert server.requests == []
    agent.resume()
    assert (await task).ok


async def test_stop_while_paused(server: ScriptedServer, make_agent) -> None:
    agent, _ = make_agent(server)
    agent.pause()
    task = asyncio.create_task(agent.run())
    await _until(lambda: agent.state is AgentState.PAUSED)
    await agent.aclose()
    assert (await task).status is RunStatus.STOPPED


# ----- resume
async def test_resume_reports_interrupted_call_without_rerunning_it(server: ScriptedServer, make_agent, git_repo: Path) -> None:
    server.push(call("write_to_file", path="out.txt", content="first\n"))
    agent, rec = make_agent(server)
    original_run = agent._toolbox.run
    started = asyncio.Event()

    async def hang(*a, **k):  # the app "dies" while the tool runs
        started.set()
        await asyncio.sleep(3600)
        return await original_run(*a, **k)

    agent._toolbox.run = hang  # type: ignore[method-assign]
    task = asyncio.create_task(agent.run())
    await started.wait()
    # what the fleet persisted up to here: the events' messages
    persisted = [m for m in (ev_.message_json for ev_ in rec.of(ev.MessageAppended))]
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        pass
    import orjson

    history = [orjson.loads(m) for m in persisted]
    assert history[-1]["role"] == "assistant" and history[-1]["tool_calls"]
    server.push(DONE)
    resumed, rec2 = make_agent(server, history=history)
    assert (await resumed.run()).ok
    sent = server.requests[-1]["messages"]
    assert sent[len(history)]["role"] == "tool" and sent[len(history)]["content"] == INTERRUPTED_RESULT
    assert not (git_repo / "out.txt").exists()  # not re-run
    appended = rec2.of(ev.MessageAppended)
    assert appended[0].index == len(history) and appended[0].role == "tool"


async def test_resume_from_snapshot_keeps_state(server: ScriptedServer, make_agent) -> None:
    server.push(call("read_file", path="app.py"), call("ask_followup_question", question="ok?"))
    agent, _ = make_agent(server, mode=AgentMode.PLAN)
    await agent.run()
    snap = AgentSnapshot.from_json(agent.snapshot().to_json())
    server.push(DONE)
    resumed, _ = make_agent(server, snapshot=snap)
    assert resumed.mode is AgentMode.PLAN
    assert (await resumed.run()).status is RunStatus.NEEDS_INPUT  # still waiting for the answer
    resumed.reply("yes")
    assert (await resumed.run()).ok
    assert server.requests[-1]["messages"][-1]["content"] == "<answer>\nyes\n</answer>"


# ----- checkpoints
async def test_restore_files_and_conversation(server: ScriptedServer, make_agent, git_repo: Path) -> None:
    diff = "------- SEARCH\n    return a + b\n=======\n    return 0\n+++++++ REPLACE"
    server.push(call("replace_in_file", path="app.py", diff=diff),
                call("write_to_file", path="extra.py", content="x = 1\n"), DONE)
    agent, rec = make_agent(server)
    assert (await agent.run()).ok
    checkpoints = await agent.list_checkpoints()
    assert [c.label for c in checkpoints] == ["session start", "replace_in_file app.py", "write_to_file extra.py"]
    middle = checkpoints[1]
    await agent.restore_checkpoint(middle.commit, files=True, conversation=True)
    assert (git_repo / "app.py").read_text().endswith("return 0\n") and not (git_repo / "extra.py").exists()
    assert len(agent.messages) == middle.message_index
    assert agent.messages[-1]["role"] == "tool"
    assert rec.of(ev.CheckpointRestored)[0].conversation
    await agent.restore_checkpoint(checkpoints[0].commit, files=True, conversation=False)
    assert (git_repo / "app.py").read_text().endswith("return a + b\n")
    assert "restored the project files" in agent.messages[-1]["content"]
    assert isinstance(rec.of(ev.HistoryReplaced)[0].messages_json, str)


async def test_not_a_git_repository_runs_without_checkpoints(server: ScriptedServer, make_agent, tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    server.push(call("write_to_file", path="a.txt", content="a"), DONE)
    agent, rec = make_agent(server, root=plain)
    assert (await agent.run()).ok
    assert rec.of(ev.CheckpointCreated) == [] and await agent.list_checkpoints() == []


# ----- condensing
async def test_condenses_past_75_percent_keeping_prefix(server: ScriptedServer, make_agent) -> None:
    big = 3000
    server.push(
        Reply(tool_calls=[ToolCall("read_file", {"path": "app.py"})], prompt_tokens=big, completion_tokens=20),
        Reply(tool_calls=[ToolCall("list_files", {"path": "."})], prompt_tokens=big + 500, completion_tokens=20),
        Reply(tool_calls=[ToolCall("read_file", {"path": "README.md"})], prompt_tokens=6200, completion_tokens=20),
        Reply(text="The task: do it. Read app.py and README.md, listed files."),
        DONE,
    )
    agent, rec = make_agent(server, context_window_tokens=8192, keep_recent_exchanges=1)
    assert (await agent.run()).ok
    [condensed] = rec.of(ev.ContextCondensed)
    assert condensed.tokens_before > 0.75 * 8192 and condensed.messages_after < condensed.messages_before
    summary_request, next_request = server.requests[3], server.requests[4]
    assert "tools" not in summary_request
    assert "Summarize the conversation" in summary_request["messages"][-1]["content"]
    msgs = next_request["messages"]
    assert msgs[:2] == server.requests[0]["messages"][:2]  # system + task stay byte-identical
    assert "Read app.py and README.md" in msgs[2]["content"] and "Files read: app.py, README.md" in msgs[2]["content"]
    assert msgs[3]["role"] == "assistant" and msgs[3]["tool_calls"][0]["function"]["name"] == "read_file"
    assert len(msgs) == 5


async def test_condensing_falls_back_when_the_summary_fails(make_agent) -> None:
    from tests.helpers.scripted_server import Fault

    async with ScriptedServer([
        Reply(tool_calls=[ToolCall("read_file", {"path": "app.py"})], prompt_tokens=3000),
        Reply(tool_calls=[ToolCall("list_files", {"path": "."})], prompt_tokens=7000),
        Fault.http(500), DONE,
    ]) as srv:
        agent, rec = make_agent(srv, context_window_tokens=8192, keep_recent_exchanges=1)
        assert (await agent.run()).ok
    assert "Files read: app.py" in rec.of(ev.ContextCondensed)[0].summary


async def test_fleet_style_resume_from_messages_with_an_answer(server: ScriptedServer, make_agent) -> None:
    """The fleet rebuilds the history from MessageAppended events and passes the user's answer."""
    import orjson

    server.push(call("ask_followup_question", question="Which name?"))
    first, rec = make_agent(server)
    assert (await first.run()).status is RunStatus.NEEDS_INPUT
    history = [orjson.loads(e.message_json) for e in rec.of(ev.MessageAppended)]
    server.push(DONE)
    resumed, rec2 = make_agent(server, history=history)
    resumed.reply("call it Bob")
    assert (await resumed.run()).ok
    sent = server.requests[-1]["messages"]
    assert sent[: len(history)] == history
    assert sent[len(history)] == {"role": "tool", "tool_call_id": history[-1]["tool_calls"][0]["id"],
                                  "content": "<answer>\ncall it Bob\n</answer>"}
    assert [e.index for e in rec2.of(ev.MessageAppended)][0] == len(history)


async def test_reply_before_the_first_run_follows_the_task(server: ScriptedServer, make_agent) -> None:
    server.push(DONE)
    agent, _ = make_agent(server)
    agent.reply("also keep it short")
    assert (await agent.run()).ok
    roles = [m["role"] for m in server.requests[0]["messages"]]
    assert roles == ["system", "user", "user"]
    assert "also keep it short" in server.requests[0]["messages"][2]["content"]


# ----- a message while the agent works
def _feedback_in(body: dict, text: str) -> bool:
    return any(m.get("role") == "user" and text in str(m.get("content")) for m in body["messages"])


async def test_a_message_while_it_works_goes_before_its_next_model_turn(server: ScriptedServer, make_agent) -> None:
    server.push(Reply(text="thinking " * 40, chunk_chars=4, delay_s=0.01,
                      tool_calls=[ToolCall("list_files", {"path": "."})]), DONE)
    agent, rec = make_agent(server)
    task = asyncio.create_task(agent.run())
    await _until(lambda: len(rec.of(ev.TextStreamed)) > 3)
    assert agent.takes_messages
    agent.reply("also look at b.py")
    assert (await task).ok and not agent.takes_messages
    assert not _feedback_in(server.requests[0], "also look at b.py")
    assert _feedback_in(server.requests[1], "also look at b.py")
    assert [e.text for e in rec.of(ev.UserMessageAdded)] == ["also look at b.py"]  # announced once


async def test_a_message_during_the_turn_that_finishes_is_answered_not_left_behind(
        server: ScriptedServer, make_agent) -> None:
    """The run's last turn (attempt_completion) was streaming when the user wrote: the run
    used to end with the message queued, in the transcript and never in the history."""
    slow_done = Reply(text="wrapping up " * 30, chunk_chars=4, delay_s=0.01,
                      tool_calls=[ToolCall("attempt_completion", {"result": "finished"})])
    server.push(slow_done, DONE)
    agent, rec = make_agent(server)
    task = asyncio.create_task(agent.run())
    await _until(lambda: len(rec.of(ev.TextStreamed)) > 3)
    agent.reply("and add a test")
    outcome = await task
    assert outcome.ok and len(server.requests) == 2
    assert _feedback_in(server.requests[1], "and add a test")
    assert [e.text for e in rec.of(ev.UserMessageAdded)] == ["and add a test"]


async def test_a_message_before_a_stop_is_in_the_history_for_the_next_run(server: ScriptedServer, make_agent) -> None:
    server.push(Reply(text="x" * 400, chunk_chars=1, delay_s=0.01))
    agent, rec = make_agent(server)
    task = asyncio.create_task(agent.run())
    await _until(lambda: len(rec.of(ev.TextStreamed)) > 5)
    agent.reply("use the other file")
    agent.stop()
    assert (await task).status is RunStatus.STOPPED
    assert agent.messages[-1]["role"] == "user" and "use the other file" in str(agent.messages[-1]["content"])
    server.push(DONE)
    assert (await agent.run()).ok
    assert _feedback_in(server.requests[-1], "use the other file")
