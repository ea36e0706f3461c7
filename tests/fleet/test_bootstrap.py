"""Worktree bootstrap with real git repositories and the real sandbox: files copied and
linked into each new worktree, the setup command run once per worktree inside bubblewrap
with its output in the transcript (after a restart too), and each session's own ports in
its commands' environment."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fleet.conftest import git
from tests.fleet.fakes import Script, factory
from tests.helpers.prerequisites import needs_bwrap
from tests.helpers.scripted_server import Reply, ScriptedServer, ToolCall
from workstation.agent.sandbox import SandboxPolicy
from workstation.config import RepoSettings
from workstation.core import agent_events as ev
from workstation.core.endpoints import Endpoint
from workstation.core.errors import UserError
from workstation.core.session_state import SessionState as S
from workstation.engine.http import make_http_client
from workstation.fleet import Fleet, SessionSpec, real_agent_factory
from workstation.fleet.bootstrap import SETUP_TOOL, BootstrapOptions
from workstation.fleet.sample_repos import scratch_repository

EP = Endpoint(base_url="http://127.0.0.1:9", api_key="k", model="m", name="e1")
SETUP = ("echo port=$WORKSTATION_PORT count=$WORKSTATION_PORT_COUNT; cat .env; "
         "cat node_modules/pkg/index.js; cat /proc/1/comm; "
         "test -e \"$DATA/store.sqlite3\" && echo store-visible || echo store-hidden; "
         "touch node_modules/pkg/new 2>/dev/null && echo link-writable || echo link-read-only; "
         "echo setup-ran > setup.log")


@pytest.fixture
def app_repo() -> Iterator[Path]:
    """A repository with what a worktree lacks: an ignored .env and an ignored node_modules.
    Under /var/tmp: commands get a private /tmp, where a link's target would not be seen."""
    root = Path(tempfile.mkdtemp(prefix="ws-bootstrap-", dir="/var/tmp"))
    try:
        yield _make_app_repo(root / "repo")
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _make_app_repo(git_repo: Path) -> Path:
    scratch_repository(git_repo, {"app.py": "def add(a, b):\n    return a + b\n",
                                  ".gitignore": ".env\nnode_modules\nsetup.log\n", "README.md": "# app\n"})
    (git_repo / ".env").write_text("MODE=local\n")
    (git_repo / "node_modules" / "pkg").mkdir(parents=True)
    (git_repo / "node_modules" / "pkg" / "index.js").write_text("module.exports = 42;\n")
    return git_repo


def _fleet(data: Path, http: httpx.AsyncClient, *, script: Script | None = None, agent: Any = None,
           endpoint: Endpoint = EP, repos: dict[str, Any] | None = None, ports: int = 1) -> Fleet:
    return Fleet(data_dir=data, endpoints=[endpoint], agent_factory=agent or factory(script or Script()),
                 http=http, engine_poll_s=0.05,
                 sandbox=SandboxPolicy(app_data_dirs=(str(data),)),
                 bootstrap=BootstrapOptions(repos=repos or {}, default_ports=ports))


def _setup_results(events: list[tuple[int, object]]) -> list[ev.ToolCallFinished]:
    return [e for _, e in events if isinstance(e, ev.ToolCallFinished) and e.tool == SETUP_TOOL]


@needs_bwrap
async def test_two_sessions_get_distinct_ports_bootstrap_files_and_setup_output(
        tmp_path: Path, app_repo: Path, mock_http: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch) -> None:
    data = tmp_path / "data"
    monkeypatch.setenv("DATA", str(data))  # the setup looks for the store: it must not see it
    repos = {str(app_repo): RepoSettings(copy_files=[".env", {"link": "node_modules"}], setup=SETUP, ports=3)}
    fleet = _fleet(data, mock_http, repos=repos)
    await fleet.start()
    made = await fleet.create_sessions(SessionSpec(task="t", repo=str(app_repo), headless=True), 2)
    blocks = [fleet.ports.get(s.session_id) for s in made]
    assert all(b is not None and b.count == 3 for b in blocks)
    assert not set(blocks[0].ports) & set(blocks[1].ports)  # type: ignore[union-attr]
    for s, block in zip(made, blocks, strict=True):
        assert fleet.summary(s.session_id).state is S.READY, fleet.summary(s.session_id).error
        wt = Path(s.worktree_path)
        assert (wt / ".env").read_text() == "MODE=local\n" and not (wt / ".env").is_symlink()
        assert (wt / "node_modules").is_symlink()
        assert (wt / "node_modules").resolve() == (app_repo / "node_modules").resolve()
        assert (wt / "setup.log").read_text() == "setup-ran\n"  # ran in the worktree, once
        (result,) = _setup_results(await fleet.transcript(s.session_id))
        assert result.status == "ok", result.result
        lines = result.result.splitlines()
        assert lines[0].startswith("setup `echo port=") and "finished" in lines[0]
        assert f"port={block.first} count=3" in lines  # type: ignore[union-attr]
        assert "MODE=local" in lines and "module.exports = 42;" in lines
        assert "bwrap" in lines  # pid 1 of its pid namespace: it ran inside bubblewrap
        assert "store-hidden" in lines  # the app's data is covered inside the sandbox
        assert "link-read-only" in lines  # the shared folder cannot be changed by a session
    assert not (app_repo / "node_modules" / "pkg" / "new").exists()
    # bootstrap files are the environment, never the work: the diff stays empty
    assert (await fleet.diff(made[0].session_id)).files == ()
    await fleet.aclose()

    again = _fleet(data, mock_http, repos=repos)
    await again.start()
    for s, block in zip(made, blocks, strict=True):
        assert again.ports.get(s.session_id) == block  # same ports after a restart
        (result,) = _setup_results(await again.transcript(s.session_id))  # output kept
        assert f"port={block.first} count=3" in result.result  # type: ignore[union-attr]
    third = await again.create_session(SessionSpec(task="t", repo=str(app_repo), name="third", headless=True))
    taken = {p for b in blocks for p in b.ports}  # type: ignore[union-attr]
    assert not taken & set(again.ports.get(third.session_id).ports)  # type: ignore[union-attr]
    await again.remove(made[0].session_id)
    assert again.ports.get(made[0].session_id) is None
    await again.aclose()


@needs_bwrap
async def test_task_file_keys_win_and_a_failed_setup_waits_for_the_user(
        tmp_path: Path, app_repo: Path, mock_http: httpx.AsyncClient) -> None:
    repos = {str(app_repo): RepoSettings(setup="echo from-settings", ports=5)}
    fleet = _fleet(tmp_path / "data", mock_http, repos=repos)
    await fleet.start()
    spec = SessionSpec(task="t", repo=str(app_repo), headless=True, copy_files=(".env",), ports=2,
                       setup_command="echo trying; test -f fixed || exit 3")
    (s,) = await fleet.create_sessions(spec, 1, start=True)
    now = fleet.summary(s.session_id)
    assert now.state is S.FAILED and "exit status 3" in now.error  # not started
    rec = fleet.record(s.session_id)
    assert rec.spec.ports == 2 and rec.spec.copy_files == (".env",) and rec.spec.link_files == ()
    assert fleet.ports.get(s.session_id).count == 2  # type: ignore[union-attr]
    (result,) = _setup_results(await fleet.transcript(s.session_id))
    assert result.status == "error" and "trying" in result.result
    (Path(s.worktree_path) / "fixed").write_text("")
    await fleet.run_setup(s.session_id)
    assert fleet.summary(s.session_id).state is S.READY
    assert [r.status for r in _setup_results(await fleet.transcript(s.session_id))] == ["error", "ok"]
    await fleet.aclose()


async def test_bad_bootstrap_is_refused_before_anything_exists(
        tmp_path: Path, app_repo: Path, mock_http: httpx.AsyncClient) -> None:
    fleet = _fleet(tmp_path / "data", mock_http)
    await fleet.start()
    cases = {
        ("README.md",): "tracked by git",
        ("missing.env",): "does not exist",
        ("../outside",): "inside the repository",
        ("/etc/passwd",): "relative to the repository",
        (".git/config",): "git's own folder",
    }
    for copies, message in cases.items():
        with pytest.raises(UserError, match=message):
            await fleet.create_sessions(SessionSpec(task="t", repo=str(app_repo), copy_files=copies), 2)
    with pytest.raises(UserError, match="between 1 and 64"):
        await fleet.create_sessions(SessionSpec(task="t", repo=str(app_repo), ports=65), 1)
    assert fleet.sessions() == []
    assert git(app_repo, "branch", "--format=%(refname:short)").split() == ["main"]
    assert not (tmp_path / "data" / "worktrees").exists()
    await fleet.aclose()


async def test_without_a_sandbox_policy_the_setup_is_refused(
        tmp_path: Path, app_repo: Path, mock_http: httpx.AsyncClient) -> None:
    fleet = Fleet(data_dir=tmp_path / "data", endpoints=[EP], agent_factory=factory(Script()), http=mock_http)
    await fleet.start()
    (s,) = await fleet.create_sessions(SessionSpec(task="t", repo=str(app_repo), setup_command="touch ran"), 1)
    assert fleet.summary(s.session_id).state is S.FAILED
    assert "no sandbox policy" in fleet.summary(s.session_id).error
    assert not (Path(s.worktree_path) / "ran").exists()
    await fleet.aclose()


def _port_responder(body: dict[str, Any], n: int) -> Reply:
    step = sum(1 for m in body.get("messages", []) if m.get("role") == "assistant")
    calls = [
        ToolCall("execute_command", {"command": "echo $WORKSTATION_PORT $WORKSTATION_PORT_2 > port.txt"}),
        ToolCall("attempt_completion", {"result": "noted the port"}),
    ]
    return Reply(text="", tool_calls=[calls[min(step, 1)]])


@needs_bwrap
async def test_agent_commands_see_their_own_ports(tmp_path: Path, git_repo: Path) -> None:
    async with ScriptedServer(responder=_port_responder) as server, make_http_client() as http:
        fleet = _fleet(tmp_path / "data", http, agent=real_agent_factory(http, prime=False),
                       endpoint=server.endpoint, ports=2)
        await fleet.start()
        made = await fleet.create_sessions(
            SessionSpec(task="note the port", repo=str(git_repo), auto_approve=("all",), headless=True), 2,
            start=True)
        await asyncio.wait_for(fleet.wait_settled(), 60)
        seen = set()
        for s in made:
            assert fleet.summary(s.session_id).state is S.DONE, fleet.summary(s.session_id).error
            block = fleet.ports.get(s.session_id)
            assert block is not None
            text = (Path(s.worktree_path) / "port.txt").read_text().split()
            assert text == [str(block.first), str(block.first + 1)]
            seen.add(block.first)
        assert len(seen) == 2
        await fleet.aclose()
