"""Child process of ``test_store_write_failure``: a fleet whose SQLite writes start failing.

``python tests/faults/store_fsize_child.py WORKDIR REPO``: starts a scripted engine and a
fleet of 4 real agents in WORKDIR/data working on REPO, then lowers this process's
``RLIMIT_FSIZE`` to the store's current size (SIGXFSZ ignored, so writes fail with EFBIG
the way a full disk fails them), lets the sessions work on for a while, raises the limit
again, waits for the sessions to finish, and checks the transcripts — then reopens the
store in a second fleet to check that what is on disk is the same. Prints one JSON line.
"""

from __future__ import annotations

import asyncio
import json
import logging
import resource
import signal
import sys
from pathlib import Path

from tests.faults.conftest import Planner, call, check_transcript, running_fleet, settle, spec, until
from tests.helpers.scripted_server import Reply, ScriptedServer
from workstation.core.errors import UserError
from workstation.core.session_state import SessionState as S
from workstation.engine.http import make_http_client

SESSIONS = 4
STEPS = 8


class Counter(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.failures = 0
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if "store write failed" in text or "cannot be written" in text:
            self.failures += 1
            if len(self.messages) < 3:
                self.messages.append(text[:200])


def plan(step: int, body: dict) -> Reply:
    if step < STEPS:
        if step % 2:
            return Reply(tool_calls=call("execute_command", command=f"echo step {step} >> steps.log").tool_calls,
                         delay_s=0.02)
        return Reply(tool_calls=call("write_to_file", path=f"f{step}.txt", content=f"{step}\n" * 50).tool_calls,
                     delay_s=0.02)
    return call("attempt_completion", result="done")


async def main() -> int:
    workdir, repo = Path(sys.argv[1]), Path(sys.argv[2])
    data = workdir / "data"
    counter = Counter()
    logging.getLogger().addHandler(counter)
    logging.getLogger().setLevel(logging.WARNING)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    http = make_http_client(read_timeout_s=5.0)
    out: dict[str, object] = {}
    async with ScriptedServer(responder=Planner({"store": plan})) as server:
        async with running_fleet(data, server.endpoint, http) as fleet:
            made = [await fleet.create_session(spec(repo, "store", tag=f"s{i}"), start=True)
                    for i in range(SESSIONS)]
            seen: dict[str, int] = {}
            fleet.agent_event.connect(lambda e: seen.__setitem__(e.session_id, seen.get(e.session_id, 0) + 1))
            await until(lambda: len(seen) == SESSIONS and min(seen.values()) > 15, 60, "sessions at work")
            await fleet.store.flush()
            store = data / "store.sqlite3"
            sizes = [p.stat().st_size for p in (store, Path(f"{store}-wal")) if p.exists()]
            late = await fleet.create_session(spec(repo, "store", tag="late"))  # started while full
            await fleet.store.flush()
            resource.setrlimit(resource.RLIMIT_FSIZE, (max(sizes), hard))  # the disk is full now
            await asyncio.sleep(0.5)
            await fleet.start_session(late.session_id)
            try:
                await fleet.create_session(spec(repo, "store", tag="new"))
                out["create_while_full"] = "created"
            except UserError as exc:
                out["create_while_full"] = str(exc)
            await asyncio.sleep(3.0)  # the sessions work on while no write reaches the disk
            out["late_while_limited"] = [fleet.summary(late.session_id).state.value,
                                         fleet.summary(late.session_id).error]
            out["failures_while_limited"] = counter.failures
            out["states_while_limited"] = sorted({x.state.value for x in fleet.sessions()})
            resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))  # room again
            await settle(fleet, 180)
            out["states_after"] = {x.name: [x.state.value, x.error] for x in fleet.sessions()}
            made.append(late)
            for s in made:  # a session that could not be written ended with a plain message:
                if fleet.summary(s.session_id).state is not S.DONE:  # the user starts it again
                    await fleet.start_session(s.session_id)
            await settle(fleet, 180)
            counts = {}
            for s in made:
                summary = fleet.summary(s.session_id)
                facts = await check_transcript(fleet, s.session_id)
                counts[s.session_id] = len(facts.events)
                assert summary.state is S.DONE, f"{summary.name}: {summary.state} {summary.error}"
                assert len(facts.tools("write_to_file")) == STEPS // 2
                assert len(facts.tools("execute_command")) == STEPS // 2
                log = (Path(summary.worktree_path) / "steps.log").read_text().splitlines()
                assert log == [f"step {i}" for i in range(1, STEPS, 2)], log  # each command ran once
            out["events_per_session"] = list(counts.values())
        async with running_fleet(data, server.endpoint, http) as again:  # what is on disk
            for sid, n in counts.items():
                facts = await check_transcript(again, sid)
                assert len(facts.events) == n, f"{sid}: {len(facts.events)} on disk, {n} in memory"
            out["reopened_states"] = sorted({x.state.value for x in again.sessions()})
    await http.aclose()
    out["failure_samples"] = counter.messages
    out["ok"] = True
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
