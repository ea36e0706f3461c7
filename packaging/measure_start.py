"""Start-up time of the bundle versus ``python -m workstation``, warm and cold.

    .venv/bin/python packaging/measure_start.py [--bundle dist/workstation] [--runs 5]

"Cold" evicts the files each command reads from the page cache first (``posix_fadvise``
DONTNEED on the bundle folder, or on the venv and the interpreter's standard library), so
the command reads them from disk again, as after a reboot; no root needed and nothing else
is evicted. "Warm" runs right after a discarded first run. Each command runs with a
throw-away data dir and QT_QPA_PLATFORM=offscreen. Prints a table and one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def evict(paths: list[Path]) -> int:
    """Drop these trees' clean pages from the page cache; returns the number of files."""
    count = 0
    for top in paths:
        for dirpath, _dirs, files in os.walk(top):
            for name in files:
                path = os.path.join(dirpath, name)
                try:
                    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
                except OSError:
                    continue
                try:
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                    count += 1
                finally:
                    os.close(fd)
    return count


def time_run(argv: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    out = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300)
    elapsed = time.perf_counter() - started
    if out.returncode != 0:
        raise SystemExit(f"{argv} failed: {out.stderr[-500:]}")
    return elapsed


def measure(argv: list[str], files: list[Path], runs: int, env: dict[str, str]) -> dict[str, float]:
    cold = []
    for _ in range(runs):
        evict(files)
        cold.append(time_run(argv, env))
    time_run(argv, env)
    warm = [time_run(argv, env) for _ in range(runs)]
    return {"cold_s": round(statistics.median(cold), 3), "warm_s": round(statistics.median(warm), 3)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bundle", type=Path, default=ROOT / "dist" / "workstation")
    parser.add_argument("--python", type=Path, default=Path(sys.executable),
                        help="interpreter of the venv workstation is installed in")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args(argv)
    executable = args.bundle / "workstation"
    if not executable.is_file():
        print(f"no bundle at {args.bundle}: run packaging/build_bundle.py", file=sys.stderr)
        return 2
    python_files = [Path(sysconfig.get_paths()["purelib"]), Path(sysconfig.get_paths()["stdlib"]),
                    ROOT / "workstation"]
    results = {}
    with tempfile.TemporaryDirectory(prefix="ws-start-") as data_dir:
        env = {**os.environ, "WORKSTATION_DATA_DIR": data_dir, "QT_QPA_PLATFORM": "offscreen"}
        for verb in (["--version"], ["doctor", "--json"]):
            label = " ".join(verb)
            results[f"bundle {label}"] = measure([str(executable), *verb], [args.bundle], args.runs, env)
            results[f"python -m {label}"] = measure(
                [str(args.python), "-m", "workstation", *verb], python_files, args.runs, env
            )
    print(f"{'command':<34}{'cold (s)':>10}{'warm (s)':>10}")
    for name, row in results.items():
        print(f"{name:<34}{row['cold_s']:>10.3f}{row['warm_s']:>10.3f}")
    print(json.dumps({
        "runs": args.runs,
        "bundle_version_cold_s": results["bundle --version"]["cold_s"],
        "bundle_version_warm_s": results["bundle --version"]["warm_s"],
        "python_m_version_cold_s": results["python -m --version"]["cold_s"],
        "python_m_version_warm_s": results["python -m --version"]["warm_s"],
        "bundle_doctor_cold_s": results["bundle doctor --json"]["cold_s"],
        "python_m_doctor_cold_s": results["python -m doctor --json"]["cold_s"],
    }))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
