"""``workstation engine serve`` runs the app's own engine host: a saved user profile (what a
tune keeps, ``tuned-default``) as well as a preset, and Ctrl-C stops what it started."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.helpers.prerequisites import installed_engine, prepared_model


def _wait_for(proc: subprocess.Popen[str], lines: list[str], text: str, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    assert proc.stdout is not None
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            if proc.poll() is not None:
                return False
            continue
        lines.append(line)
        if text in line:
            return True
    return False


@pytest.mark.engine
def test_serve_runs_a_saved_profile_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    from workstation.config import load_settings
    from workstation.core.profiles import Profile
    from workstation.tuning.store import TuningStore

    settings = load_settings()
    engine = installed_engine(settings)
    model = prepared_model(settings, "tiny")
    data = tmp_path / "data"
    # a profile of the user's own, as `workstation tune` saves one: unknown to the launcher's presets
    TuningStore(data).save_profile(
        Profile("tuned-default", "tuned here", args=("--max-num-seqs", "4"), parent="default"))
    env = {**os.environ, "WORKSTATION_DATA_DIR": str(data), "WORKSTATION_ENGINE__PYTHON": str(engine.python),
           "PYTHONUNBUFFERED": "1"}
    env = {k: v for k, v in env.items() if not k.startswith("WORKSTATION_ENGINE__") or k.endswith("__PYTHON")}
    proc = subprocess.Popen([sys.executable, "-m", "workstation", "engine", "serve", "--model", str(model.local_dir),
                             "--profile", "tuned-default"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    lines: list[str] = []
    try:
        assert _wait_for(proc, lines, "Ctrl-C stops", 300), "".join(lines[-60:])
        served = next(line for line in lines if line.startswith("serving "))
        base = served.split(" at ", 1)[1].split()[0].removesuffix("/v1")
        assert httpx.get(f"{base}/health", timeout=10).status_code == 200
        assert any("profile 'tuned-default'" in line for line in lines), "".join(lines[-30:])
        proc.send_signal(signal.SIGINT)
        assert _wait_for(proc, lines, "engine stopped", 60), "".join(lines[-30:])
        assert proc.wait(timeout=30) == 0
        with pytest.raises(httpx.HTTPError):
            httpx.get(f"{base}/health", timeout=3)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
