"""The fleet service with a scripted agent: many sessions, cap and queue, pause/resume, restart,
engine loss, approvals, review, bad input leaving nothing behind."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest

from tests.fleet.conftest import EngineSwitch, git
from tests.fleet.fakes import Script, factory
from workstation.core.approvals import ApprovalDecision
from workstation.core.endpoints import Endpoint
from workstation.core.errors import UserError
from workstation.core.fleet_events import (
    GenerationSlotsChanged,
    SessionAgentEvent,
    SessionStateChanged,
)
from workstation.core.session_state import SessionState as S
from workstation.fleet.service import Fleet
from workstation.fleet.session import SessionSpec

EP = Endpoint(base_url="http://127.0.0.1:9", api_key="k", model="m", name="e1")


def make_fleet(data: Path, http: httpx.AsyncClient, script: Script, cap: int = 32,
               endpoints: tuple[Endpoint, ...] = (EP,)) -> Fleet:
    return Fleet(data_dir=data, endpoints=endpoints, agent_factory=factory(script), http=http,
                 max_generating=cap, engine_poll_s=0.05)


async def test_32_sessions_one_repo_no_cross_talk(tmp_path: Path, git_repo: Path,
                                                  mock_http: httpx.AsyncClient) -> None:
    script = Script(steps=3)
    fleet = make_fleet(tmp_path / "data", mock_http, script)
    await fleet.start()
    made = await fleet.create_sessions(SessionSpec(task="write your name", repo=str(git_repo),
                                                   headless=True), 32, start=True)
    await asyncio.wait_for(fleet.wait_settled(), 60)
    assert len(made) == 32 and all(s.state is S.DONE for s in fleet.sessions())
    branches = git(git_repo, "branch", "--format=%(refname:short)").split()
    assert sorted(branches) == sorted(["main", *[f"ws/write-your-name-{i}" for i in range(1, 33)]])
    trees = {Path(s.worktree_path) for s in fleet.sessions()}
    assert len(trees) == 32
    for s in fleet.sessions():
        files = sorted(p.name for p in Path(s.worktree_path).glob("*.txt"))
        assert files == [f"{s.name}-{i}.txt" for i in range(3)]  # only its own
        assert (Path(s.worktree_path) / f"{s.name}-0.txt").read_text() == f"{s.name}\n"
    assert list(git_repo.glob("*.txt")) == []
    await fleet.aclose()


async def test_cap_4_with_10_sessions(tmp_path: Path, git_repo: Path, mock_http: httpx.AsyncClient) -> None:
    script = Script(steps=3, turn_s=0.02)
    fleet = make_fleet(tmp_path / "data", mock_http, script, cap=4)
    slots: list[GenerationSlotsChanged] = []
    queued_seen: set[str] = set()
    fleet.changed.connect(lambda e: slots.append(e) if isinstance(e, GenerationSlotsChanged) else None)
    fleet.changed.connect(lambda e: queued_seen.add(e.session_id)
                          if isinstance(e, SessionStateChanged) and e.new is S.QUEUED else None)
    await fleet.start()
    await fleet.create_sessions(SessionSpec(task="t", repo=str(git_repo), headless=True), 10, start=True)
    await asyncio.wait_for(fleet.wait_settled(), 60)
    assert all(s.state is S.DONE for s in fleet.sessions())
    assert script.peak[0] == 4 and fleet.gate.peak_generating == 4
    assert max(e.generating for e in slots) == 4 and max(e.waiting for e in slots) > 0
    assert len(queued_seen) == 10
    await fleet.aclose()


async def test_pause_resume_stop_and_history(tmp_path: Path, git_repo: Path,
                                             mock_http: httpx.AsyncClient) -> None:
    script = Script(steps=4, turn_s=0.05, tool_s=0.05)
    fleet = make_fleet(tmp_path / "data", mock_http, script)
    await fleet.start()
    (s,) = await fleet.create_sessions(SessionSpec(task="t", repo=str(git_repo), headless=True), 1)
    assert s.state is S.READY and s.branch == "ws/t"
    await fleet.start_session(s.session_id)
    await asyncio.sleep(0.12)
    await fleet.pause(s.session_id)
    assert fleet.summary(s.session_id).state is S.PAUSED
    await fleet.resume(s.session_id)
    await asyncio.wait_for(fleet.wait_settled(), 30)
    assert fleet.summary(s.session_id).state is S.DONE
    wt = Path(s.worktree_path)
    for i in range(4):  # every step exactly once, or reported interrupted
        text = (wt / f"t-{i}.txt").read_text() if (wt / f"t-{i}.txt").exists() else ""
        assert text in ("t\n", "")
    events = await fleet.transcript(s.session_id)
    seqs = [seq for seq, _ in events]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    assistant = [e for _, e in events if type(e).__name__ == "MessageAppended" and e.role == "assistant"]
    assert len({e.index for e in assistant}) == len(assistant)  # no turn stored twice
    assert fleet.summary(s.session_id).completion_tokens > 0
    # done -> follow-up -> stop
    script.turn_s = 0.2
    await fleet.reply(s.session_id, "one more thing")
    await asyncio.sleep(0.05)
    await fleet.stop(s.session_id)
    assert fleet.summary(s.session_id).state is S.STOPPED
    await fleet.aclose()


async def test_restart_brings_sessions_back_and_resumes(tmp_path: Path, git_repo: Path,
                                                        mock_http: httpx.AsyncClient) -> None:
    script = Script(steps=5, turn_s=0.05)
    data = tmp_path / "data"
    fleet = make_fleet(data, mock_http, script)
    await fleet.start()
    made = await fleet.create_sessions(SessionSpec(task="t", repo=str(git_repo), headless=True), 3, start=True)
    await asyncio.sleep(0.2)
    before = {s.session_id: len(await fleet.transcript(s.session_id)) for s in made}
    await fleet.aclose()  # the app quits with sessions mid-run
    fleet2 = make_fleet(data, mock_http, script)
    await fleet2.start()
    assert {s.session_id for s in fleet2.sessions()} == {s.session_id for s in made}
    await asyncio.wait_for(fleet2.wait_settled(), 30)
    for s in fleet2.sessions():
        assert s.state is S.DONE
        events = await fleet2.transcript(s.session_id)
        assert len(events) >= before[s.session_id]
        tools = [e for _, e in events if type(e).__name__ == "MessageAppended" and e.role == "tool"]
        assert len(tools) == 5  # each step's result once
    await fleet2.aclose()


async def test_engine_loss_waits_then_continues(tmp_path: Path, git_repo: Path, engine_switch: EngineSwitch,
                                                mock_http: httpx.AsyncClient) -> None:
    script = Script(steps=3, turn_s=0.05, engine_ok=lambda setup: engine_switch.up)
    fleet = make_fleet(tmp_path / "data", mock_http, script)
    await fleet.start()
    made = await fleet.create_sessions(SessionSpec(task="t", repo=str(git_repo), headless=True), 2)
    engine_switch.up = False
    for s in made:
        await fleet.start_session(s.session_id)
    for _ in range(100):
        if all(x.state is S.ENGINE_WAIT for x in fleet.sessions()):
            break
        await asyncio.sleep(0.02)
    assert all(x.state is S.ENGINE_WAIT for x in fleet.sessions())
    assert "not answering" in fleet.sessions()[0].error
    engine_switch.up = True
    await asyncio.wait_for(fleet.wait_settled(), 30)
    assert all(x.state is S.DONE for x in fleet.sessions())
    await fleet.aclose()


async def test_approval_round_trip(tmp_path: Path, git_repo: Path, mock_http: httpx.AsyncClient) -> None:
    script = Script(steps=2, ask_approval_at=0)
    fleet = make_fleet(tmp_path / "data", mock_http, script)
    await fleet.start()
    (s,) = await fleet.create_sessions(SessionSpec(task="t", repo=str(git_repo)), 1, start=True)
    for _ in range(100):
        if fleet.pending_approvals():
            break
        await asyncio.sleep(0.01)
    (req,) = fleet.pending_approvals()
    assert fleet.summary(s.session_id).state is S.AWAITING_APPROVAL
    with pytest.raises(UserError, match="no longer pending"):
        fleet.resolve_approval(s.session_id, "nope", ApprovalDecision.approve())
    fleet.resolve_approval(s.session_id, req.request_id, ApprovalDecision.approve())
    await asyncio.wait_for(fleet.wait_settled(), 30)
    assert fleet.summary(s.session_id).state is S.DONE
    await fleet.aclose()


async def test_needs_input_then_reply(tmp_path: Path, git_repo: Path, mock_http: httpx.AsyncClient) -> None:
    script = Script(steps=2, question_at=1)
    fleet = make_fleet(tmp_path / "data", mock_http, script)
    await fleet.start()
    (s,) = await fleet.create_sessions(SessionSpec(task="t", repo=str(git_repo)), 1, start=True)
    await asyncio.wait_for(fleet.wait_settled(), 30)
    assert fleet.summary(s.session_id).state is S.NEEDS_INPUT
    await fleet.reply(s.session_id, "app.py")
    await asyncio.wait_for(fleet.wait_settled(), 30)
    assert fleet.summary(s.session_id).state is S.DONE
    await fleet.aclose()


async def test_a_message_to_a_working_session_is_refused_in_words_never_dropped(
        tmp_path: Path, git_repo: Path, mock_http: httpx.AsyncClient) -> None:
    """The follow-up box is always there; a message sent while the session works used to be
    dropped without a word (start_session returned). A real agent takes it while it runs
    (tests/fleet/test_fleet_agent.py); where the agent cannot (this stand-in, or a run that
    starts or winds down) it is refused in words, so the window keeps the text and says why."""
    fleet = make_fleet(tmp_path / "data", mock_http, Script(steps=4, turn_s=0.3))
    await fleet.start()
    (s,) = await fleet.create_sessions(SessionSpec(task="t", repo=str(git_repo)), 1, start=True)
    for _ in range(200):
        if fleet.summary(s.session_id).state in (S.QUEUED, S.RUNNING):
            break
        await asyncio.sleep(0.01)
    with pytest.raises(UserError, match="the message was not sent"):
        await fleet.reply(s.session_id, "and also this")
    await asyncio.wait_for(fleet.wait_settled(), 30)
    assert fleet.summary(s.session_id).state is S.DONE
    await fleet.aclose()


async def test_bad_input_leaves_nothing(tmp_path: Path, git_repo: Path, mock_http: httpx.AsyncClient) -> None:
    data = tmp_path / "data"
    fleet = make_fleet(data, mock_http, Script())
    await fleet.start()
    f = tmp_path / "file.txt"
    f.write_text("x")
    empty = tmp_path / "empty"
    empty.mkdir()
    git(empty, "init", "-q")
    git(git_repo, "branch", "ws/taken")
    cases = [
        (SessionSpec(task="t", repo=str(tmp_path / "missing")), "does not exist"),
        (SessionSpec(task="t", repo=str(f)), "is a file, not a folder"),
        (SessionSpec(task="t", repo=str(empty)), "has no commits yet"),
        (SessionSpec(task="t", repo=str(git_repo), base_branch="nope"), "base branch 'nope' does not exist"),
        (SessionSpec(task="t", repo=str(git_repo), name="taken"), "the name 'taken' is taken .*branch ws/taken"),
        (SessionSpec(task="t", repo="file:///no/such/repo.git", clone=True), "could not clone"),
        (SessionSpec(task="t", repo=str(git_repo), name="bad name"), "cannot be used"),
        (SessionSpec(task=" ", repo=str(git_repo)), "needs a task"),
        (SessionSpec(task="t", repo=str(git_repo), endpoint="other"), "no endpoint named"),
        (SessionSpec(task="t", repo=str(git_repo), mode="yolo"), "mode must be"),
    ]
    for spec, message in cases:
        with pytest.raises(UserError, match=message):
            await fleet.create_sessions(spec, 1 if spec.name else 2)
    assert fleet.sessions() == []
    assert not (data / "worktrees").exists() or not any((data / "worktrees").rglob("*"))
    assert not (data / "repos").exists() or not any((data / "repos").iterdir())
    assert git(git_repo, "branch", "--format=%(refname:short)").split() == ["main", "ws/taken"]
    assert git(git_repo, "worktree", "list").count("\n") == 0
    await fleet.aclose()


async def test_review_flow_and_dirty_base(tmp_path: Path, git_repo: Path, mock_http: httpx.AsyncClient) -> None:
    fleet = make_fleet(tmp_path / "data", mock_http, Script(steps=1))
    await fleet.start()
    (s,) = await fleet.create_sessions(SessionSpec(task="t", repo=str(git_repo), headless=True), 1, start=True)
    await asyncio.wait_for(fleet.wait_settled(), 30)
    d = await fleet.diff(s.session_id)
    assert [f.path for f in d.files] == ["t-0.txt"]
    await fleet.commit(s.session_id, "session work")
    (git_repo / "README.md").write_text("dirty\n")
    with pytest.raises(UserError, match="uncommitted changes"):
        await fleet.integrate(s.session_id)
    git(git_repo, "checkout", "--", "README.md")
    res = await fleet.integrate(s.session_id)
    assert res.action == "merge" and (git_repo / "t-0.txt").exists()
    await fleet.remove(s.session_id)
    assert not Path(s.worktree_path).exists()
    assert "ws/t" not in git(git_repo, "branch", "--format=%(refname:short)").split()
    await fleet.aclose()


async def test_orphans_found_at_start(tmp_path: Path, git_repo: Path, mock_http: httpx.AsyncClient) -> None:
    data = tmp_path / "data"
    fleet = make_fleet(data, mock_http, Script())
    await fleet.start()
    (s,) = await fleet.create_sessions(SessionSpec(task="t", repo=str(git_repo)), 1)
    await fleet.aclose()
    # the store is lost (or the session row deleted by hand): its worktree is an orphan now
    (data / "store.sqlite3").unlink()
    for extra in ("store.sqlite3-wal", "store.sqlite3-shm"):
        (data / extra).unlink(missing_ok=True)
    fleet2 = make_fleet(data, mock_http, Script())
    # the repository is not in the new store: tell it, as the UI would by attaching it again
    await fleet2.start()
    await fleet2.store.remember_repo(str(git_repo))
    orphans = await fleet2.scan_orphans()
    assert [o.worktree_path for o in orphans] == [s.worktree_path]
    assert orphans[0].branch == "ws/t" and (orphans[0].disk_bytes or 0) > 0
    assert await fleet2.remove_orphans() == 1
    assert not Path(s.worktree_path).exists()
    await fleet2.aclose()


async def test_routing_spreads_and_sticks(tmp_path: Path, git_repo: Path, mock_http: httpx.AsyncClient) -> None:
    eps = (EP, Endpoint(base_url="http://127.0.0.1:10", api_key="", model="m", name="e2"))
    script = Script(steps=2, turn_s=0.05)
    fleet = make_fleet(tmp_path / "data", mock_http, script, endpoints=eps)
    await fleet.start()
    made = await fleet.create_sessions(SessionSpec(task="t", repo=str(git_repo), headless=True), 4, start=True)
    names = [fleet.summary(s.session_id).endpoint_name for s in made]
    assert sorted(names) == ["e1", "e1", "e2", "e2"]
    await asyncio.wait_for(fleet.wait_settled(), 30)
    await fleet.reply(made[0].session_id, "again")
    assert fleet.summary(made[0].session_id).endpoint_name == names[0]
    await asyncio.wait_for(fleet.wait_settled(), 30)
    await fleet.aclose()


async def test_agent_events_are_numbered_like_the_store(tmp_path: Path, git_repo: Path,
                                                        mock_http: httpx.AsyncClient) -> None:
    fleet = make_fleet(tmp_path / "data", mock_http, Script(steps=2))
    live: list[SessionAgentEvent] = []
    fleet.agent_event.connect(live.append)
    await fleet.start()
    (s,) = await fleet.create_sessions(SessionSpec(task="t", repo=str(git_repo), headless=True), 1, start=True)
    await asyncio.wait_for(fleet.wait_settled(), 30)
    stored = await fleet.transcript(s.session_id)
    live_stored = [(e.seq, e.event) for e in live if type(e.event).__name__ != "TextStreamed"]
    assert live_stored == stored
    assert len(await fleet.store.list_checkpoints(s.session_id)) == 2
    await fleet.aclose()


async def test_clone_once_and_shared_readonly_links(tmp_path: Path, git_repo: Path,
                                                    mock_http: httpx.AsyncClient) -> None:
    cache = git_repo / ".cache" / "models"
    cache.mkdir(parents=True)
    (cache / "weights.bin").write_text("w")
    (git_repo / ".gitignore").write_text(".cache/\n.venv/\n")
    git(git_repo, "add", ".gitignore")
    git(git_repo, "commit", "-qm", "ignore caches")
    fleet = make_fleet(tmp_path / "data", mock_http, Script())
    progress: list[str] = []
    fleet.changed.connect(lambda e: progress.append(e.phase) if type(e).__name__ == "AttachProgress" else None)
    await fleet.start()
    a = await fleet.create_sessions(SessionSpec(task="t", repo=str(git_repo), clone=True), 2)
    b = await fleet.create_sessions(SessionSpec(task="t", repo=str(git_repo), clone=True), 1)
    assert {s.repo_path for s in a + b} == {a[0].repo_path} != {str(git_repo)}  # one clone, reused
    assert "clone" in progress and "worktree" in progress
    # a writable cache is refused (never a writable environment shared between sessions)
    (git_repo / ".venv").mkdir()
    with pytest.raises(UserError, match="writable"):
        await fleet.create_sessions(SessionSpec(task="t", repo=str(git_repo), name="venv",
                                                shared_links=(".venv",)), 1)
    for p in [cache, *cache.rglob("*")]:
        p.chmod(p.stat().st_mode & ~0o222)
    try:
        (s,) = await fleet.create_sessions(SessionSpec(task="t", repo=str(git_repo), name="linked",
                                                       shared_links=(".cache/models",)), 1)
        link = Path(s.worktree_path) / ".cache" / "models"
        assert link.is_symlink() and (link / "weights.bin").read_text() == "w"
        assert [f.path for f in (await fleet.diff(s.session_id)).files] == []
    finally:
        for p in [cache, *cache.rglob("*")]:
            p.chmod(p.stat().st_mode | 0o200)
    assert "ws/venv" not in git(git_repo, "branch", "--format=%(refname:short)").split()
    await fleet.aclose()


async def test_engine_restarted_elsewhere_sessions_follow(tmp_path: Path, git_repo: Path,
                                                          engine_switch: EngineSwitch,
                                                          mock_http: httpx.AsyncClient) -> None:
    """A managed engine comes back on a new port with a new key: update_endpoint moves the
    sessions there, those waiting continue at once."""
    old_host = "127.0.0.1:9"
    script = Script(steps=3, turn_s=0.05,
                    engine_ok=lambda setup: not setup.endpoint.base_url.endswith(old_host)
                    or old_host not in engine_switch.dead_hosts)
    fleet = make_fleet(tmp_path / "data", mock_http, script)
    await fleet.start()
    made = await fleet.create_sessions(SessionSpec(task="t", repo=str(git_repo), headless=True), 2)
    engine_switch.dead_hosts.add(old_host)
    for s in made:
        await fleet.start_session(s.session_id)
    for _ in range(200):
        if all(x.state is S.ENGINE_WAIT for x in fleet.sessions()):
            break
        await asyncio.sleep(0.02)
    assert all(x.state is S.ENGINE_WAIT for x in fleet.sessions())
    moved = Endpoint(base_url="http://127.0.0.1:11", api_key="new-key", model="m", name="e1")
    fleet.update_endpoint(moved)
    await asyncio.wait_for(fleet.wait_settled(), 30)
    assert all(x.state is S.DONE for x in fleet.sessions())
    assert script.urls[-1] == "http://127.0.0.1:11"
    await fleet.aclose()


async def test_names_skip_what_the_repository_already_has(tmp_path: Path, git_repo: Path,
                                                          mock_http: httpx.AsyncClient) -> None:
    """A branch or worktree folder left behind (a session removed by hand, a demo run again in
    the same data folder) is not a failure: a derived name skips it, a given one is refused
    with a free one named, or taken free where asked (the demo)."""
    data = tmp_path / "data"
    fleet = make_fleet(data, mock_http, Script())
    await fleet.start()
    git(git_repo, "branch", "ws/fix-it")
    (made,) = await fleet.create_sessions(SessionSpec(task="Fix it", repo=str(git_repo)))
    assert made.name == "fix-it-2" and made.branch == "ws/fix-it-2"
    with pytest.raises(UserError, match="the name 'fix-it' is taken") as caught:
        await fleet.create_sessions(SessionSpec(task="Fix it", repo=str(git_repo), name="fix-it"))
    assert caught.value.hint == "'fix-it-3' is free"
    again = await fleet.create_session(SessionSpec(task="Fix it", repo=str(git_repo), name="fix-it"),
                                       free_names=True)
    assert again.name == "fix-it-3"
    await fleet.aclose()


async def test_merged_and_discarded_sessions_go_to_the_archive_and_names_change(
        tmp_path: Path, git_repo: Path, mock_http: httpx.AsyncClient) -> None:
    from workstation.core.fleet_events import SessionArchived, SessionRenamed

    data = tmp_path / "data"
    fleet = make_fleet(data, mock_http, Script(steps=1))
    seen: list[object] = []
    fleet.changed.connect(seen.append)
    await fleet.start()
    a, b = await fleet.create_sessions(SessionSpec(task="t", repo=str(git_repo), headless=True), 2, start=True)
    await asyncio.wait_for(fleet.wait_settled(), 30)
    await fleet.commit(a.session_id, "work of a")
    result = await fleet.integrate(a.session_id)
    assert fleet.summary(a.session_id).archived == f"merged into main ({result.commit[:10]})"
    await fleet.discard(b.session_id)
    assert fleet.summary(b.session_id).archived == "its work was discarded"
    assert [e.session_id for e in seen if isinstance(e, SessionArchived)] == [a.session_id, b.session_id]
    fleet.shelf.unarchive(b.session_id)
    await fleet.shelf.rename(b.session_id, "second-try")
    with pytest.raises(UserError, match="already exists"):
        await fleet.shelf.rename(a.session_id, "second-try")
    assert any(isinstance(e, SessionRenamed) and e.name == "second-try" for e in seen)
    await fleet.aclose()
    again = make_fleet(data, mock_http, Script(steps=1))  # all of it is kept in the store
    await again.start()
    by_id = {s.session_id: s for s in again.sessions()}
    assert by_id[a.session_id].archived.startswith("merged into main")
    assert by_id[b.session_id].archived == "" and by_id[b.session_id].name == "second-try"
    assert again.shelf.archived() == [a.session_id]
    await again.aclose()


async def test_pause_all_leaves_the_sessions_that_wait_for_a_person(tmp_path: Path, git_repo: Path,
                                                                     mock_http: httpx.AsyncClient) -> None:
    script = Script(steps=6, ask_approval_at=0, turn_s=0.3)
    fleet = make_fleet(tmp_path / "data", mock_http, script)
    await fleet.start()
    a, b = await fleet.create_sessions(SessionSpec(task="t", repo=str(git_repo)), 2, start=True)
    for _ in range(300):
        if len(fleet.pending_approvals()) == 2:
            break
        await asyncio.sleep(0.01)
    req = next(r for r in fleet.pending_approvals() if r.session_id == a.session_id)
    fleet.resolve_approval(a.session_id, req.request_id, ApprovalDecision.approve())
    for _ in range(300):
        if fleet.summary(a.session_id).state in (S.RUNNING, S.QUEUED):
            break
        await asyncio.sleep(0.01)
    await fleet.pause_all()
    assert fleet.summary(a.session_id).state is S.PAUSED
    assert fleet.summary(b.session_id).state is S.AWAITING_APPROVAL and fleet.pending_approvals()
    await fleet.aclose()


async def test_a_turns_usage_is_out_before_the_session_ends(tmp_path: Path, git_repo: Path,
                                                            mock_http: httpx.AsyncClient) -> None:
    """A run whose only model turn is its last: the pane's token count comes with the turn's
    usage, not at the next stats tick, which a finished session may never see."""
    from workstation.core.fleet_events import SessionStatsChanged

    script = Script(steps=0, tokens_per_turn=7)
    fleet = make_fleet(tmp_path / "data", mock_http, script)
    seen: list[object] = []
    fleet.changed.connect(lambda e: seen.append(e) if isinstance(e, (SessionStatsChanged, SessionStateChanged))
                          else None)
    await fleet.start()
    (s,) = await fleet.create_sessions(SessionSpec(task="t", repo=str(git_repo), headless=True), 1, start=True)
    await asyncio.wait_for(fleet.wait_settled(), 30)
    done = next(i for i, e in enumerate(seen) if isinstance(e, SessionStateChanged) and e.new is S.DONE)
    stats = [e for e in seen[:done] if isinstance(e, SessionStatsChanged) and e.session_id == s.session_id]
    assert stats and (stats[-1].prompt_tokens, stats[-1].completion_tokens) == (100, 7)
    await fleet.aclose()
