"""The merge queue with real git repositories and the real sandbox: ready sessions merged
in order and gated, a conflict or a red gate stopping it with the target untouched, rebase
mode, and ``workstation ready`` / ``workstation merge --json`` on a stored fleet."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import pytest

from tests.fleet.conftest import EngineSwitch, git
from tests.fleet.fakes import Script, factory
from tests.helpers.prerequisites import needs_bwrap
from workstation import cli
from workstation.agent.sandbox import SandboxPolicy
from workstation.core.endpoints import Endpoint
from workstation.core.errors import UserError
from workstation.core.fleet_events import SessionIntegrated, SessionReadyChanged
from workstation.fleet import Fleet, SessionSpec

EP = Endpoint(base_url="http://127.0.0.1:9", api_key="k", model="m", name="e1")
GATE = "sh check.sh"
CHECK = "if grep -rl BROKEN --include='*.txt' . ; then echo 'gate: broken file' ; exit 1 ; fi\necho gate-ok\n"


@pytest.fixture
def repo(git_repo: Path) -> Path:
    (git_repo / "check.sh").write_text(CHECK)
    git(git_repo, "add", "check.sh")
    git(git_repo, "commit", "-qm", "a gate")
    return git_repo


async def _fleet(data: Path, http: httpx.AsyncClient) -> Fleet:
    fleet = Fleet(data_dir=data, endpoints=[EP], agent_factory=factory(Script()), http=http,
                  sandbox=SandboxPolicy(app_data_dirs=(str(data),)))
    await fleet.start()
    return fleet


async def _sessions(fleet: Fleet, repo: Path, work: dict[str, dict[str, str]]) -> dict[str, str]:
    """Sessions named after ``work``'s keys, each with those files written in its worktree."""
    ids = {}
    for name, files in work.items():
        s = await fleet.create_session(SessionSpec(task=f"task of {name}", repo=str(repo), name=name))
        for rel, text in files.items():
            (Path(s.worktree_path) / rel).write_text(text)
        ids[name] = s.session_id
    return ids


def _worktrees(repo: Path) -> list[str]:
    return [ln for ln in git(repo, "worktree", "list", "--porcelain").splitlines() if ln.startswith("worktree ")]


@needs_bwrap
async def test_three_ready_sessions_merge_in_the_order_marked(tmp_path: Path, repo: Path,
                                                              mock_http: httpx.AsyncClient) -> None:
    fleet = await _fleet(tmp_path / "data", mock_http)
    ids = await _sessions(fleet, repo, {"one": {"one.txt": "1\n"}, "two": {"two.txt": "2\n"},
                                        "three": {"three.txt": "3\n"}})
    events: list[object] = []
    fleet.changed.connect(events.append)
    for name in ("three", "one", "two"):
        commit = await fleet.mark_ready(ids[name])
        assert commit is not None  # its uncommitted work went onto its branch
        assert git(repo, "rev-parse", f"ws/{name}") == commit
    assert all(fleet.summary(sid).ready for sid in ids.values())
    trees_before = _worktrees(repo)
    report = await fleet.merge_ready(into="main", gate=GATE)
    assert report.ok, report.reason
    assert report.merged == ["three", "one", "two"] and report.stopped_at is None and report.reason is None
    assert git(repo, "rev-parse", "main") == report.commit
    merges = git(repo, "log", "--merges", "--format=%s", "main").splitlines()
    assert merges == [f"Merge ws/{n} into main (merge queue)" for n in ("two", "one", "three")]
    assert sorted(p.name for p in repo.glob("*.txt")) == ["one.txt", "three.txt", "two.txt"]  # checkout moved
    assert git(repo, "status", "--porcelain") == ""
    assert _worktrees(repo) == trees_before  # the trial worktree is gone
    assert not any(fleet.summary(sid).ready for sid in ids.values())  # merged: marks taken back
    done = [e for e in events if isinstance(e, SessionIntegrated) and e.action == "merge-queue"]
    assert [e.ok for e in done] == [True] * 3
    transcript = await fleet.transcript(ids["one"])  # the gate shows in each session's pane
    gates = [e for _, e in transcript if type(e).__name__ == "ToolCallFinished" and e.tool == "merge_gate"]
    assert len(gates) == 1 and gates[0].status == "ok" and "gate-ok" in gates[0].result
    await fleet.aclose()


@needs_bwrap
async def test_a_conflict_stops_the_queue_and_leaves_the_target_untouched(
        tmp_path: Path, repo: Path, mock_http: httpx.AsyncClient) -> None:
    fleet = await _fleet(tmp_path / "data", mock_http)
    ids = await _sessions(fleet, repo, {
        "minus": {"app.py": "def add(a, b):\n    return a - b\n"},
        "times": {"app.py": "def add(a, b):\n    return a * b\n"},
        "notes": {"notes.txt": "notes\n"},
    })
    for name in ("minus", "times", "notes"):
        await fleet.mark_ready(ids[name])
    before = git(repo, "rev-parse", "main")
    trees_before = _worktrees(repo)
    events: list[object] = []
    fleet.changed.connect(events.append)
    report = await fleet.merge_ready(into="main", gate=GATE)
    assert not report.ok and report.kind == "conflict"
    assert report.stopped_at == "times" and report.conflicts == ("app.py",)
    assert "times" in (report.reason or "") and "app.py" in (report.reason or "")
    assert report.merged == [] and report.passed == ["minus"]
    assert report.to_json()["merged"] == [] and report.to_json()["stopped_at"] == "times"
    assert git(repo, "rev-parse", "main") == before == report.commit  # untouched
    assert (repo / "app.py").read_text() == "def add(a, b):\n    return a + b\n"
    assert git(repo, "status", "--porcelain") == ""
    assert _worktrees(repo) == trees_before
    assert all(fleet.summary(sid).ready for sid in ids.values())  # nothing landed: marks stay
    (stop,) = [e for e in events if isinstance(e, SessionIntegrated)]
    assert stop.session_id == ids["times"] and not stop.ok and stop.conflicts == ("app.py",)
    await fleet.aclose()


@needs_bwrap
async def test_a_red_gate_stops_at_its_session(tmp_path: Path, repo: Path, mock_http: httpx.AsyncClient) -> None:
    fleet = await _fleet(tmp_path / "data", mock_http)
    ids = await _sessions(fleet, repo, {"good": {"good.txt": "fine\n"}, "bad": {"bad.txt": "BROKEN\n"},
                                        "late": {"late.txt": "late\n"}})
    for name in ids:
        await fleet.mark_ready(ids[name])
    before = git(repo, "rev-parse", "main")
    report = await fleet.merge_ready(into="main", gate=GATE)
    assert report.kind == "gate" and report.stopped_at == "bad" and report.gate_exit == 1
    assert report.passed == ["good"] and report.merged == []
    assert "gate: broken file" in report.gate_output
    assert git(repo, "rev-parse", "main") == before
    transcript = await fleet.transcript(ids["bad"])
    (gate,) = [e for _, e in transcript if type(e).__name__ == "ToolCallFinished" and e.tool == "merge_gate"]
    assert gate.status == "error" and "exit status 1" in gate.result
    await fleet.aclose()


@needs_bwrap
async def test_rebase_mode_replays_commits_in_order(tmp_path: Path, repo: Path, mock_http: httpx.AsyncClient) -> None:
    fleet = await _fleet(tmp_path / "data", mock_http)
    ids = await _sessions(fleet, repo, {"a": {"a.txt": "a\n"}, "b": {"b.txt": "b\n"}, "c": {"c.txt": "c\n"}})
    for name in ("a", "b", "c"):
        await fleet.mark_ready(ids[name], message=f"work of {name}")
    # the target moves on after the sessions branched: the queue rebases onto the new tip
    (repo / "base.txt").write_text("moved\n")
    git(repo, "add", "base.txt")
    git(repo, "commit", "-qm", "the target moved on")
    report = await fleet.merge_ready(into="main", gate=GATE, rebase=True)
    assert report.ok and report.merged == ["a", "b", "c"], report.reason
    subjects = git(repo, "log", "--format=%s", "-5", "main").splitlines()
    assert subjects == ["work of c", "work of b", "work of a", "the target moved on", "a gate"]
    assert git(repo, "log", "--merges", "--format=%H", "main") == ""
    await fleet.aclose()


@needs_bwrap
async def test_uncommitted_work_and_a_dirty_target_stop_before_anything_moves(
        tmp_path: Path, repo: Path, mock_http: httpx.AsyncClient) -> None:
    fleet = await _fleet(tmp_path / "data", mock_http)
    ids = await _sessions(fleet, repo, {"x": {"x.txt": "x\n"}, "y": {"y.txt": "y\n"}})
    for sid in ids.values():
        await fleet.mark_ready(sid)
    (Path(fleet.summary(ids["y"]).worktree_path) / "later.txt").write_text("after the mark\n")
    before = git(repo, "rev-parse", "main")
    report = await fleet.merge_ready(into="main", gate=GATE)
    assert report.kind == "uncommitted" and report.stopped_at == "y" and report.passed == []
    await fleet.mark_ready(ids["y"])  # marking again commits it
    (repo / "app.py").write_text("# local edit in the user's checkout\n")
    report = await fleet.merge_ready(into="main", gate=GATE)
    assert report.kind == "target" and report.passed == ["x", "y"] and report.merged == []
    assert "uncommitted changes" in (report.reason or "")
    assert git(repo, "rev-parse", "main") == before
    assert (repo / "app.py").read_text() == "# local edit in the user's checkout\n"
    with pytest.raises(UserError, match="does not exist"):
        await fleet.merge_ready(into="nope", gate=GATE)
    with pytest.raises(UserError, match="needs a gate"):
        await fleet.merge_ready(into="main", gate=" ")
    await fleet.mark_ready(ids["x"], False)
    await fleet.mark_ready(ids["y"], False)
    with pytest.raises(UserError, match="no session is marked ready"):
        await fleet.merge_ready(into="main", gate=GATE)
    await fleet.aclose()


async def test_starting_again_takes_the_mark_back(tmp_path: Path, repo: Path, mock_http: httpx.AsyncClient) -> None:
    fleet = await _fleet(tmp_path / "data", mock_http)
    ids = await _sessions(fleet, repo, {"w": {"w.txt": "w\n"}})
    seen: list[object] = []
    fleet.changed.connect(lambda e: seen.append(e) if isinstance(e, SessionReadyChanged) else None)
    await fleet.mark_ready(ids["w"])
    await fleet.start_session(ids["w"])
    await fleet.wait_settled()
    assert [e.ready for e in seen] == [True, False] and not fleet.summary(ids["w"]).ready
    await fleet.aclose()
    again = await _fleet(tmp_path / "data", mock_http)  # the mark is stored
    await again.mark_ready(ids["w"])
    await again.aclose()
    third = await _fleet(tmp_path / "data", mock_http)
    assert third.summary(ids["w"]).ready
    await third.aclose()


@needs_bwrap
def test_ready_and_merge_verbs_with_json(tmp_path: Path, repo: Path, engine_switch: EngineSwitch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "data"

    async def make() -> None:  # a stored fleet, as the window leaves it
        async with httpx.AsyncClient(transport=httpx.MockTransport(engine_switch.handler)) as http:
            fleet = await _fleet(data, http)
            await _sessions(fleet, repo, {
                "p": {"p.txt": "p\n"}, "q": {"app.py": "def add(a, b):\n    return b + a\n"},
                "r": {"app.py": "def add(a, b):\n    return a + b + 0\n"}})
            await fleet.aclose()

    asyncio.run(make())

    def main(*args: str) -> int:
        return cli.main(["--data-dir", str(data), *args])

    assert main("merge", "--into", "main", "--gate", GATE, "p") == 2
    assert "not marked ready: p" in capsys.readouterr().err
    assert main("ready", "p", "q", "r") == 0
    assert "p: ready (committed" in capsys.readouterr().out
    before = git(repo, "rev-parse", "main")
    assert main("merge", "--into", "main", "--gate", GATE, "--json", "p", "q", "r") == 1
    out = capsys.readouterr().out
    last = json.loads(out.strip().splitlines()[-1])
    assert last["merged"] == [] and last["stopped_at"] == "r" and "conflicts in app.py" in last["reason"]
    assert last["kind"] == "conflict" and last["passed"] == ["p", "q"]
    assert git(repo, "rev-parse", "main") == before
    assert main("ready", "--undo", "r") == 0
    assert main("merge", "--into", "main", "--gate", GATE, "--json") == 0
    last = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert last["merged"] == ["p", "q"] and last["stopped_at"] is None and last["reason"] is None
    assert git(repo, "rev-parse", "main") == last["commit"] != before
