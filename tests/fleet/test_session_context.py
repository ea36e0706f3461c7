"""What a task file can give each session besides its task — rules files, MCP servers,
images, a LoRA adapter — and that it reaches the requests the engine gets."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.prerequisites import needs_bwrap
from tests.helpers.scripted_server import Reply, ScriptedServer, ToolCall
from workstation import cli
from workstation.core.errors import UserError
from workstation.fleet.taskfile import load_taskfile


def finish_at_once(body: dict[str, Any], n: int) -> Reply:
    return Reply(tool_calls=[ToolCall("attempt_completion", {"result": "done"})])


def run(args: list[str], data: Path, server: ScriptedServer) -> int:
    return cli.main(["--data-dir", str(data), "run", *args, "--endpoint", server.base_url,
                     "--api-key", server.api_key, "--model", server.model, "--json"])


def commit(repo: Path, *files: str) -> None:
    subprocess.run(["git", "-C", str(repo), "add", *files], check=True)
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.invalid",
                    "commit", "-qm", "rules"], check=True)


def test_taskfile_rules_reach_the_system_prompt(tmp_path: Path, git_repo: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    (git_repo / "AGENTS.md").write_text("Repository rule: keep it short.\n")
    commit(git_repo, "AGENTS.md")
    (tmp_path / "team.md").write_text("Team rule: write tests.\n")
    tasks = tmp_path / "fleet.toml"
    tasks.write_text(f'''
[defaults]
repo = "{git_repo}"

[[session]]
task = "with the repository's rules and the team's"
name = "both"
rules = ["team.md"]

[[session]]
task = "without any"
name = "none"
rules = false
''')
    with ScriptedServer(responder=finish_at_once).in_thread() as server:
        assert run(["--tasks", str(tasks)], tmp_path / "data", server) == 0, capsys.readouterr()
        systems = {next(m["content"] for m in r["messages"] if m["role"] == "user"): r["messages"][0]["content"]
                   for r in server.requests}
    both = next(v for k, v in systems.items() if "the team's" in k)
    none = next(v for k, v in systems.items() if "without any" in k)
    assert "Repository rule: keep it short." in both and "Team rule: write tests." in both
    assert both.index("Repository rule") < both.index("Team rule")
    assert "Repository rule" not in none and "# Project rules" not in none


def test_taskfile_rules_mistakes(tmp_path: Path) -> None:
    f = tmp_path / "t.toml"
    cases = {
        "[[session]]\ntask = 'x'\nrepo = '.'\nrules = 'yes'\n": "rules must be true, false or a list",
        "[[session]]\ntask = 'x'\nrepo = '.'\nrules = ['missing.md']\n": "rules file missing.md does not exist",
    }
    for text, message in cases.items():
        f.write_text(text)
        with pytest.raises(UserError, match=re.escape(message)):
            load_taskfile(f)


@needs_bwrap
def test_taskfile_mcp_servers_per_session(tmp_path: Path, git_repo: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    notes = Path(__file__).parents[1] / "agent" / "mcp_servers" / "notes_server.py"
    common = tmp_path / "common.json"
    common.write_text(json.dumps({"mcpServers": {"shared": {"command": sys.executable, "args": [str(notes)]}}}))
    tasks = tmp_path / "fleet.toml"
    tasks.write_text(f'''
[defaults]
repo = "{git_repo}"
auto_approve = "read,mcp"

[[session]]
task = "with its own server token=own"
name = "own"
[session.mcp_servers.notes]
command = "{sys.executable}"
args = ["{notes}"]
env = {{ NOTES_TAG = "own-tag" }}

[[session]]
task = "only the common one token=common"
name = "common"
''')

    def respond(body: dict[str, Any], n: int) -> Reply:
        names = {t["function"]["name"] for t in body.get("tools", [])}
        done = any(m.get("role") == "tool" for m in body["messages"])
        if done:
            return Reply(tool_calls=[ToolCall("attempt_completion", {"result": "done"})])
        if "mcp__notes__whereami" in names:
            return Reply(tool_calls=[ToolCall("mcp__notes__whereami", {})])
        return Reply(tool_calls=[ToolCall("mcp__shared__add", {"a": 1, "b": 2})])

    with ScriptedServer(responder=respond).in_thread() as server:
        assert run(["--tasks", str(tasks), "--mcp-config", str(common)], tmp_path / "data", server) == 0, \
            capsys.readouterr()
        by_task = {}
        for r in server.requests:
            task = next(m["content"] for m in r["messages"] if m["role"] == "user")
            if "<task>" not in task:
                continue  # the fleet's priming of the shared prefix
            by_task.setdefault("own" if "token=own" in task else "common", []).append(r)
    own_tools = {t["function"]["name"] for t in by_task["own"][0]["tools"]}
    common_tools = {t["function"]["name"] for t in by_task["common"][0]["tools"]}
    assert {"mcp__notes__whereami", "mcp__shared__add"} <= own_tools
    assert "mcp__shared__add" in common_tools and not any(n.startswith("mcp__notes") for n in common_tools)
    own_result = next(m for m in by_task["own"][-1]["messages"] if m["role"] == "tool")["content"]
    assert "tag=own-tag" in own_result and "/worktrees/" in own_result  # in the session's worktree
    common_result = next(m for m in by_task["common"][-1]["messages"] if m["role"] == "tool")["content"]
    assert common_result == "3"


def test_taskfile_adapter_names_the_model_and_counts_apart(tmp_path: Path, git_repo: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    tasks = tmp_path / "fleet.toml"
    tasks.write_text(f'''
[defaults]
repo = "{git_repo}"

[[session]]
task = "styled token=s"
name = "styled"
adapter = "style"

[[session]]
task = "plain token=p"
name = "plain"
''')
    with ScriptedServer(responder=finish_at_once, adapters={"style": "/x/style"}).in_thread() as server:
        assert run(["--tasks", str(tasks)], tmp_path / "data", server) == 0, capsys.readouterr()
        models = {next(m["content"] for m in r["messages"] if m["role"] == "user").split("token=")[-1][:1]: r["model"]
                  for r in server.requests if "<task>" in str(r["messages"][1]["content"])}
    assert models == {"s": "style", "p": server.model}
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert set(summary["tokens_by_model"]) == {"style", server.model}
    assert summary["tokens_by_model"]["style"]["sessions"] == 1
    tasks.write_text(f'[[session]]\ntask = "x"\nrepo = "{git_repo}"\nadapter = "missing"\n')
    with ScriptedServer(responder=finish_at_once).in_thread() as server:
        assert run(["--tasks", str(tasks)], tmp_path / "data2", server) == 1
    assert "serves no LoRA adapter 'missing'" in capsys.readouterr().out
