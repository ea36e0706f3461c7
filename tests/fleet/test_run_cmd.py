"""``workstation run``: usage mistakes, a TOML task file, the live table and the JSON summary."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.fleet.agent_script import make_responder
from tests.helpers.prerequisites import needs_bwrap
from tests.helpers.scripted_server import ScriptedServer
from workstation import cli
from workstation.headless import render_table
from workstation.core.errors import UserError
from workstation.core.fleet_events import SessionSummary
from workstation.core.session_state import SessionState
from workstation.fleet.taskfile import load_taskfile


def _main(args: list[str], data: Path) -> int:
    return cli.main(["--data-dir", str(data), "run", *args])


@pytest.mark.parametrize(("args", "message"), [
    ([], "say what to run"),
    (["--task", "x"], "--task needs --repo"),
    (["--task", "x", "--repo", ".", "--sessions", "0"], "--sessions must be at least 1"),
    (["--task", "x", "--repo", ".", "--auto-approve", "everything"], "unknown approval category"),
    (["--resume", "--task", "x"], "takes no --task"),
    (["--tasks", "/no/such/file.toml"], "does not exist"),
])
def test_usage_mistakes_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str],
                               message: str) -> None:
    assert _main(args, tmp_path / "data") == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "data" / "worktrees").exists()


def test_bad_repo_exit_2_and_nothing_made(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with ScriptedServer(responder=make_responder()).in_thread() as server:
        code = _main(["--repo", str(tmp_path / "nope"), "--task", "x", "--endpoint", server.base_url,
                      "--api-key", server.api_key, "--model", server.model], tmp_path / "data")
    assert code == 2
    assert "does not exist" in capsys.readouterr().err
    assert not (tmp_path / "data" / "worktrees").exists()


def test_taskfile_run_to_completion(tmp_path: Path, git_repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    other = tmp_path / "plain"
    other.mkdir()
    (other / "x.py").write_text("x = 1\n")
    tasks = tmp_path / "fleet.toml"
    tasks.write_text(f'''
[defaults]
auto_approve = "all"

[[session]]
task = "Note it. token=aa"
repo = "{git_repo}"
count = 2

[[session]]
task = "Note it. token=bb"
repo = "plain"
init = true
name = "plain-one"
''')
    with ScriptedServer(responder=make_responder()).in_thread() as server:
        code = _main(["--tasks", str(tasks), "--endpoint", server.base_url, "--api-key", server.api_key,
                      "--model", server.model, "--json", "--max-generating", "2"], tmp_path / "data")
    out = capsys.readouterr().out
    assert code == 0, out
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["sessions"] == 3 and summary["states"] == {"done": 3}
    assert summary["completion_tokens"] > 0 and summary["generated_tok_s"] > 0
    assert "plain-one" in out and "3 sessions" in out
    assert (other / ".git").exists()  # git init'ed, as the file asked


def test_taskfile_mistakes(tmp_path: Path) -> None:
    f = tmp_path / "t.toml"
    cases = {
        "[[session]]\ntask = 'x'\n": "exactly one of repo",
        "[[session]]\ntask = 'x'\nrepo = '.'\nbogus = 1\n": "unknown or misplaced key(s) bogus",
        "[defaults]\ntask = 'x'\n[[session]]\nrepo = '.'\ntask = 'y'\n": "misplaced key(s) task",
        "[[session]]\nrepo = '.'\n": "has no task",
        "[[session]]\ntask = 'x'\nrepo = '.'\ncount = 0\n": "count must be",
        "[other]\n": "unknown table",
        "not toml [": "not valid TOML",
        "": "no [[session]] entries",
    }
    for text, message in cases.items():
        f.write_text(text)
        with pytest.raises(UserError, match=re.escape(message)):
            load_taskfile(f)


def test_table_has_totals() -> None:
    def row(name: str, state: SessionState, gen: int, rate: float) -> SessionSummary:
        return SessionSummary(name, name, state, "t", "/r", "/w", f"ws/{name}", "main", "act", "e1",
                              prompt_tokens=100, completion_tokens=gen, tokens_per_s=rate)

    lines = render_table([row("a", SessionState.RUNNING, 40, 12.5), row("b", SessionState.DONE, 60, 0.0)], 10.0)
    text = "\n".join(lines)
    assert "a " in text and "running" in text and "12.5" in text
    assert "2 sessions" in text and "generated 100" in text and "12.5 tok/s" in text
    final = "\n".join(render_table([row("b", SessionState.DONE, 60, 0.0)], 10.0, final_table=True))
    assert "avg 6.0 tok/s" in final


def test_long_names_stay_apart() -> None:
    from workstation.headless import _fit

    a, b = _fit("step-1-call-read-file-with-path-1", 20), _fit("step-1-call-read-file-with-path-2", 20)
    assert a != b and len(a) == 20 and a.endswith("path-1")


def test_taskfile_bootstrap_keys(tmp_path: Path) -> None:
    f = tmp_path / "t.toml"
    f.write_text('''
[defaults]
repo = "."
copy = [".env", { link = "node_modules" }]
setup = "npm ci --offline"
ports = 3
run = "npm run dev -- --port $WORKSTATION_PORT"

[[session]]
task = "x"

[[session]]
task = "y"
copy = []
setup = ""
''')
    first, second = load_taskfile(f)
    s = first.spec
    assert (s.copy_files, s.link_files, s.setup_command, s.ports, s.run_command) == (
        (".env",), ("node_modules",), "npm ci --offline", 3, "npm run dev -- --port $WORKSTATION_PORT")
    s = second.spec  # a session's keys win over the defaults: here, no bootstrap at all
    assert (s.copy_files, s.link_files, s.setup_command, s.ports) == ((), (), "", 3)
    cases = {
        "copy = '.env'": "copy must be a list",
        "copy = [{ copy = 'x' }]": "neither a path nor {link",
        "copy = [3]": "neither a path",
        "ports = 0": "ports must be a whole number from 1 to 64",
        "ports = true": "ports must be",
        "setup = ['a']": "setup must be a string",
        "run = 1": "run must be a string",
    }
    for line, message in cases.items():
        f.write_text(f"[[session]]\ntask = 'x'\nrepo = '.'\n{line}\n")
        with pytest.raises(UserError, match=re.escape(message)):
            load_taskfile(f)


@needs_bwrap  # the setup command runs unattended: only inside the sandbox
def test_run_with_bootstrap_from_the_task_file(tmp_path: Path, git_repo: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    (git_repo / ".env").write_text("TOKEN_FILE=local\n")
    tasks = tmp_path / "fleet.toml"
    tasks.write_text(f'''
[defaults]
repo = "{git_repo}"
auto_approve = "all"
copy = [".env"]
setup = "echo setup-saw-$WORKSTATION_PORT_2 > setup.txt; cat .env"
ports = 2

[[session]]
task = "Note it. token=aa"
count = 2
''')
    data = tmp_path / "data"
    with ScriptedServer(responder=make_responder()).in_thread() as server:
        code = _main(["--tasks", str(tasks), "--endpoint", server.base_url, "--api-key", server.api_key,
                      "--model", server.model, "--json"], data)
    out = capsys.readouterr().out
    assert code == 0, out
    trees = sorted((data / "worktrees").glob("*/note-it-token-aa-*"))
    assert len(trees) == 2
    seen = {(tree / "setup.txt").read_text() for tree in trees}
    assert len(seen) == 2 and all(s.startswith("setup-saw-2") for s in seen)  # two distinct ports
    assert all((tree / ".env").read_text() == "TOKEN_FILE=local\n" for tree in trees)


def _finish_or_flounder(body: dict, n: int):  # type: ignore[no-untyped-def]
    """token=ok: write a file, then finish; token=bad: call a tool that does not exist until
    the mistakes limit stops the session."""
    from tests.fleet.agent_script import token_of
    from tests.helpers.scripted_server import Reply, ToolCall

    messages = body.get("messages", [])
    if token_of(messages) == "bad":
        return Reply(tool_calls=[ToolCall("no_such_tool", {})])
    step = sum(1 for m in messages if m.get("role") == "assistant")
    if step == 0:
        return Reply(tool_calls=[ToolCall("write_to_file", {"path": "notes/ok.txt", "content": "ok\n"})])
    return Reply(tool_calls=[ToolCall("attempt_completion", {"result": "wrote notes/ok.txt"})])


def test_run_says_why_each_session_ended_and_what_the_exit_status_means(
        tmp_path: Path, git_repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tasks = tmp_path / "fleet.toml"
    tasks.write_text(f'''
[defaults]
repo = "{git_repo}"
auto_approve = "all"

[[session]]
task = "Write it. token=ok"
name = "writes"

[[session]]
task = "Flounder. token=bad"
name = "flounders"
''')
    with ScriptedServer(responder=_finish_or_flounder).in_thread() as server:
        code = _main(["--tasks", str(tasks), "--endpoint", server.base_url, "--api-key", server.api_key,
                      "--model", server.model, "--json"], tmp_path / "data")
    out = capsys.readouterr().out
    assert code == 1, out
    lines = out.strip().splitlines()
    summary = json.loads(lines[-1])
    assert summary["sessions"] == 2 and summary["states"] == {"done": 1, "needs_input": 1}  # today's totals stay
    assert summary["completion_tokens"] > 0
    detail = {d["name"]: d for d in summary["sessions_detail"]}
    assert set(detail) == {"writes", "flounders"}
    assert detail["writes"]["state"] == "done" and detail["writes"]["branch"] == "ws/writes"
    assert detail["writes"]["reason"] == "finished its task: wrote notes/ok.txt"
    assert detail["writes"]["changed_files"] == ["notes/ok.txt"]
    assert detail["flounders"]["state"] == "needs_input" and detail["flounders"]["changed_files"] == []
    assert "3 mistakes" in detail["flounders"]["reason"]
    text = "\n".join(lines[:-1])
    assert "writes: finished its task: wrote notes/ok.txt" in text
    assert f"branch ws/writes in {git_repo}" in text and "1 file changed (notes/ok.txt)" in text
    assert "flounders: waits for a person: made 3 mistakes" in text and "no changes" in text
    assert "exit status 1: 1 of 2 sessions did not finish their task (1 needs input)" in text
