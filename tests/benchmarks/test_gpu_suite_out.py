"""What the GPU suite brings back in the device call's $OUT (benchmarks/gpu/suite.py's copy_out)."""

import importlib.util
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _suite():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("gpu_suite", ROOT / "benchmarks" / "gpu" / "suite.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_suite"] = module
    spec.loader.exec_module(module)
    return module


def test_the_results_the_captured_shapes_and_the_log_tails_come_back(settings, tmp_path):
    from workstation.core.requests import RequestRecord
    from workstation.core.traffic import shape_from_records
    from workstation.tuning.store import TuningStore

    suite = _suite()
    record = RequestRecord("e", "m", "a", 0, 0.1, 1.0, 600, 24, 0, 0.1, True, constraint="regex",
                           constraint_chars=140)
    shape = shape_from_records("gpu-fleet-32", [record])
    TuningStore(settings.data_dir).save_shape(shape)
    log = settings.logs_dir / "gpu-fleet" / "engine.log"
    log.parent.mkdir(parents=True)
    log.write_text("\n".join(f"line {i}" for i in range(100)))
    out = tmp_path / "out"
    results = suite.Results(tmp_path / "work" / "gpu-results.json", mirror=out / "gpu-results.json")
    results.data["fleet_run"] = {"sessions": 32}
    suite.copy_out(results, out, settings.logs_dir)
    assert json.loads((out / "gpu-results.json").read_text())["fleet_run"] == {"sessions": 32}
    # the whole shape, loadable again by path (`--shape`) on the next machine
    back = TuningStore(tmp_path / "elsewhere").load_shape(str(out / "shape-gpu-fleet-32.json"))
    assert back.name == "gpu-fleet-32" and back.to_dict() == shape.to_dict()
    tails = (out / "engine-log-tails.txt").read_text()
    assert "gpu-fleet/engine.log" in tails and "line 99" in tails and "line 39" not in tails
