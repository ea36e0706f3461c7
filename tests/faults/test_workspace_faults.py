"""Faults in the sessions' files: a git index lock left behind, a command printing 1 GB,
binary and non-UTF-8 files and names, a repository deleted under a running session.

Each runs real agents in a real fleet on the scripted engine, commands in the sandbox."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import httpx
import psutil
import pytest

from tests.faults.conftest import (
    Planner,
    call,
    check_transcript,
    prove_alive,
    running_fleet,
    settle,
    spec,
    steps,
    until,
)
from tests.helpers.prerequisites import needs_bwrap
from tests.helpers.scripted_server import ScriptedServer
from workstation.core import agent_events as ev
from workstation.core.errors import UserError
from workstation.core.session_state import SessionState as S


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(cwd), *args], check=True, capture_output=True, text=True).stdout


@needs_bwrap  # its agents run commands unattended: only inside the sandbox
async def test_git_index_lock_left_behind(tmp_path: Path, git_repo: Path, http: httpx.AsyncClient) -> None:
    """A crashed git left ``index.lock`` in the main repository and in a session's worktree.

    Must hold: new sessions can still be made (worktree add does not need the main index);
    the agent's edits are still checkpointed (checkpoints use their own index); the agent's
    ``git status`` still answers; committing the session's work is refused with a plain
    message naming the lock, and works once the lock is gone; nothing is lost."""
    (git_repo / ".git" / "index.lock").write_text("")
    planner = Planner({"lock": steps(
        call("write_to_file", path="feature.py", content="VALUE = 1\n"),
        call("execute_command", command="git status --short"),
    )})
    async with ScriptedServer(responder=planner) as server, \
            running_fleet(tmp_path / "data", server.endpoint, http) as fleet:
        made = await fleet.create_session(spec(git_repo, "lock"))
        worktree = Path(made.worktree_path)
        admin = Path(_git(worktree, "rev-parse", "--absolute-git-dir").strip())
        (admin / "index.lock").write_text("")
        await fleet.start_session(made.session_id)
        await settle(fleet)
        assert fleet.summary(made.session_id).state is S.DONE
        facts = await check_transcript(fleet, made.session_id)
        status = facts.finished[facts.tools("execute_command")[0]]
        assert status == "ok"
        assert "?? feature.py" in next(e.result for e in facts.of(ev.ToolCallFinished) if e.tool == "execute_command")
        assert facts.of(ev.CheckpointCreated), "the edit was not checkpointed"
        with pytest.raises(UserError, match="index.lock"):
            await fleet.commit(made.session_id, "add feature")
        assert (worktree / "feature.py").read_text() == "VALUE = 1\n"  # nothing lost
        (admin / "index.lock").unlink()
        await fleet.commit(made.session_id, "add feature")
        assert "feature.py" in _git(git_repo, "show", "--stat", "--format=", made.branch)
        await prove_alive(fleet, git_repo)
    assert (git_repo / ".git" / "index.lock").exists()  # the user's lock is theirs to remove


@pytest.mark.slow
async def test_a_command_printing_a_gigabyte(tmp_path: Path, git_repo: Path, http: httpx.AsyncClient) -> None:
    """Must hold: the command runs to its end; the model and the transcript get a capped
    head and tail; the live stream is not stored; the store and the app's memory stay small."""
    planner = Planner({"flood": steps(
        call("execute_command", command="head -c 1000000000 /dev/zero | tr '\\0' x; echo; echo END-OF-FLOOD"),
    )})
    me = psutil.Process()
    async with ScriptedServer(responder=planner) as server, \
            running_fleet(tmp_path / "data", server.endpoint, http, command_timeout_s=300.0) as fleet:
        live = {"chunks": 0, "chars": 0}

        def on_event(e: object) -> None:
            event = getattr(e, "event", None)
            if isinstance(event, ev.CommandOutputStreamed):
                live["chunks"] += 1
                live["chars"] += len(event.text)

        fleet.agent_event.connect(on_event)
        rss_before = me.memory_info().rss
        made = await fleet.create_session(spec(git_repo, "flood"), start=True)
        await settle(fleet, 400)
        rss_growth_mb = (me.memory_info().rss - rss_before) / 1e6
        assert fleet.summary(made.session_id).state is S.DONE
        facts = await check_transcript(fleet, made.session_id)
        result = next(e.result for e in facts.of(ev.ToolCallFinished) if e.tool == "execute_command")
        assert "Exit code: 0" in result and "END-OF-FLOOD" in result and "characters omitted" in result
        assert len(result) < 30_000
        assert live["chars"] >= 1_000_000_000  # it all streamed past, live
        await fleet.store.flush()
        store = tmp_path / "data" / "store.sqlite3"
        stored_mb = sum(p.stat().st_size for p in (store, Path(f"{store}-wal")) if p.exists()) / 1e6
        assert stored_mb < 5, f"store grew to {stored_mb:.1f} MB"
        assert rss_growth_mb < 300, f"the app grew by {rss_growth_mb:.0f} MB"
        await prove_alive(fleet, git_repo)


@needs_bwrap  # its agents run commands unattended: only inside the sandbox
async def test_binary_and_non_utf8_files_and_names(tmp_path: Path, git_repo: Path, http: httpx.AsyncClient) -> None:
    """Must hold: every tool answers (listing, reading, searching, running commands over such
    files) without crashing the agent; the transcript is complete and valid (a name that is
    not UTF-8 is stored as readable text); checkpoints include the files; the session ends."""
    root = os.fsencode(git_repo)
    (git_repo / "blob.bin").write_bytes(bytes(range(256)) * 64 + b"\x00\xff\xfe")
    (git_repo / "latin1.txt").write_bytes(b"caf\xe9 cr\xe8me br\xfbl\xe9e\n")
    with open(os.path.join(root, b"caf\xe9-\xff.txt"), "wb") as fh:  # a name that is not UTF-8
        fh.write(b"odd name\n")
    (git_repo / "naïve 日本.txt").write_text("unicode name\n", encoding="utf-8")
    subprocess.run(["git", "-C", str(git_repo), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(git_repo), "-c", "user.name=t", "-c", "user.email=t@x", "commit", "-qm", "odd files"],
                   check=True)
    planner = Planner({"odd": steps(
        call("list_files", path=".", recursive=True),
        call("read_file", path="blob.bin"),
        call("read_file", path="latin1.txt"),
        call("read_file", path="naïve 日本.txt"),
        call("search_files", path=".", regex="caf|odd"),
        call("execute_command", command="ls; cat latin1.txt; head -c 300 blob.bin; printf '\\xff\\xfe\\n'"),
        call("write_to_file", path="notes.txt", content="checked the odd files\n"),
    )})
    async with ScriptedServer(responder=planner) as server, \
            running_fleet(tmp_path / "data", server.endpoint, http) as fleet:
        made = await fleet.create_session(spec(git_repo, "odd"), start=True)
        await settle(fleet)
        summary = fleet.summary(made.session_id)
        assert summary.state is S.DONE, summary.error
        facts = await check_transcript(fleet, made.session_id)
        assert len(facts.tool_calls) == 8  # seven tools and the completion, none lost
        results = {e.tool: e for e in facts.of(ev.ToolCallFinished)}
        assert "latin1.txt" in results["list_files"].result and "naïve 日本.txt" in results["list_files"].result
        assert results["execute_command"].status == "ok"
        for event in facts.of(ev.ToolCallFinished):
            event.result.encode("utf-8")  # valid text all the way into the store
        assert facts.of(ev.CheckpointCreated)
        assert (Path(summary.worktree_path) / "notes.txt").exists()
        await prove_alive(fleet, git_repo)


@needs_bwrap  # its agents run commands unattended: only inside the sandbox
async def test_repository_deleted_under_a_running_session(tmp_path: Path, git_repo: Path,
                                                          http: httpx.AsyncClient) -> None:
    """The worktree of one session is deleted while its command runs; later the whole
    repository goes. Must hold: that session ends with a plain message, its transcript
    complete; the other session is untouched and finishes; the app keeps running and the
    gone session can still be removed."""
    planner = Planner({
        "victim": steps(call("execute_command", command="sleep 2; echo slept"),
                        call("write_to_file", path="after.txt", content="x\n"),
                        call("execute_command", command="ls")),
        "bystander": steps(call("write_to_file", path="b.txt", content="b\n"),
                           call("execute_command", command="sleep 3; cat b.txt")),
    })
    started: list[tuple[str, str]] = []

    def on_event(e: object) -> None:
        if isinstance(e.event, ev.ToolCallStarted):  # type: ignore[attr-defined]
            started.append((e.session_id, e.event.tool))  # type: ignore[attr-defined]

    async with ScriptedServer(responder=planner) as server, \
            running_fleet(tmp_path / "data", server.endpoint, http) as fleet:
        fleet.agent_event.connect(on_event)
        victim = await fleet.create_session(spec(git_repo, "victim"), start=True)
        bystander = await fleet.create_session(spec(git_repo, "bystander"), start=True)
        await until(lambda: (victim.session_id, "execute_command") in started, 30, "the victim's command")
        shutil.rmtree(victim.worktree_path)  # while `sleep 2` runs in it
        await settle(fleet)
        gone = fleet.summary(victim.session_id)
        assert gone.state.is_finished, gone  # the scripted model gives up and completes
        facts = await check_transcript(fleet, victim.session_id)
        results = {e.tool: e for e in facts.of(ev.ToolCallFinished)}
        assert results["write_to_file"].status == "error" and "no longer exists" in results["write_to_file"].result
        assert "no longer exists" in results["execute_command"].result  # the `ls` after it
        assert not Path(victim.worktree_path).exists()  # nothing re-created it as a plain folder
        ok = fleet.summary(bystander.session_id)
        assert ok.state is S.DONE, ok.error
        await check_transcript(fleet, bystander.session_id)
        with pytest.raises(UserError, match="gone"):
            await fleet.start_session(victim.session_id)
        await fleet.remove(victim.session_id)
        await prove_alive(fleet, git_repo)

        # now the whole repository goes, with a session working on it
        later = await fleet.create_session(spec(git_repo, "victim", tag="later"), start=True)
        await until(lambda: (later.session_id, "execute_command") in started, 30, "the later command")
        shutil.rmtree(git_repo)
        await settle(fleet)
        assert fleet.summary(later.session_id).state.is_finished
        await check_transcript(fleet, later.session_id)
        with pytest.raises(UserError, match="repository of .* is gone"):
            await fleet.diff(later.session_id)
        await fleet.remove(later.session_id)
        assert later.session_id not in {x.session_id for x in fleet.sessions()}
