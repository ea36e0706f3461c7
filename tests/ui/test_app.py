"""The composition root as a person starts it: `workstation` opens the window on an
external endpoint, and Ctrl-C / SIGTERM shut it down in stages with exit status 0."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers.scripted_server import ScriptedServer

pytestmark = [pytest.mark.gui, pytest.mark.slow]


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_window_stops_cleanly_on_signal(tmp_path: Path, signum: int) -> None:
    with ScriptedServer().in_thread() as server:
        env = {
            **os.environ,
            "QT_QPA_PLATFORM": "offscreen",
            "WORKSTATION_DATA_DIR": str(tmp_path / "data"),
            "WORKSTATION_ENGINE__EXTERNAL_URL": server.base_url,
            "WORKSTATION_ENGINE__EXTERNAL_API_KEY": server.endpoint.api_key,
            "WORKSTATION_ENGINE__EXTERNAL_MODEL": server.endpoint.model,
        }
        log = tmp_path / "data" / "logs" / "workstation.log"
        proc = subprocess.Popen([sys.executable, "-m", "workstation"], env=env, cwd=tmp_path,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            deadline = time.monotonic() + 90
            while not (log.exists() and "fleet ready" in log.read_text()):
                assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
                assert time.monotonic() < deadline, "the window never got ready"
                time.sleep(0.2)
            proc.send_signal(signum)
            code = proc.wait(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        output = proc.stdout.read() if proc.stdout else ""
        assert code == 0, output
        text = log.read_text()
        assert f"shutdown requested (signal {int(signum)})" in text
        assert "Traceback" not in output
