from __future__ import annotations

import os
import signal
import subprocess
import time

import psutil

from workstation.telemetry.host import HostReader, process_tree


def test_host_sample_has_machine_and_app_tree() -> None:
    reader = HostReader()
    reader.read()
    s = reader.read()
    assert s.cpu_count == psutil.cpu_count() and len(s.per_cpu_pct) == s.cpu_count
    assert 0.0 <= s.cpu_pct <= 100.0
    assert 0 < s.memory_used_bytes < s.memory_total_bytes
    assert s.app is not None and s.app.root_pid == os.getpid() and s.app.alive
    assert s.app.processes >= 1 and s.app.rss_bytes > 0
    assert s.engine is None
    out = s.to_dict()
    assert out["engine"] == "no engine process"


def test_engine_tree_is_summed_and_a_dead_root_is_reported() -> None:
    proc = subprocess.Popen(["sh", "-c", "sleep 60 & sleep 60 & wait"], start_new_session=True)
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and len(process_tree(proc.pid)) < 3:
            time.sleep(0.01)
        reader = HostReader()
        s = reader.read(engine_pid=proc.pid)
        assert s.engine is not None and s.engine.alive
        assert s.engine.processes == 3  # sh + two sleeps
        assert s.engine.rss_bytes > 0
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)
    gone = reader.read(engine_pid=proc.pid)
    assert gone.engine is not None and not gone.engine.alive and gone.engine.processes == 0
