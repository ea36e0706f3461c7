"""SQLite writes failing (``RLIMIT_FSIZE`` at the store's size, as a full disk fails them),
in a child process so the limit touches nothing else.

Must hold: the fault really happens (the store logs failed writes); sessions go on working
meanwhile (nothing crashes, no tool runs twice); once the disk has room again every queued
event reaches the disk: the transcripts are complete and identical when reopened."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.helpers.prerequisites import needs_bwrap

REPO = Path(__file__).resolve().parents[2]


@needs_bwrap  # its agents run commands unattended: only inside the sandbox
def test_store_writes_fail_then_recover_and_nothing_is_lost(tmp_path: Path, git_repo: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(REPO / "tests" / "faults" / "store_fsize_child.py"), str(tmp_path), str(git_repo)],
        capture_output=True, text=True, timeout=400, cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO), "WORKSTATION_DATA_DIR": str(tmp_path / "data")},
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    assert proc.returncode == 0 and lines, f"child failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    result = json.loads(lines[-1])
    assert result["ok"]
    assert result["failures_while_limited"] > 0, "the write failure was not provoked"
    assert result["reopened_states"] == ["done"]
    assert all(n > 20 for n in result["events_per_session"])
    # a session started, or a session created, while the disk is full: a plain message, no
    # traceback and nothing half-made; started again once there is room, it completes
    assert result["create_while_full"].startswith("the session store") and "disk I/O error" in result["create_while_full"]
    assert result["late_while_limited"][0] == "failed" and "cannot be used" in result["late_while_limited"][1]
    assert all(state == "done" for name, (state, _) in result["states_after"].items() if not name.endswith("late"))
