"""``workstation demo`` end to end, as a user runs it (subprocesses, real engine)."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.gui, pytest.mark.engine, pytest.mark.slow]


def _demo(tmp_path, endpoint, *args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    env = {**os.environ, "WORKSTATION_DATA_DIR": str(tmp_path / "data"), "QT_QPA_PLATFORM": "offscreen"}
    return subprocess.run(
        [sys.executable, "-m", "workstation", "demo", "--headless", "--endpoint", endpoint.base_url,
         "--api-key", endpoint.api_key, *args],
        capture_output=True, text=True, timeout=timeout, env=env,
    )


def test_headless_demo_records_a_playable_video_of_the_sessions(tmp_path, smollm2_engine):
    from workstation.ui.recorder import probe_video

    out = tmp_path / "demo.mp4"
    result = _demo(tmp_path, smollm2_engine, "--sessions", "4", "--record", str(out), "--duration", "6")
    assert result.returncode == 0, result.stderr[-2000:]
    summary = probe_video(out)
    assert abs(summary.frames - 6 * 30) <= 1
    assert (summary.width_px, summary.height_px) == (1280, 720)
    assert "recorded" in result.stderr


def test_headless_fleet_demo_prints_a_table_and_a_summary(tmp_path, smollm2_engine):
    # long enough for a first turn to end on a slow host: on a 2-core CPU without AVX2 the first
    # turns ended ~40 s after the sessions started (none within 15 s or 45 s)
    result = _demo(tmp_path, smollm2_engine, "--sessions", "2", "--duration", "90")
    assert result.returncode == 0, result.stderr[-2000:]
    last = result.stdout.strip().splitlines()[-1]
    assert '"sessions":2' in last and '"completion_tokens"' in last
    assert "fix-" in result.stdout  # session names from the demo manifest
    again = _demo(tmp_path, smollm2_engine, "--sessions", "2", "--duration", "5")  # tokens or not: 0 or 1
    assert again.returncode in (0, 1) and "Traceback" not in again.stderr, again.stderr[-2000:]
    assert "removed the 2 session(s) an earlier demo run made" in again.stderr
    with sqlite3.connect(tmp_path / "data" / "store.sqlite3") as db:
        rows = sorted(db.execute("SELECT name, worktree_path FROM sessions"))
    names = [name for name, _ in rows]
    assert len(names) == 2 and not any(n.endswith("-2") for n in names)  # replaced, not 2 more
    # the real agent's own work (stopped at the duration, maybe mid-command) is not the user's;
    # a file the user changes after it is
    mine, tree = rows[0]
    with open(os.path.join(tree, "README.md"), "a", encoding="utf-8") as readme:
        readme.write("A note of mine.\n")
    third = _demo(tmp_path, smollm2_engine, "--sessions", "2", "--duration", "5")
    assert third.returncode in (0, 1) and "Traceback" not in third.stderr, third.stderr[-2000:]
    assert (f"kept 1 demo session(s) you worked in, as yours now ({mine}); "
            "replaced the 1 other(s) an earlier demo run made") in third.stderr
    assert f"  {mine}: 1 file changed in its worktree after its agent's last step (README.md)" in third.stderr
    with sqlite3.connect(tmp_path / "data" / "store.sqlite3") as db:
        kept = db.execute("SELECT worktree_path FROM sessions WHERE name=?", (mine,)).fetchall()
        assert db.execute("SELECT COUNT(*) FROM sessions").fetchone()[0] == 3
    assert kept == [(tree,)] and open(os.path.join(tree, "README.md"), encoding="utf-8").read().endswith("mine.\n")


def test_recording_into_a_missing_folder_is_a_clear_error(tmp_path, smollm2_engine):
    result = _demo(tmp_path, smollm2_engine, "--sessions", "2", "--record", str(tmp_path / "no" / "x.mp4"),
                   "--duration", "5", timeout=60)
    assert result.returncode == 2
    assert "does not exist" in result.stderr and "Traceback" not in result.stderr
