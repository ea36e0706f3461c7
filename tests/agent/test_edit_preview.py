"""The change a proposed edit would make, shown with its approval: a unified diff of the
file as it is against the file after the edit; the file itself is never touched."""

from __future__ import annotations

from pathlib import Path

from tests.agent.test_loop import DIFF, call
from tests.helpers.prerequisites import needs_bwrap
from tests.helpers.scripted_server import ScriptedServer
from workstation.agent.tool_specs import SPECS_BY_NAME
from workstation.agent.jail import PathJail
from workstation.core import agent_events as ev
from workstation.core.approvals import ApprovalDecision, ApprovalPolicy


def edit_preview(jail: PathJail, tool: str, arguments: dict) -> str:  # type: ignore[type-arg]
    """What the approval shows for a call of ``tool``: its spec's preview, "" for a tool with none."""
    preview = SPECS_BY_NAME[tool].preview
    return preview(jail, arguments) if preview is not None else ""


def test_write_to_file_over_an_existing_file_and_a_new_one(git_repo: Path) -> None:
    jail = PathJail(str(git_repo))
    preview = edit_preview(jail, "write_to_file", {"path": "app.py", "content": "def add(a, b):\n    return a * b\n"})
    assert preview.splitlines()[:2] == ["--- a/app.py", "+++ b/app.py"]
    assert "-    return a + b" in preview and "+    return a * b" in preview
    new = edit_preview(jail, "write_to_file", {"path": "docs/notes.md", "content": "# notes\nhello\n"})
    assert new.splitlines()[:2] == ["--- /dev/null", "+++ b/docs/notes.md"] and "+hello" in new
    assert not (git_repo / "docs").exists()  # a preview writes nothing


def test_replace_in_file_applied_and_blocks_that_do_not_apply(git_repo: Path) -> None:
    jail = PathJail(str(git_repo))
    preview = edit_preview(jail, "replace_in_file", {"path": "app.py", "diff": DIFF})
    assert "@@ -1,2 +1,2 @@" in preview and "-    return a + b" in preview and "+    return a * b" in preview
    stale = "------- SEARCH\n    return a - b\n=======\n    return a / b\n+++++++ REPLACE"
    shown = edit_preview(jail, "replace_in_file", {"path": "app.py", "diff": stale})
    assert shown.startswith("# the blocks do not apply to app.py as it is now")
    assert "-    return a - b" in shown and "+    return a / b" in shown
    assert (git_repo / "app.py").read_text() == "def add(a, b):\n    return a + b\n"


def test_other_tools_and_paths_outside_have_no_preview(git_repo: Path) -> None:
    jail = PathJail(str(git_repo))
    assert [name for name, spec in SPECS_BY_NAME.items() if spec.preview] == ["write_to_file", "replace_in_file"]
    assert edit_preview(jail, "execute_command", {"command": "ls"}) == ""
    assert edit_preview(jail, "write_to_file", {"path": "../outside.txt", "content": "x"}) == ""


@needs_bwrap  # the command runs unattended: only inside the sandbox
async def test_the_approval_request_carries_the_preview_and_a_command_its_exit_code(
        server: ScriptedServer, make_agent) -> None:
    requests: list = []

    async def approver(request):  # type: ignore[no-untyped-def]
        requests.append(request)
        return ApprovalDecision.approve()

    server.push(call("replace_in_file", path="app.py", diff=DIFF),
                call("execute_command", command="python3 -c 'import sys; sys.exit(3)'"),
                call("attempt_completion", result="done"))
    agent, rec = make_agent(server, approver=approver, approval=ApprovalPolicy.parse("read,command"))
    await agent.run()
    (request,) = requests
    assert request.tool == "replace_in_file" and "+    return a * b" in request.preview
    assert rec.of(ev.ApprovalRequested)[0].preview == request.preview
    command = next(r for r in rec.results() if r.tool == "execute_command")
    assert command.status == "ok" and command.exit_code == 3 and command.result.startswith("Exit code: 3")
