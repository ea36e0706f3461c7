"""What of a session is the user's: read from a real store, a real worktree and real
checkpoints (the agent's own ``CheckpointStore``), one kind of evidence at a time."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from tests.fleet.conftest import git
from tests.fleet.fakes import Script, factory
from workstation.agent.checkpoints import CheckpointStore
from workstation.core.endpoints import Endpoint
from workstation.fleet.service import Fleet
from workstation.fleet.session import SessionSpec
from workstation.fleet.sample_repos import create_sample_repository
from workstation.fleet.user_work import SAMPLE_AUTHOR_EMAIL, repository_work, user_work

EP = Endpoint(base_url="http://e1.test/v1", api_key="", model="m", name="e1")


@pytest.fixture
def fleet(tmp_path: Path, mock_http: httpx.AsyncClient) -> Fleet:
    """Started by ``opened`` inside the test: async fixtures run on the session's event loop,
    the tests on one of their own."""
    return Fleet(data_dir=tmp_path / "data", endpoints=(EP,), agent_factory=factory(Script(steps=1)),
                 http=mock_http, engine_poll_s=0.05)


@contextlib.asynccontextmanager
async def opened(fleet: Fleet) -> AsyncIterator[Fleet]:
    await fleet.start()
    try:
        yield fleet
    finally:
        await fleet.aclose()


async def made(fleet: Fleet, repo: Path, name: str = "s") -> tuple[str, Path]:
    sid = (await fleet.create_session(SessionSpec(task="Fix it", repo=str(repo), name=name))).session_id
    return sid, Path(fleet.record(sid).worktree_path)


async def reasons(fleet: Fleet, sid: str) -> tuple[str, ...]:
    await fleet.store.flush()
    return await user_work(fleet.store, fleet.git, fleet.record(sid))


def event(fleet: Fleet, sid: str, kind: str, **payload: object) -> None:
    fleet.store.append_event(sid, kind, {"session_id": sid, **payload})


def written_before(path: Path, seconds: float) -> None:
    stamp = time.time() - seconds
    os.utime(path, (stamp, stamp))


async def test_a_fresh_session_and_the_agents_own_checkpointed_work_are_not_the_users(
        fleet: Fleet, git_repo: Path) -> None:
    async with opened(fleet):
        sid, tree = await made(fleet, git_repo)
        assert await reasons(fleet, sid) == ()
        checkpoints = CheckpointStore(tree, sid)
        await checkpoints.create("session start", 1)
        event(fleet, sid, "ToolCallStarted", call_id="c1", tool="write_to_file", arguments={}, summary="")
        (tree / "app.py").write_text("def add(a, b):\n    return b + a\n")
        (tree / "notes.txt").write_text("new file of the agent\n")
        event(fleet, sid, "ToolCallFinished", call_id="c1", tool="write_to_file", status="ok", result="")
        assert await checkpoints.create("edit app.py", 3) is not None
        event(fleet, sid, "CheckpointCreated", commit="x", message_index=3, label="edit app.py")
        event(fleet, sid, "ApprovalResolved", request_id="r1", approved=False,
              feedback="no one can approve in this session", by="nobody")  # a headless refusal
        assert await reasons(fleet, sid) == ()
        assert git(tree, "status", "--porcelain") != ""  # the worktree's own index was left alone
        assert "notes.txt" in git(tree, "status", "--porcelain")


async def test_the_links_and_files_the_fleet_puts_into_a_worktree_are_not_the_users(
        fleet: Fleet, git_repo: Path) -> None:
    """Shared links and bootstrap copies and links are the session's environment (review
    leaves them out too). A folder rule (``.venv/``) does not ignore a link, so git sees one."""
    (git_repo / ".gitignore").write_text(".venv/\nnode_modules/\n")
    git(git_repo, "add", ".gitignore")
    git(git_repo, "commit", "-qm", "ignore the environment")
    venv = git_repo / ".venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text("#!/bin/sh\n")
    (git_repo / "node_modules").mkdir()
    (git_repo / "local.cfg").write_text("port = 1\n")
    read_only = [venv, *venv.rglob("*")]
    for p in read_only:
        p.chmod(p.stat().st_mode & ~0o222)
    try:
        async with opened(fleet):
            spec = SessionSpec(task="Fix it", repo=str(git_repo), name="env", shared_links=(".venv",),
                               copy_files=("local.cfg",), link_files=("node_modules",))
            sid = (await fleet.create_session(spec)).session_id
            tree = Path(fleet.record(sid).worktree_path)
            assert (tree / ".venv").is_symlink() and (tree / "node_modules").is_symlink()
            assert (tree / "local.cfg").is_file()
            assert await reasons(fleet, sid) == ()
            await CheckpointStore(tree, sid).create("session start", 1)
            assert await reasons(fleet, sid) == ()
            (tree / "local.cfg").unlink()
            (tree / "mine.txt").write_text("mine\n")
            assert await reasons(fleet, sid) == (
                "1 file changed in its worktree after its agent's last step (mine.txt)",)
    finally:
        for p in read_only:
            p.chmod(p.stat().st_mode | 0o200)


async def test_files_changed_after_the_agents_last_checkpoint_are_the_users(fleet: Fleet, git_repo: Path) -> None:
    async with opened(fleet):
        sid, tree = await made(fleet, git_repo)
        await CheckpointStore(tree, sid).create("session start", 1)
        (tree / "app.py").write_text("# my own edit\n")
        (tree / "README.md").unlink()
        found = await reasons(fleet, sid)
        assert found == ("2 files changed in its worktree after its agent's last step (README.md, app.py)",)


async def test_an_interrupted_tool_call_explains_what_it_wrote_before_it_ended(fleet: Fleet, git_repo: Path) -> None:
    """A command stopped half-way has no checkpoint after it: what it wrote is the agent's;
    what changed after it ended is the user's."""
    async with opened(fleet):
        sid, tree = await made(fleet, git_repo)
        await CheckpointStore(tree, sid).create("session start", 1)
        event(fleet, sid, "ToolCallStarted", call_id="c1", tool="execute_command", arguments={}, summary="")
        (tree / "half.txt").write_text("written by the stopped command\n")
        written_before(tree / "half.txt", 5)
        event(fleet, sid, "ToolCallFinished", call_id="c1", tool="execute_command", status="interrupted", result="")
        assert await reasons(fleet, sid) == ()
        (tree / "mine.txt").write_text("the user's\n")
        assert await reasons(fleet, sid) == ("1 file changed in its worktree after its agent's last step (mine.txt)",)


async def test_a_change_whose_checkpoint_never_came_is_the_agents_and_a_copy_after_a_checkpoint_the_users(
        fleet: Fleet, git_repo: Path) -> None:
    """The app quit between an edit and its checkpoint (seen at a window demo's duration):
    the edit is the agent's. Once a checkpoint holds everything, any difference is the
    user's, even a file copied in with an old time (``cp -p``)."""
    async with opened(fleet):
        sid, tree = await made(fleet, git_repo)
        checkpoints = CheckpointStore(tree, sid)
        await checkpoints.create("session start", 1)
        event(fleet, sid, "CheckpointCreated", commit="x", message_index=1, label="session start")
        event(fleet, sid, "ToolCallStarted", call_id="c1", tool="replace_in_file", arguments={}, summary="")
        (tree / "app.py").write_text("# the agent's edit\n")
        written_before(tree / "app.py", 1)
        event(fleet, sid, "ToolCallFinished", call_id="c1", tool="replace_in_file", status="ok", result="")
        assert await reasons(fleet, sid) == ()
        await checkpoints.create("edit app.py", 3)
        event(fleet, sid, "CheckpointCreated", commit="y", message_index=3, label="edit app.py")
        (tree / "old.txt").write_text("copied in\n")
        written_before(tree / "old.txt", 3600)
        assert await reasons(fleet, sid) == ("1 file changed in its worktree after its agent's last step (old.txt)",)


async def test_a_call_that_never_finished_dates_its_files_by_the_last_event(fleet: Fleet, git_repo: Path) -> None:
    async with opened(fleet):
        sid, tree = await made(fleet, git_repo)
        await CheckpointStore(tree, sid).create("session start", 1)
        (tree / "early.txt").write_text("x\n")
        written_before(tree / "early.txt", 5)
        event(fleet, sid, "ToolCallStarted", call_id="c1", tool="execute_command", arguments={}, summary="")
        assert await reasons(fleet, sid) == ()  # the app died in the call: anything before its last word is the call's


async def test_without_a_checkpoint_every_agent_step_dates_its_files(fleet: Fleet, git_repo: Path) -> None:
    async with opened(fleet):
        sid, tree = await made(fleet, git_repo)
        (tree / "agent.txt").write_text("the agent's\n")
        written_before(tree / "agent.txt", 5)
        event(fleet, sid, "ToolCallFinished", call_id="c1", tool="write_to_file", status="ok", result="")
        assert await reasons(fleet, sid) == ()
        (tree / "agent.txt").write_text("then mine\n")
        assert await reasons(fleet, sid) == ("1 file changed in its worktree after its agent's last step (agent.txt)",)


async def test_the_transcript_and_the_record_tell_what_the_user_did(fleet: Fleet, git_repo: Path) -> None:
    async with opened(fleet):
        sid, _tree = await made(fleet, git_repo)
        event(fleet, sid, "UserMessageAdded", text="also the docs")
        event(fleet, sid, "UserMessageAdded", text="thanks")
        event(fleet, sid, "ApprovalResolved", request_id="r1", approved=True, by="user")
        event(fleet, sid, "CheckpointRestored", commit="abc", files=True, conversation=False)
        event(fleet, sid, "ModeChanged", mode="plan")
        await fleet.shelf.rename(sid, "mine")
        await fleet.scheduling.set_background(sid, True)
        await fleet.scheduling.set_budget(sid, tokens=1000)
        fleet.shelf.archive(sid, "archived by you")
        assert await reasons(fleet, sid) == (
            "you sent it 2 messages", "you answered 1 approval", "you restored a checkpoint", "you switched its mode",
            "you renamed it (from s)", "it is in the archive (archived by you)", "you marked it background",
            "you gave it a budget")


async def test_commits_and_checkouts_in_the_worktree_are_the_users(fleet: Fleet, git_repo: Path) -> None:
    async with opened(fleet):
        sid, tree = await made(fleet, git_repo)
        (tree / "app.py").write_text("# committed by me\n")
        git(tree, "commit", "-qam", "my change")
        assert await reasons(fleet, sid) == ("its branch ws/s has 1 commit of its own",)
        git(tree, "switch", "-q", "-c", "my-branch")
        assert await reasons(fleet, sid) == ("its worktree has my-branch checked out",
                                             "its branch ws/s has 1 commit of its own")
        git(tree, "switch", "-q", "--detach", "ws/s")
        assert await reasons(fleet, sid) == ("its worktree has a detached HEAD",
                                             "its branch ws/s has 1 commit of its own")
        git(tree, "switch", "-q", "ws/s")
        git(tree, "reset", "-q", "--hard", "HEAD~1")
        assert await reasons(fleet, sid) == ()  # back where it started (my-branch keeps the commit, removal or not)


async def test_a_worktree_git_cannot_read_counts_as_the_users_and_a_missing_one_as_nothing(
        fleet: Fleet, git_repo: Path) -> None:
    async with opened(fleet):
        sid, tree = await made(fleet, git_repo)
        (tree / ".git").write_text("gitdir: /nonexistent/place\n")
        found = await reasons(fleet, sid)
        assert len(found) == 1 and found[0].startswith("its worktree could not be read (")
        assert found[0].endswith("so it counts as yours")
        other, tree2 = await made(fleet, git_repo, "t")
        await asyncio.to_thread(shutil.rmtree, tree2)
        assert await reasons(fleet, other) == ()


async def test_a_sample_repository_tells_work_of_the_users_from_its_own(tmp_path: Path) -> None:
    from workstation.fleet.gitproc import GitRunner

    repo = await asyncio.to_thread(create_sample_repository, "datekit", tmp_path / "datekit")
    assert set(git(repo, "log", "--branches", "--format=%ae").split()) == {SAMPLE_AUTHOR_EMAIL}
    runner = GitRunner()
    try:
        assert await repository_work(runner, repo) == ()
        (repo / "NOTES.md").write_text("mine\n")
        assert await repository_work(runner, repo) == ("1 changed file in its checkout",)
        git(repo, "add", "NOTES.md")
        git(repo, "commit", "-qm", "my notes")
        git(repo, "branch", "try-this")
        assert await repository_work(runner, repo) == ("1 commit the sample did not make", "branch try-this")
        assert (await repository_work(runner, tmp_path))[0].startswith("it could not be read (")
    finally:
        await runner.aclose()
