"""SIGKILL a headless fleet run mid-run, start it again: histories intact, no turn twice,
no tool run twice, every session finishes."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import sys
from pathlib import Path

import pytest

from tests.fleet.agent_script import make_responder
from tests.helpers.scripted_server import ScriptedServer

ROOT = Path(__file__).resolve().parents[2]


def _histories(store: Path) -> dict[str, list[tuple[int, str]]]:
    """session name -> [(index, message_json)] from the stored MessageAppended events."""
    conn = sqlite3.connect(store)
    try:
        names = dict(conn.execute("SELECT session_id, name FROM sessions"))
        out: dict[str, list[tuple[int, str]]] = {n: [] for n in names.values()}
        for sid, payload in conn.execute(
            "SELECT session_id, payload FROM events WHERE kind='MessageAppended' ORDER BY session_id, seq"
        ):
            data = json.loads(payload)
            out[names[sid]].append((data["index"], data["message_json"]))
        return out
    finally:
        conn.close()


def _finished(history: list[tuple[int, str]]) -> bool:
    """The session's stored history holds its ``attempt_completion``."""
    for _, message_json in history:
        message = json.loads(message_json)
        for call in message.get("tool_calls") or () if message.get("role") == "assistant" else ():
            if (call.get("function") or {}).get("name") == "attempt_completion":
                return True
    return False


async def _cli(data: Path, *args: str) -> asyncio.subprocess.Process:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "workstation", "--data-dir", str(data), "run", *args,
        "--refresh-s", "0.5", cwd=str(ROOT), env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )


def _stored_any(data: Path) -> bool:
    db = data / "store.sqlite3"
    try:
        return db.exists() and any(_histories(db).values())
    except Exception:  # noqa: BLE001 - the store may be mid-creation
        return False


@pytest.mark.parametrize("kill_after_requests", [4, 8])
async def test_sigkill_mid_run_then_resume(tmp_path: Path, git_repo: Path, kill_after_requests: int) -> None:
    data = tmp_path / "data"
    async with ScriptedServer(responder=make_responder(delay_s=0.01, chunk_chars=2)) as server:
        common = ["--endpoint", server.base_url, "--api-key", server.api_key, "--model", server.model,
                  "--auto-approve", "all"]
        proc = await _cli(data, "--repo", str(git_repo), "--sessions", "3",
                          "--task", "Write your token into note.txt. token=t0", *common)
        try:
            async with asyncio.timeout(60):
                # mid-run means after some history is stored: the first requests include
                # the prefix-cache priming, and a kill before any store flush saw nothing
                while len(server.requests) < kill_after_requests or not _stored_any(data):
                    if proc.returncode is not None:
                        out = await proc.stdout.read() if proc.stdout else b""
                        raise AssertionError(f"run ended early: {out.decode()[-2000:]}")
                    await asyncio.sleep(0.01)
        finally:
            proc.send_signal(signal.SIGKILL)
            await proc.wait()
        assert proc.returncode == -signal.SIGKILL
        before = _histories(data / "store.sqlite3")
        assert len(before) == 3 and any(before.values())
        unfinished = [name for name, history in before.items() if not _finished(history)]
        assert unfinished, "every session had finished before the kill: the resume would prove nothing"

        proc2 = await _cli(data, "--resume", "--json", *common)
        out, _ = await asyncio.wait_for(proc2.communicate(), 120)
        text = out.decode()
        assert proc2.returncode == 0, text[-3000:]
        summary = json.loads(text.strip().splitlines()[-1])
        assert summary["sessions"] == 3 and summary["states"] == {"done": 3}

    after = _histories(data / "store.sqlite3")
    for name in unfinished:  # what the kill interrupted went on from where it was
        assert _finished(after[name]) and len(after[name]) > len(before[name]), f"{name} was not resumed"
    for name, history in after.items():
        indexes = [i for i, _ in history]
        assert indexes == list(range(len(indexes))), f"{name}: a turn was stored twice or lost"
        assert history[: len(before[name])] == before[name], f"{name}: history changed on resume"
        messages = [json.loads(m) for _, m in history]
        calls = [c["id"] for m in messages if m["role"] == "assistant" for c in m.get("tool_calls") or []]
        results = [m["tool_call_id"] for m in messages if m["role"] == "tool"]
        assert sorted(calls) == sorted(results), f"{name}: a tool call without exactly one result"
    conn = sqlite3.connect(data / "store.sqlite3")
    trees = [Path(p) for (p,) in conn.execute("SELECT worktree_path FROM sessions")]
    conn.close()
    for tree in trees:
        log = tree / "runs.log"
        assert not log.exists() or log.read_text() in ("ran\n",), "a command ran twice"
        assert (tree / "note.txt").read_text() == "t0\n"
