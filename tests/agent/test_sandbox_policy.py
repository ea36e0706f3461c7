"""No sandbox, no unattended commands: the agent's rule, whatever its approval policy says.

Bubblewrap is made unusable per test with the policy's ``bwrap`` (a program that does not
exist), as on a machine without it; ``agent_escapes.py`` plays the issue's report through
``workstation agent --auto-approve all`` against a scripted model.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import tempfile
from pathlib import Path

import pytest

from tests.agent import agent_escapes
from tests.helpers.prerequisites import needs_bwrap
from tests.helpers.scripted_server import Reply, ScriptedServer, ToolCall
from workstation.agent import sandbox as sb
from workstation.agent.approvals import ApprovalBroker
from workstation.agent.sandbox import SandboxMode, SandboxPolicy
from workstation.agent.sandbox_status import Confinement, sandbox_status
from workstation.core import agent_events as ev
from workstation.core.approvals import ApprovalDecision


def call(name: str, **args: object) -> Reply:
    return Reply(tool_calls=[ToolCall(name, dict(args))])


DONE = call("attempt_completion", result="finished")


@pytest.fixture
def no_bwrap(tmp_path: Path) -> SandboxPolicy:
    return SandboxPolicy(bwrap=str(tmp_path / "not-installed" / "bwrap"))


async def test_headless_an_auto_approved_command_is_refused_and_says_why(
        server: ScriptedServer, make_agent, git_repo: Path, no_bwrap: SandboxPolicy, fresh_notices: None) -> None:
    server.push(call("execute_command", command="touch ran.txt"), DONE)
    agent, rec = make_agent(server, sandbox=no_bwrap)  # auto-approve all, nobody to ask
    outcome = await agent.run()
    assert not (git_repo / "ran.txt").exists()
    asked = rec.of(ev.ApprovalRequested)
    assert len(asked) == 1 and asked[0].reason.startswith("commands are not confined here (the bubblewrap program")
    resolved = rec.of(ev.ApprovalResolved)
    assert resolved[0].by == "nobody" and not resolved[0].approved
    result = next(r for r in rec.results() if r.tool == "execute_command")
    assert result.status == "denied" and "commands are not confined here" in result.result
    assert outcome.status.value == "completed"  # the model was told and carried on
    assert [n.key for n in sb.notices.said] == ["unattended"]
    assert "WORKSTATION_SANDBOX__MODE=off" in sb.notices.said[0].message


async def test_with_a_person_every_command_asks_and_runs_only_when_approved(
        server: ScriptedServer, make_agent, git_repo: Path, no_bwrap: SandboxPolicy, fresh_notices: None) -> None:
    broker = ApprovalBroker()
    server.push(call("execute_command", command="touch first.txt"), call("execute_command", command="touch second.txt"),
                DONE)
    agent, rec = make_agent(server, sandbox=no_bwrap, approver=broker.request)
    run = asyncio.create_task(agent.run())
    answers = [ApprovalDecision.approve(), ApprovalDecision.deny("not that one")]
    answered: set[str] = set()
    for answer in answers:  # asked for each command, although the policy auto-approves all
        for _ in range(1000):
            fresh = [r for r in broker.pending() if r.request_id not in answered]
            if fresh:
                break
            await asyncio.sleep(0.01)
        (pending,) = fresh
        assert "commands are not confined here" in pending.reason
        assert broker.resolve(pending.request_id, answer)
        answered.add(pending.request_id)
    await asyncio.wait_for(run, 30)
    assert (git_repo / "first.txt").exists() and not (git_repo / "second.txt").exists()
    assert len(rec.of(ev.ApprovalRequested)) == 2
    assert [n.key for n in sb.notices.said] == ["fallback"]  # it ran unconfined, after approval


async def test_required_refuses_even_with_a_person(server: ScriptedServer, make_agent, git_repo: Path,
                                                   tmp_path: Path, fresh_notices: None) -> None:
    broker = ApprovalBroker()
    policy = SandboxPolicy(mode=SandboxMode.REQUIRED, bwrap=str(tmp_path / "none"))
    server.push(call("execute_command", command="touch ran.txt"), DONE)
    agent, rec = make_agent(server, sandbox=policy, approver=broker.request)
    await asyncio.wait_for(agent.run(), 30)
    assert not (git_repo / "ran.txt").exists() and rec.of(ev.ApprovalRequested) == []
    result = next(r for r in rec.results() if r.tool == "execute_command")
    assert result.status == "error" and "the sandbox is required (sandbox.mode = required)" in result.result


async def test_off_is_the_users_choice_and_follows_the_policy(server: ScriptedServer, make_agent, git_repo: Path,
                                                              tmp_path: Path, fresh_notices: None) -> None:
    policy = SandboxPolicy(mode=SandboxMode.OFF, bwrap=str(tmp_path / "none"))
    server.push(call("execute_command", command="touch ran.txt"), DONE)
    agent, rec = make_agent(server, sandbox=policy)
    await agent.run()
    assert (git_repo / "ran.txt").exists() and rec.of(ev.ApprovalRequested) == []
    assert [n.key for n in sb.notices.said] == ["off"]


@needs_bwrap
async def test_confined_commands_follow_the_policy(server: ScriptedServer, make_agent, git_repo: Path) -> None:
    server.push(call("execute_command", command="touch ran.txt"), DONE)
    agent, rec = make_agent(server, sandbox=SandboxPolicy())
    await agent.run()
    assert (git_repo / "ran.txt").exists() and rec.of(ev.ApprovalRequested) == []


async def test_status_words_for_doctor_and_the_banner(tmp_path: Path, fresh_notices: None) -> None:
    missing = await sandbox_status(SandboxPolicy(bwrap=str(tmp_path / "none")))
    assert missing.confinement is Confinement.ATTENDED and not missing.confined and missing.needs_person
    assert "each one waits for your approval" in missing.banner() and missing.fix
    data = missing.as_dict()
    assert data["sandboxed"] is False and data["commands"] == "attended" and "not an executable file" in data["reason"]
    off = await sandbox_status(SandboxPolicy(mode=SandboxMode.OFF))
    assert off.confinement is Confinement.UNCONFINED and "off in settings" in off.banner()
    assert "set sandbox.mode = auto" in off.fix
    required = await sandbox_status(SandboxPolicy(mode=SandboxMode.REQUIRED, bwrap=str(tmp_path / "none")))
    assert required.confinement is Confinement.REFUSED and "no command runs" in required.summary()


# ----- the report, end to end through `workstation agent --auto-approve all` -----
def _escapes(**kwargs: object) -> dict[str, dict]:
    # under /var/tmp: the sandbox gives commands a /tmp of their own
    workdir = Path(tempfile.mkdtemp(prefix="ws-agent-escape-", dir="/var/tmp"))
    try:
        records = agent_escapes.run(workdir, **kwargs)  # type: ignore[arg-type]
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    assert set(records) == {name for name, _, _ in agent_escapes.escapes(agent_escapes.layout(workdir))} | {"_run"}
    return records


@needs_bwrap
@pytest.mark.slow
def test_agent_escapes_are_blocked_by_the_sandbox() -> None:
    records = _escapes()
    run = records.pop("_run")
    assert run["exit_code"] == 0, run["stderr"]
    assert {n: r["detail"] for n, r in records.items() if r["escaped"]} == {}
    assert run["secret_in_requests"] == 0 and run["outside_files"] == []
    for name in ("read_ssh", "write_outside", "symlink_out", "cat_through_symlink"):
        assert records[name]["status"] == "ok", records[name]  # they ran — confined
    assert "No such file" in records["read_ssh"]["detail"] and "Read-only file system" in \
        records["write_outside"]["detail"]


@pytest.mark.slow
def test_agent_escapes_without_bubblewrap_are_refused_and_say_why() -> None:
    records = _escapes(no_bwrap=True)
    run = records.pop("_run")
    assert {n: r["detail"] for n, r in records.items() if r["escaped"]} == {}
    for name in ("read_ssh", "write_outside", "symlink_out", "cat_through_symlink"):
        assert records[name]["status"] == "denied", records[name]
        assert "commands are not confined here" in records[name]["detail"]
    assert run["secret_in_requests"] == 0 and run["outside_files"] == []
    assert "note: commands are NOT sandboxed" in run["stderr"]
    assert "Agent commands are refused: they cannot be confined here" in run["stderr"]


@pytest.mark.slow
def test_control_with_the_sandbox_off_the_same_escapes_get_through() -> None:
    """Proof the escapes are real: unconfined by the user's choice, they work."""
    records = _escapes(mode="off")
    run = records.pop("_run")
    through = {n for n, r in records.items() if r["escaped"]}
    assert through == {"read_ssh", "write_outside", "symlink_out", "cat_through_symlink"}, json.dumps(records)
    assert run["secret_in_requests"] > 0 and run["outside_files"] == ["pwned.txt", "via-link.txt"]
    # the path jail holds on its own, sandbox or not
    assert not records["read_file_through_symlink"]["escaped"]
    assert not records["write_file_through_symlink"]["escaped"]
