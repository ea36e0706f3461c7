"""execute_command's runner: output, caps, timeouts and cancellation kill the whole group."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import psutil
import pytest

from workstation.agent.commands import OutputCap, run_command, scrubbed_environment


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


async def _wait_gone(pid: int, timeout_s: float = 5.0) -> bool:
    for _ in range(int(timeout_s / 0.05)):
        if not _alive(pid):
            return True
        await asyncio.sleep(0.05)
    return False


async def test_runs_in_cwd_merges_output_and_reports_exit(tmp_path: Path) -> None:
    seen: list[str] = []
    result = await run_command("pwd; echo out; echo err >&2; exit 3", str(tmp_path), timeout_s=10,
                               sandbox=None, max_output_chars=1000, on_output=seen.append)
    assert result.exit_code == 3 and not result.timed_out
    assert str(tmp_path) in result.output and "out" in result.output and "err" in result.output
    assert "".join(seen) == result.output
    assert result.for_model("x", 10).startswith("Exit code: 3\nOutput:\n")


async def test_no_stdin(tmp_path: Path) -> None:
    result = await run_command("cat; echo after", str(tmp_path), timeout_s=5, sandbox=None, max_output_chars=1000)
    assert result.exit_code == 0 and "after" in result.output


async def test_timeout_kills_the_whole_process_group(tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"
    result = await run_command(f"sleep 60 & echo $! > {pidfile}; echo started; wait", str(tmp_path),
                               timeout_s=1.0, sandbox=None, max_output_chars=1000, kill_grace_s=0.5)
    assert result.timed_out and result.exit_code is None and "started" in result.output
    assert "timed out after 1 s" in result.for_model("x", 1.0)
    assert await _wait_gone(int(pidfile.read_text()))


async def test_cancellation_kills_the_group(tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"
    task = asyncio.create_task(run_command(f"sleep 60 & echo $! > {pidfile}; wait", str(tmp_path),
                                           timeout_s=60, sandbox=None, max_output_chars=1000, kill_grace_s=0.5))
    for _ in range(100):
        if pidfile.exists() and pidfile.read_text().strip():
            break
        await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await _wait_gone(int(pidfile.read_text()))


async def test_background_children_do_not_hold_the_call(tmp_path: Path) -> None:
    pidfile = tmp_path / "bg.pid"
    result = await run_command(f"sleep 60 & echo $! > {pidfile}; echo quick", str(tmp_path),
                               timeout_s=30, sandbox=None, max_output_chars=1000)
    assert result.exit_code == 0 and result.duration_s < 20
    assert await _wait_gone(int(pidfile.read_text()))


async def test_output_is_capped_head_and_tail(tmp_path: Path) -> None:
    result = await run_command("seq 1 20000", str(tmp_path), timeout_s=20, sandbox=None, max_output_chars=300)
    assert result.output.startswith("1\n2\n") and result.output.rstrip().endswith("20000")
    assert "characters omitted" in result.output and len(result.output) < 400
    assert result.total_chars > 100_000


def test_output_cap_small_stream_untouched() -> None:
    cap = OutputCap(100)
    cap.add("hello ")
    cap.add("world")
    assert cap.text() == "hello world"


async def test_secrets_are_scrubbed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-123")
    monkeypatch.setenv("MY_SERVICE_TOKEN", "tok")
    monkeypatch.setenv("DB_PASSWORD", "pw")
    monkeypatch.setenv("WORKSTATION_TEST_ENGINE_KEY", "devkey")
    monkeypatch.setenv("HARMLESS", "yes")
    env = scrubbed_environment()
    assert "OPENAI_API_KEY" not in env and "MY_SERVICE_TOKEN" not in env and "DB_PASSWORD" not in env
    assert "WORKSTATION_TEST_ENGINE_KEY" not in env
    assert env["HARMLESS"] == "yes" and env["PATH"] == os.environ["PATH"] and env["GIT_TERMINAL_PROMPT"] == "0"
    result = await run_command("env", str(tmp_path), timeout_s=10, sandbox=None, max_output_chars=100_000)
    assert "sk-123" not in result.output and "HARMLESS=yes" in result.output
