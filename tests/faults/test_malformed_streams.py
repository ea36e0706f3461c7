"""Malformed answers from the engine: truncated JSON, wrong content type, HTTP 500 and 429,
a dropped connection, a stream that stalls — each once in the middle of a session's work.

Must hold: the turn cut by the fault is never stored and the retried turn is stored once;
every tool ran exactly once; sessions hit by a transient fault (truncated JSON, 500, 429,
dropped connection, stall) complete their plan; a server that answers JSON instead of a
stream is not retried (it is a misconfigured endpoint, not a hiccup): that session ends
FAILED with the reason and, started again, completes without repeating anything; an engine
that keeps failing while it still answers its model list ends the session FAILED with the
reason (not ENGINE_WAIT, not a crash); the app keeps running."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from tests.faults.conftest import (
    Planner,
    call,
    check_transcript,
    prove_alive,
    running_fleet,
    settle,
    spec,
)
from tests.helpers.prerequisites import needs_bwrap
from tests.helpers.scripted_server import Fault, Reply, ScriptedServer
from workstation.core.session_state import SessionState as S

FAULTS = {
    "truncated": Fault.truncated_json(after_chunks=3),
    "content-type": Fault.wrong_content_type(),
    "http500": Fault.http(500, "scripted engine crash"),
    "http429": Fault.http(429, "too many requests"),
    "disconnect": Fault.disconnect(after_chunks=2),
    "stall": Fault.stall(seconds=8.0, after_chunks=2),  # the client reads with a 3 s timeout
}
WORK = [
    call("write_to_file", path="notes.txt", content="first line\n"),
    call("execute_command", command="cat notes.txt && echo ran >> ran.log"),
    call("read_file", path="notes.txt"),
]


def faulty_plan(injected: set[str]):
    """The WORK plan; at step 1 the session's fault comes once, then the real answer."""

    def plan(step: int, body: dict[str, Any]) -> Reply | Fault:
        from tests.faults.conftest import DONE, tag_of

        tag = tag_of(body)
        if step == 1 and tag in FAULTS and tag not in injected:
            injected.add(tag)
            return FAULTS[tag]
        return WORK[step] if step < len(WORK) else DONE

    return plan


@needs_bwrap  # its agents run commands unattended: only inside the sandbox
async def test_each_malformed_answer_is_retried_and_nothing_is_lost(
        tmp_path: Path, git_repo: Path, http: httpx.AsyncClient) -> None:
    injected: set[str] = set()
    planner = Planner({"work": faulty_plan(injected)})
    async with ScriptedServer(responder=planner) as server, \
            running_fleet(tmp_path / "data", server.endpoint, http) as fleet:
        made = {}
        for tag in FAULTS:
            s = await fleet.create_session(spec(git_repo, "work", tag=tag), start=True)
            made[tag] = s.session_id
        await settle(fleet)
        assert injected == set(FAULTS)
        stopped = fleet.summary(made["content-type"])
        assert stopped.state is S.FAILED and "content-type application/json" in stopped.error
        await check_transcript(fleet, stopped.session_id)
        await fleet.start_session(stopped.session_id)  # the user starts it again
        await settle(fleet)
        for tag, sid in made.items():
            summary = fleet.summary(sid)
            assert summary.state is S.DONE, f"{tag}: {summary.state} {summary.error}"
            facts = await check_transcript(fleet, sid)
            assert [facts.tool_calls[c] for c in facts.tool_calls] == \
                ["write_to_file", "execute_command", "read_file", "attempt_completion"], tag
            assert all(status == "ok" for status in facts.finished.values()), tag
            # the command ran once although its turn's neighbour failed
            assert (Path(summary.worktree_path) / "ran.log").read_text() == "ran\n", tag
        await prove_alive(fleet, git_repo)


async def test_an_engine_that_keeps_failing_ends_the_session_plainly(
        tmp_path: Path, git_repo: Path, http: httpx.AsyncClient) -> None:
    planner = Planner({"broken": lambda step, body: Fault.http(500, "model crashed")})
    async with ScriptedServer(responder=planner) as server, \
            running_fleet(tmp_path / "data", server.endpoint, http) as fleet:
        s = await fleet.create_session(spec(git_repo, "broken"), start=True)
        await settle(fleet)
        summary = fleet.summary(s.session_id)
        assert summary.state is S.FAILED and "500" in summary.error and "model crashed" in summary.error
        facts = await check_transcript(fleet, s.session_id)
        assert facts.tool_calls == {} and [m["role"] for m in facts.messages] == ["system", "user"]
        await prove_alive(fleet, git_repo)
