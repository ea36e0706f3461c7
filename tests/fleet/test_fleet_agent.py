"""The fleet with the real coding agent against the scripted OpenAI-compatible server:
a full run, and an engine that dies mid-stream and comes back."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from tests.fleet.agent_script import STEPS, make_responder
from tests.helpers.prerequisites import needs_bwrap
from tests.fleet.conftest import git
from tests.helpers.scripted_server import Reply, ScriptedServer, ToolCall
from workstation.core.fleet_events import GenerationSlotsChanged
from workstation.core.session_state import SessionState as S
from workstation.engine.http import make_http_client
from workstation.fleet import Fleet, SessionSpec, real_agent_factory


class RestartableServer(ScriptedServer):
    """The scripted server, coming back on the same port after :meth:`aclose`."""

    async def start(self) -> RestartableServer:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", self.port or 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self


def spec(repo: Path, token: str) -> SessionSpec:
    return SessionSpec(task=f"Write your token into note.txt. token={token}", repo=str(repo),
                       name=f"s-{token}", auto_approve=("all",), headless=True)


async def _check_history(fleet: Fleet, sid: str) -> list[dict]:
    events = await fleet.transcript(sid)
    appended = [e for _, e in events if type(e).__name__ == "MessageAppended"]
    idx = [e.index for e in appended]
    assert idx == list(range(len(idx))), "history indexes must grow by one: no turn twice"
    messages = [json.loads(e.message_json) for e in appended]
    call_ids = [c["id"] for m in messages if m["role"] == "assistant" for c in m.get("tool_calls") or []]
    results = [m["tool_call_id"] for m in messages if m["role"] == "tool"]
    assert sorted(call_ids) == sorted(results), "every tool call has exactly one result"
    return messages


@needs_bwrap  # its agents run commands unattended: only inside the sandbox
async def test_real_agent_fleet_run(tmp_path: Path, git_repo: Path) -> None:
    async with ScriptedServer(responder=make_responder()) as server, make_http_client() as http:
        fleet = Fleet(data_dir=tmp_path / "data", endpoints=[server.endpoint],
                      agent_factory=real_agent_factory(http), http=http, max_generating=2)
        await fleet.start()
        made = []
        for token in ("a1", "b2", "c3", "d4"):
            made += await fleet.create_sessions(spec(git_repo, token), 1, start=True)
        await asyncio.wait_for(fleet.wait_settled(), 60)
        for s in fleet.sessions():
            assert s.state is S.DONE, (s.name, s.error)
            wt = Path(s.worktree_path)
            assert (wt / "note.txt").read_text() == s.name.removeprefix("s-") + "\n"
            assert (wt / "runs.log").read_text() == "ran\n"
            assert s.completion_tokens > 0
            messages = await _check_history(fleet, s.session_id)
            assert sum(1 for m in messages if m["role"] == "assistant") == STEPS
            assert await fleet.store.list_checkpoints(s.session_id)
        assert fleet.gate.peak_generating <= 2
        assert not (git_repo / "note.txt").exists()
        await fleet.aclose()


@needs_bwrap  # its agents run commands unattended: only inside the sandbox
async def test_engine_killed_mid_stream_sessions_wait_then_continue(tmp_path: Path, git_repo: Path) -> None:
    server = RestartableServer(responder=make_responder(delay_s=0.02, chunk_chars=2))
    await server.start()
    async with make_http_client() as http:
        fleet = Fleet(data_dir=tmp_path / "data", endpoints=[server.endpoint],
                      agent_factory=real_agent_factory(http, overrides={"max_retries": 1,
                                                                        "retry_backoff_s": 0.05}),
                      http=http, engine_poll_s=0.1)
        await fleet.start()
        for token in ("k1", "k2", "k3"):
            await fleet.create_sessions(spec(git_repo, token), 1, start=True)
        while len(server.requests) < 5:
            await asyncio.sleep(0.01)
        await server.aclose()  # the engine dies with streams open
        for _ in range(400):
            states = {s.state for s in fleet.sessions()}
            if states <= {S.ENGINE_WAIT, S.DONE} and S.ENGINE_WAIT in states:
                break
            await asyncio.sleep(0.025)
        waiting = [s for s in fleet.sessions() if s.state is S.ENGINE_WAIT]
        assert waiting and "not answering" in waiting[0].error
        await server.start()  # the engine is back on the same address
        await asyncio.wait_for(fleet.wait_settled(), 60)
        for s in fleet.sessions():
            assert s.state is S.DONE, (s.name, s.error)
            assert (Path(s.worktree_path) / "runs.log").read_text() == "ran\n"  # never twice
            await _check_history(fleet, s.session_id)
        await fleet.aclose()
    await server.aclose()


async def test_unreachable_endpoint_is_engine_wait_not_failure(tmp_path: Path, git_repo: Path) -> None:
    """A session started while its engine is down waits for it instead of failing."""
    server = RestartableServer(responder=make_responder())
    await server.start()
    endpoint = server.endpoint
    await server.aclose()
    async with make_http_client() as http:
        fleet = Fleet(data_dir=tmp_path / "data", endpoints=[endpoint],
                      agent_factory=real_agent_factory(http, context_window_tokens=8192,
                                                       overrides={"max_retries": 0}),
                      http=http, engine_poll_s=0.1)
        await fleet.start()
        (s,) = await fleet.create_sessions(spec(git_repo, "z9"), 1, start=True)
        for _ in range(200):
            if fleet.summary(s.session_id).state is S.ENGINE_WAIT:
                break
            await asyncio.sleep(0.02)
        assert fleet.summary(s.session_id).state is S.ENGINE_WAIT
        await server.start()
        await asyncio.wait_for(fleet.wait_settled(), 60)
        assert fleet.summary(s.session_id).state is S.DONE
        await fleet.aclose()
    await server.aclose()


async def test_32_real_agents_one_repo_and_cap_4_of_10(tmp_path: Path, git_repo: Path) -> None:
    """The issue's two fleet shapes with the real agent: 32 sessions on one repository (32
    worktrees and branches, each with only its own note), then 10 sessions under a cap of 4."""
    async with ScriptedServer(responder=make_responder(delay_s=0.002)) as server, make_http_client() as http:
        fleet = Fleet(data_dir=tmp_path / "data", endpoints=[server.endpoint],
                      agent_factory=real_agent_factory(http), http=http, max_generating=32)
        await fleet.start()
        for i in range(32):
            await fleet.create_sessions(spec(git_repo, f"t{i:02d}"), 1, start=True)
        await asyncio.wait_for(fleet.wait_settled(), 300)
        rows = fleet.sessions()
        assert len({r.worktree_path for r in rows}) == 32 and len({r.branch for r in rows}) == 32
        for r in rows:
            assert r.state is S.DONE, (r.name, r.error)
            assert (Path(r.worktree_path) / "note.txt").read_text() == r.name.removeprefix("s-") + "\n"
        await fleet.remove_many([r.session_id for r in rows])
        fleet.set_max_generating(4)
        fleet.gate.reset_peak()
        slots: list[GenerationSlotsChanged] = []
        fleet.changed.connect(lambda e: slots.append(e) if isinstance(e, GenerationSlotsChanged) else None)
        made = []
        for i in range(10):
            made += await fleet.create_sessions(spec(git_repo, f"q{i}"), 1)
        for s in made:
            await fleet.start_session(s.session_id)
        await asyncio.wait_for(fleet.wait_settled(), 300)
        assert all(r.state is S.DONE for r in fleet.sessions())
        assert fleet.gate.peak_generating <= 4 and max(e.generating for e in slots) <= 4
        assert max(e.waiting for e in slots) > 0  # the rest waited in the queue
        await fleet.aclose()


async def test_restore_checkpoint_and_mode(tmp_path: Path, git_repo: Path) -> None:
    async with ScriptedServer(responder=make_responder()) as server, make_http_client() as http:
        fleet = Fleet(data_dir=tmp_path / "data", endpoints=[server.endpoint],
                      agent_factory=real_agent_factory(http), http=http)
        await fleet.start()
        (s,) = await fleet.create_sessions(spec(git_repo, "cp"), 1, start=True)
        await asyncio.wait_for(fleet.wait_settled(), 60)
        cps = await fleet.checkpoints(s.session_id)
        assert cps, "checkpoints are recorded in the store"
        assert [c.label for c in cps][:2] == ["session start", "write_to_file note.txt"]
        note = Path(s.worktree_path) / "note.txt"
        assert note.exists()
        before = len(await fleet.history(s.session_id))
        await fleet.restore_checkpoint(s.session_id, cps[0].commit_sha)
        assert not note.exists()  # files back to before the session wrote anything
        assert len(await fleet.history(s.session_id)) < before  # and the conversation too
        events = await fleet.transcript(s.session_id)
        assert any(type(e).__name__ == "CheckpointRestored" for _, e in events)
        await fleet.set_mode(s.session_id, "plan")
        assert fleet.record(s.session_id).spec.mode == "plan"
        assert await fleet.disk_usage(s.session_id) > 0
        await fleet.aclose()


@needs_bwrap  # its agents run commands unattended: only inside the sandbox
async def test_a_follow_up_to_a_working_session_reaches_its_model(tmp_path: Path, git_repo: Path) -> None:
    """Typed while the session works: the real agent takes it and its next model request
    carries it (it was refused in words before its agent could take it; dropped before that)."""
    async with ScriptedServer(responder=make_responder(delay_s=0.05)) as server, make_http_client() as http:
        fleet = Fleet(data_dir=tmp_path / "data", endpoints=[server.endpoint],
                      agent_factory=real_agent_factory(http), http=http, max_generating=2)
        await fleet.start()
        (s,) = await fleet.create_sessions(spec(git_repo, "f1"), 1, start=True)
        for _ in range(500):  # its first model turn is streaming (not the factory's priming request)
            if any("token=f1" in json.dumps(body.get("messages")) for body in server.requests):
                break
            await asyncio.sleep(0.01)
        await fleet.reply(s.session_id, "and mention the token twice")
        await asyncio.wait_for(fleet.wait_settled(), 60)
        assert fleet.summary(s.session_id).state is S.DONE
        asked = [json.dumps(body["messages"]) for body in server.requests]
        assert "and mention the token twice" in asked[-1]
        messages = await _check_history(fleet, s.session_id)
        assert any(m["role"] == "user" and "mention the token twice" in str(m["content"]) for m in messages)
        await fleet.aclose()


def _note_then_done(body: dict, n: int) -> Reply:
    step = sum(1 for m in body.get("messages", []) if m.get("role") == "assistant")
    calls = [ToolCall("write_to_file", {"path": "note.txt", "content": "noted\n"}),
             ToolCall("attempt_completion", {"result": "noted"})]
    return Reply(text="", tool_calls=[calls[min(step, 1)]])


async def test_checkpoints_leave_out_the_environment_the_fleet_put_into_the_worktree(
        tmp_path: Path, git_repo: Path) -> None:
    cache = git_repo / "models"  # a read-only cache no ignore rule matches: git would pick its link up
    cache.mkdir()
    (cache / "weights.bin").write_text("w")
    (git_repo / ".env").write_text("KEY=1\n")
    for p in [cache, *cache.rglob("*")]:
        p.chmod(p.stat().st_mode & ~0o222)
    try:
        async with ScriptedServer(responder=_note_then_done) as server, make_http_client() as http:
            fleet = Fleet(data_dir=tmp_path / "data", endpoints=[server.endpoint],
                          agent_factory=real_agent_factory(http, prime=False), http=http)
            await fleet.start()
            (s,) = await fleet.create_sessions(
                SessionSpec(task="take a note", repo=str(git_repo), name="env", auto_approve=("all",),
                            headless=True, shared_links=("models",), copy_files=(".env",)), 1, start=True)
            await asyncio.wait_for(fleet.wait_settled(), 60)
            assert fleet.summary(s.session_id).state is S.DONE, fleet.summary(s.session_id).error
            wt = Path(s.worktree_path)
            assert (wt / "models").is_symlink() and (wt / ".env").is_file()
            checkpoints = await fleet.checkpoints(s.session_id)
            assert checkpoints
            for cp in checkpoints:
                files = git(wt, "ls-tree", "-r", "--name-only", cp.commit_sha).splitlines()
                assert "models" not in files and ".env" not in files, files
            assert "note.txt" in files
            await fleet.aclose()
    finally:
        for p in [cache, *cache.rglob("*")]:
            p.chmod(p.stat().st_mode | 0o200)
