"""``workstation agent`` end to end: scripted endpoint in a thread, and the real engine."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.agent.conftest import git
from tests.helpers.prerequisites import needs_bwrap
from tests.helpers.scripted_server import Reply, ScriptedServer, ToolCall
from workstation.cli import main
from workstation.core.endpoints import Endpoint
from workstation.fleet.sample_repos import scratch_repository


def call(name: str, **args: object) -> Reply:
    return Reply(tool_calls=[ToolCall(name, dict(args))])


@pytest.fixture(autouse=True)
def _data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WORKSTATION_DATA_DIR", str(tmp_path / "data"))


def _argv(server: ScriptedServer, repo: Path, *extra: str) -> list[str]:
    return ["agent", "--endpoint", server.base_url, "--api-key", server.api_key, "--model", server.model,
            "--repo", str(repo), "--task", "add a greeting", *extra]


@needs_bwrap  # its agents run commands unattended: only inside the sandbox
def test_completes_with_exit_0_and_prints_events(git_repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = [Reply(text="Looking first. ", tool_calls=[ToolCall("read_file", {"path": "app.py"})]),
              call("write_to_file", path="greet.py", content="print('hi')\n"),
              call("execute_command", command="python3 greet.py"),
              call("attempt_completion", result="added greet.py")]
    with ScriptedServer(script).in_thread() as server:
        code = main(_argv(server, git_repo, "--auto-approve", "all"))
    out = capsys.readouterr()
    assert code == 0, out.err
    assert "Looking first." in out.out and "→ read_file app.py" in out.out
    assert "│ hi" in out.out and "✔ completed: added greet.py" in out.out
    assert "· checkpoint" in out.out
    assert (git_repo / "greet.py").read_text() == "print('hi')\n"
    assert server.requests[0]["model"] == "scripted"


def test_headless_refusal_and_mistakes_exit_1_with_reason(git_repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = [call("execute_command", command="touch x"), call("read_file", path="nope.py"),
              call("read_file", path="nope2.py"), call("read_file", path="nope3.py")]
    with ScriptedServer(script).in_thread() as server:
        code = main(_argv(server, git_repo))  # default auto-approve: read,edit
    out = capsys.readouterr()
    assert code == 1
    assert "no one can approve" in out.out
    assert "the agent did not finish: needs_input: made 3 mistakes in a row" in out.err
    assert not (git_repo / "x").exists()


def test_usage_mistakes_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with ScriptedServer([]).in_thread() as server:
        assert main(_argv(server, tmp_path / "missing")) == 2
        assert "is not a folder" in capsys.readouterr().err
        assert main(_argv(server, tmp_path, "--auto-approve", "everything")) == 2
        assert "unknown approval category" in capsys.readouterr().err


def test_unreachable_endpoint_fails_clearly(git_repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["agent", "--endpoint", "http://127.0.0.1:9", "--model", "m", "--repo", str(git_repo),
                 "--task", "t"])
    err = capsys.readouterr().err
    assert code == 1 and "cannot reach the engine" in err


def test_json_lines(git_repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with ScriptedServer([call("attempt_completion", result="ok")]).in_thread() as server:
        assert main(_argv(server, git_repo, "--json", "--mode", "plan")) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    kinds = [x["event"] for x in lines]
    assert "ToolCallStarted" in kinds and kinds[-1] == "RunFinished"
    assert lines[-1]["status"] == "completed"


@pytest.mark.engine
def test_cli_against_the_real_engine(smollm2_engine: Endpoint, tmp_path: Path) -> None:
    todo = "Next step: write_to_file with path \"hello.py\" and content \"print('hello')\".\n"
    repo = scratch_repository(tmp_path / "repo", {"TODO.txt": todo}, message="todo")
    proc = subprocess.run(
        [sys.executable, "-m", "workstation", "--data-dir", str(tmp_path / "data"), "agent",
         "--endpoint", smollm2_engine.base_url, "--api-key", smollm2_engine.api_key,
         "--model", smollm2_engine.model, "--repo", str(repo), "--task", "Read TODO.txt and do what it says.",
         "--auto-approve", "all", "--temperature", "0", "--max-turns", "6", "--session", "cli"],
        capture_output=True, text=True, timeout=300,
    )
    assert "→ read_file TODO.txt" in proc.stdout, proc.stdout + proc.stderr
    ast.parse((repo / "hello.py").read_text())
    assert "hello.py" in git(repo, "ls-tree", "-r", "--name-only", "refs/workstation/cli/checkpoints")
    if proc.returncode == 0:
        assert "✔ completed" in proc.stdout
    else:  # the small model may end by repeating itself: then the exit is 1 with the reason
        assert proc.returncode == 1 and "the agent did not finish" in proc.stderr
