"""Running the demo again on the same data folder: the new set replaces the one an earlier
run made (32 sessions, not 64), nothing the user made is touched, and a demo session the user
worked in is kept as theirs."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest

from tests.fleet.conftest import git
from tests.fleet.fakes import FakeAgent, Script
from workstation.core import agent_events as ev
from workstation.core.endpoints import Endpoint
from workstation.fleet.agent_bridge import AgentSetup
from workstation.fleet.demo_manifest import DemoManifestError
from workstation.fleet.demo_run import (
    KEPT_FILE,
    MADE_FILE,
    earlier_demo_sessions,
    keep_worked_in,
    prepare_demo,
    start_demo,
)
from workstation.fleet.service import Fleet
from workstation.fleet.session import SessionSpec

EP = Endpoint(base_url="http://e1.test/v1", api_key="", model="m", name="e1")


class ReplyingAgent(FakeAgent):
    """The scripted agent, telling of the user's message as the real agent's ``reply`` does."""

    async def run(self) -> ev.RunFinished:
        if self.s.user_message:
            self._emit(ev.UserMessageAdded(self.s.session_id, self.s.user_message))
        return await super().run()


def make_fleet(data: Path, http: httpx.AsyncClient, script: Script | None = None) -> Fleet:
    plays = script or Script(steps=1)

    def agent(setup: AgentSetup) -> FakeAgent:
        return ReplyingAgent(setup, plays)

    return Fleet(data_dir=data, endpoints=(EP,), agent_factory=agent, http=http, max_generating=32,
                 engine_poll_s=0.05)


def files_of(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` (git's own folders too) with its bytes."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


async def demo_run(data: Path, http: httpx.AsyncClient, *, sessions: int | None = None,
                   before: list[SessionSpec] = ()) -> tuple[Fleet, tuple[str, ...], int]:
    """One app run: the fleet brings back what the data folder holds, the demo starts; the
    fleet is left open for the caller to look at."""
    fleet = make_fleet(data, http)
    await fleet.start()
    for spec in before:
        await fleet.create_session(spec)
    started = await start_demo(fleet, data, sessions=sessions, headless=True)
    await asyncio.wait_for(fleet.wait_settled(), 120)
    return fleet, started.session_ids, started.replaced


async def test_a_second_demo_run_leaves_32_demo_sessions_and_the_users_own(
        tmp_path: Path, git_repo: Path, mock_http: httpx.AsyncClient) -> None:
    data = tmp_path / "data"
    mine = SessionSpec(task="Fix it", repo=str(git_repo), name="mine")
    fleet, first, replaced = await demo_run(data, mock_http, before=[mine])
    assert len(first) == 32 and replaced == 0
    first_names = {fleet.summary(i).name for i in first}
    sample = Path(fleet.summary(first[0]).repo_path)  # one of the first run's sample repositories
    on_sample = await fleet.create_session(SessionSpec(task="My own change", repo=str(sample), name="on-sample"))
    await fleet.aclose()

    fleet, second, replaced = await demo_run(data, mock_http)
    rows = {s.session_id: s for s in fleet.sessions()}
    assert replaced == 32 and len(second) == 32
    assert not set(first) & set(rows)  # the first run's sessions are gone ...
    assert {rows[i].name for i in second} == first_names  # ... so the new ones take their names again
    assert sorted(s.name for s in rows.values() if s.session_id not in second) == ["mine", "on-sample"]
    assert len(rows) == 34  # 32 demo sessions and the user's two, not 64 + 2
    users = rows[on_sample.session_id]
    assert Path(users.worktree_path).is_dir() and sample.is_dir()  # its repository stays with it
    holder = Path(users.worktree_path).parent  # the first run's worktrees there went with their sessions
    assert [p.name for p in holder.iterdir()] == ["on-sample"]
    branches = git(sample, "branch", "--format=%(refname:short)").split()
    assert [b for b in branches if b.startswith("ws/")] == ["ws/on-sample"]  # and their branches
    await fleet.aclose()


async def test_earlier_demo_folders_go_when_no_session_uses_them_and_old_folders_are_recognised(
        tmp_path: Path, git_repo: Path, mock_http: httpx.AsyncClient) -> None:
    """A folder from before the demo wrote down its sessions: the sessions on its sample
    repositories that run the manifest's tasks are the demo's; the same task on another
    repository is the user's."""
    data = tmp_path / "data"
    fleet = make_fleet(data, mock_http)
    await fleet.start()
    old = await asyncio.to_thread(prepare_demo, data, sessions=4, workdir=data / "demo" / "20250101-120000")
    from workstation.fleet.demo_run import demo_specs

    legacy = [(await fleet.create_session(spec)).session_id for spec in demo_specs(old, headless=True)]
    prompt = old.sessions[0].task.prompt
    same_task = await fleet.create_session(SessionSpec(task=prompt, repo=str(git_repo), name="same-task"))
    assert not (old.workdir / MADE_FILE).exists()
    started = await start_demo(fleet, data, sessions=4, headless=True)
    plan = started.plan
    await asyncio.wait_for(fleet.wait_settled(), 60)
    ids = {s.session_id for s in fleet.sessions()}
    assert started.replaced == 4 and not set(legacy) & ids
    assert ids == {*started.session_ids, same_task.session_id}
    assert not old.workdir.exists()  # no session uses it any more
    assert all(any(holder.iterdir()) for holder in (data / "worktrees").iterdir())  # no empty ones left
    from workstation.ui.fleet_backend import FleetCommands  # Qt-free: the window's commands

    commands = FleetCommands(fleet)
    await commands.refresh_recent()
    gone = str(old.repos[old.sessions[0].repository.name])
    assert gone in await fleet.store.known_repos() and gone not in commands.recent_repositories()
    assert str(git_repo) in commands.recent_repositories()  # the New dialog offers what is still there
    assert (plan.workdir / MADE_FILE).read_text().split() == list(started.session_ids)
    await fleet.aclose()

    # A third run replaces the second's set, a bad count before removing anything.
    fleet = make_fleet(data, mock_http)
    await fleet.start()
    with pytest.raises(DemoManifestError, match="between 1 and"):
        await start_demo(fleet, data, sessions=0, headless=True)
    assert len(fleet.sessions()) == 5
    third = await start_demo(fleet, data, sessions=4, headless=True)
    assert third.plan.workdir != plan.workdir
    await asyncio.wait_for(fleet.wait_settled(), 60)
    assert third.replaced == 4 and not plan.workdir.exists()
    assert {s.session_id for s in fleet.sessions()} == {*third.session_ids, same_task.session_id}
    await fleet.aclose()


def test_two_runs_in_one_second_get_folders_of_their_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import workstation.fleet.demo_run as demo_run

    monkeypatch.setattr(demo_run.time, "strftime", lambda _fmt: "20261201-101010")
    first = prepare_demo(tmp_path, sessions=1)
    second = prepare_demo(tmp_path, sessions=1)
    assert (first.workdir.name, second.workdir.name) == ("20261201-101010", "20261201-101010-2")
    (first.workdir / MADE_FILE).write_text("a\n")
    (tmp_path / "demo" / "mine").mkdir()  # a folder the demo did not make is never a run's
    (tmp_path / "demo" / "mine" / "notes.txt").write_text("keep")
    assert demo_run._run_folders(tmp_path) == [first.workdir.resolve(), second.workdir.resolve()]
    assert earlier_demo_sessions([], tmp_path, first.manifest) == []


async def test_demo_sessions_you_worked_in_stay_yours_and_only_the_others_are_replaced(
        tmp_path: Path, mock_http: httpx.AsyncClient) -> None:
    data = tmp_path / "data"
    fleet, first, _ = await demo_run(data, mock_http, sessions=4)
    said, committed, renamed, untouched = first
    await fleet.reply(said, "Also add a docstring, please")
    tree = Path(fleet.record(committed).worktree_path)
    (tree / "mine.py").write_text("MINE = 1\n")
    git(tree, "add", "mine.py")
    git(tree, "commit", "-qm", "my own commit")
    await fleet.shelf.rename(renamed, "my-fix")
    await asyncio.wait_for(fleet.wait_settled(), 60)
    kept = (said, committed, renamed)
    records = {sid: fleet.record(sid) for sid in kept}
    before = {sid: files_of(Path(rec.worktree_path)) for sid, rec in records.items()}
    events = {sid: await fleet.store.count_events(sid) for sid in kept}
    folder = Path(records[said].repo_path).parent  # the first run's folder: its sample repositories
    samples = files_of(folder)
    gone = fleet.record(untouched)
    await fleet.aclose()

    fleet, second, replaced = await demo_run(data, mock_http, sessions=4)
    started_kept = {s.session_id for s in fleet.sessions()} - set(second)
    assert replaced == 1 and started_kept == set(kept)
    assert not Path(gone.worktree_path).exists() and untouched not in {s.session_id for s in fleet.sessions()}
    assert f"ws/{gone.name}" not in git(Path(gone.repo_path), "branch", "--list", f"ws/{gone.name}")
    for sid, rec in records.items():  # worktree, branch, transcript: as the user left them
        now = fleet.record(sid)
        assert (now.name, now.worktree_path, now.branch) == (rec.name, rec.worktree_path, rec.branch)
        assert files_of(Path(rec.worktree_path)) == before[sid]
        assert await fleet.store.count_events(sid) == events[sid]
        assert git(Path(rec.repo_path), "rev-parse", f"refs/heads/{rec.branch}")
    def checkouts(files: dict[str, bytes]) -> dict[str, bytes]:  # git's own books change with the removed branch
        return {path: body for path, body in files.items() if "/.git/" not in path and path != MADE_FILE}

    assert folder.is_dir() and checkouts(files_of(folder)) == checkouts(samples)  # nothing of it deleted
    assert (folder / MADE_FILE).read_text().split() == [untouched]  # adopted: off the demo's list
    await fleet.aclose()

    fleet = make_fleet(data, mock_http)
    await fleet.start()
    third = await start_demo(fleet, data, sessions=4, headless=True)
    await asyncio.wait_for(fleet.wait_settled(), 60)
    assert third.kept == () and third.replaced == 4  # the second run's set; the adopted ones are not the demo's
    assert {s.session_id for s in fleet.sessions()} == {*third.session_ids, *kept}
    assert all(files_of(Path(rec.worktree_path)) == before[sid] for sid, rec in records.items())
    await fleet.aclose()


async def test_the_run_says_which_it_kept_and_why(tmp_path: Path, mock_http: httpx.AsyncClient) -> None:
    data = tmp_path / "data"
    fleet, first, _ = await demo_run(data, mock_http, sessions=3)
    await fleet.reply(first[0], "and the README")
    await fleet.shelf.rename(first[1], "my-fix")
    await asyncio.wait_for(fleet.wait_settled(), 60)
    name = fleet.record(first[0]).name
    old = fleet.record(first[1]).spec.name
    started = await start_demo(fleet, data, sessions=3, headless=True)
    await asyncio.wait_for(fleet.wait_settled(), 60)
    assert [(k.name, k.reasons) for k in started.kept] == [
        (name, ("you sent it 1 message",)), ("my-fix", (f"you renamed it (from {old})",))]
    assert started.notice() == (f"kept 2 demo session(s) you worked in, as yours now ({name}, my-fix); "
                                "replaced the 1 other(s) an earlier demo run made")
    assert started.details() == f"{name}: you sent it 1 message\nmy-fix: you renamed it (from {old})"
    await fleet.aclose()


async def test_a_working_demo_session_is_held_while_it_is_read_and_continues_when_kept(
        tmp_path: Path, mock_http: httpx.AsyncClient) -> None:
    """The window's fleet resumes sessions at its start: their files must not move while
    they are read; a kept one goes on working, the others wait to be removed."""
    data = tmp_path / "data"
    fleet = make_fleet(data, mock_http, Script(steps=4, turn_s=0.4))
    await fleet.start()
    started = await start_demo(fleet, data, sessions=2, headless=True)
    mine, other = started.session_ids
    fleet.store.append_event(mine, "UserMessageAdded", {"session_id": mine, "text": "mine now"})
    assert all(fleet.record(sid).state.is_working for sid in (mine, other))
    kept = await keep_worked_in(fleet, [mine, other])
    assert [k.session_id for k in kept] == [mine]
    assert fleet.record(mine).state.is_working and fleet.record(other).state.value == "paused"
    await asyncio.wait_for(fleet.wait_settled(), 60)
    assert fleet.record(mine).state.value == "done"
    await fleet.aclose()


async def test_a_folder_from_before_the_lists_gets_one_when_a_session_of_it_is_kept(
        tmp_path: Path, mock_http: httpx.AsyncClient) -> None:
    from workstation.fleet.demo_run import demo_specs

    data = tmp_path / "data"
    fleet = make_fleet(data, mock_http)
    await fleet.start()
    old = await asyncio.to_thread(prepare_demo, data, sessions=2, workdir=data / "demo" / "20250101-120000")
    mine, other = [(await fleet.create_session(spec)).session_id for spec in demo_specs(old, headless=True)]
    await fleet.shelf.rename(mine, "kept-one")
    started = await start_demo(fleet, data, sessions=2, headless=True)
    await asyncio.wait_for(fleet.wait_settled(), 60)
    assert [k.session_id for k in started.kept] == [mine] and started.replaced == 1
    assert (old.workdir / MADE_FILE).read_text().split() == [other]  # the demo's there: only the removed one
    assert earlier_demo_sessions(fleet.book.records(), data, started.plan.manifest,
                                 keep=started.plan.workdir) == []
    assert {s.session_id for s in fleet.sessions()} == {mine, *started.session_ids}
    await fleet.aclose()


async def test_a_folder_no_session_uses_stays_where_a_sample_repository_has_work_of_yours(
        tmp_path: Path, mock_http: httpx.AsyncClient) -> None:
    data = tmp_path / "data"
    fleet, first, _ = await demo_run(data, mock_http, sessions=2)
    sample = Path(fleet.record(first[0]).repo_path)
    folder = sample.parent
    (sample / "NOTES.md").write_text("what I learned\n")
    git(sample, "add", "NOTES.md")
    git(sample, "commit", "-qm", "my notes, by hand in the sample")
    before = files_of(sample)
    await fleet.aclose()

    fleet, second, replaced = await demo_run(data, mock_http, sessions=2)
    started_again = {s.session_id for s in fleet.sessions()}
    assert replaced == 2 and started_again == set(second)  # no session of the first run was worked in
    assert folder.is_dir() and files_of(sample).items() >= {k: v for k, v in before.items()
                                                            if "/.git/" not in f"/{k}"}.items()
    assert git(sample, "log", "-1", "--format=%s") == "my notes, by hand in the sample"
    assert f"{sample.name}: 1 commit the sample did not make" in (folder / KEPT_FILE).read_text()
    await fleet.aclose()

    fleet = make_fleet(data, mock_http)
    await fleet.start()
    third = await start_demo(fleet, data, sessions=2, headless=True)
    await asyncio.wait_for(fleet.wait_settled(), 60)
    assert third.replaced == 2 and third.kept_folders == () and folder.is_dir()  # told once, left alone after
    assert earlier_demo_sessions([], data, third.plan.manifest) == []
    await fleet.aclose()


def test_the_notice_names_a_folder_left_in_place(tmp_path: Path) -> None:
    from workstation.fleet.demo_run import DemoStart, KeptFolder

    plan = prepare_demo(tmp_path, sessions=1)
    started = DemoStart(plan, ("a",), 2, kept_folders=(KeptFolder(tmp_path / "old", ("datekit: 1 commit …",)),))
    assert started.notice() == (f"removed the 2 session(s) an earlier demo run made; left {tmp_path / 'old'} "
                                f"in place: work of yours is there ({KEPT_FILE} says what)")


async def test_a_list_that_cannot_be_rewritten_stops_the_run_before_anything_is_removed(
        tmp_path: Path, mock_http: httpx.AsyncClient) -> None:
    from workstation.core.errors import UserError

    data = tmp_path / "data"
    fleet, first, _ = await demo_run(data, mock_http, sessions=2)
    await fleet.reply(first[0], "mine now")
    await asyncio.wait_for(fleet.wait_settled(), 60)
    folder = Path(fleet.record(first[0]).repo_path).parent
    (folder / f"{MADE_FILE}.new").mkdir()  # where the new list would be written: taken
    with pytest.raises(UserError, match="cannot write the demo's list .* no session was removed"):
        await start_demo(fleet, data, sessions=2, headless=True)
    assert {s.session_id for s in fleet.sessions()} == set(first)
    assert all(Path(fleet.record(sid).worktree_path).is_dir() for sid in first)
    await fleet.aclose()
