"""The GPU suite's run probe (benchmarks/gpu/run_probe.py): CPU per process and the GPU clock
of one run, here without a GPU (a stand-in reader) and with a real child process as the engine."""

import importlib.util
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("gpu_run_probe", ROOT / "benchmarks" / "gpu" / "run_probe.py")
run_probe = importlib.util.module_from_spec(_spec)
sys.modules["gpu_run_probe"] = run_probe
_spec.loader.exec_module(run_probe)

SPIN = "import time\nend = time.process_time() + 0.4\nwhile time.process_time() < end: pass\ntime.sleep(5)"


@dataclass
class _Device:
    sm_clock_mhz: int | None
    gpu_util_pct: int | None


class _Reader:
    def __init__(self, clocks):
        self.clocks = list(clocks)

    def read(self):
        clock = self.clocks.pop(0) if len(self.clocks) > 1 else self.clocks[0]
        return type("Snap", (), {"devices": [_Device(clock, 40)]})()


def test_the_engine_trees_cpu_is_counted_per_process_and_per_token():
    engine = subprocess.Popen([sys.executable, "-c", SPIN])
    try:
        probe = run_probe.RunProbe(engine.pid)
        probe.start()
        import time
        time.sleep(0.8)
        facts = probe.stop(tokens=1000)
    finally:
        engine.kill()
        engine.wait()
    spinner = next(p for p in facts["processes"] if p["pid"] == engine.pid)
    assert 0.2 < spinner["cpu_s"] < 0.8
    assert spinner["us_per_token"] == round(1e6 * spinner["cpu_s"] / 1000, 1)
    assert spinner["cpus_seen"] and not spinner["client"]
    assert facts["sm_clock_mhz_mean"] is None and facts["gpu_util_pct_mean"] is None  # no reader, no GPU fields


def test_the_gpu_clock_is_averaged_over_the_run_and_its_lowest_kept():
    probe = run_probe.RunProbe(None, reader=_Reader([1980, 1980, 345]))
    probe.start()
    import time
    time.sleep(0.3)
    facts = probe.stop(tokens=10)
    assert facts["sm_clock_mhz_min"] == 345
    assert 345 < facts["sm_clock_mhz_mean"] < 1980
    assert facts["gpu_util_pct_mean"] == 40.0
    assert [p["client"] for p in facts["processes"]] in ([True], [])  # only this process, when it used CPU
