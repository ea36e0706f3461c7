"""What a task file can give each session besides its task — rules files, MCP servers,
images, a LoRA adapter — and that it reaches the requests the engine gets."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

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
