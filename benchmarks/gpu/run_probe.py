"""What the host and the GPU did during one benchmark run: the evidence for a run that is slower.

The evening's H200 run found 1-stream runs of both profiles in two modes (~370 and 430-550
tok/s) with the same flags at batch 1. The candidates are the host (which core the engine's
processes ran on, how much CPU each took per token) and the GPU (clock state at batch 1). A
:class:`RunProbe` around a run records both, so the next run can tell them apart:

    probe = RunProbe(engine_root_pid)
    probe.start()
    ... one run ...
    facts = probe.stop(tokens=n)   # {"sm_clock_mhz_mean", "gpu_util_pct_mean", "processes": [...]}

The GPU is sampled by the app's own NVML reader on a thread at 20 Hz; the processes are the
engine's tree (psutil) plus this process (the client), each with CPU seconds, µs per token and
the CPUs it was seen on. Where NVML or a process is missing, its fields are ``None``.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Sequence
from typing import Any

import psutil

from workstation.telemetry.host import process_tree

SAMPLE_S = 0.05


def _tree(roots: Sequence[int]) -> list[psutil.Process]:
    return [psutil.Process(), *(p for root in roots for p in process_tree(root))]


def _cpu_s(proc: psutil.Process) -> float | None:
    try:
        t = proc.cpu_times()
        return t.user + t.system
    except psutil.Error:
        return None


class RunProbe:
    """Samples the GPU's clock and utilisation and the engine processes' CPUs during one run."""

    def __init__(self, engine_root_pid: int | None | Sequence[int | None], *, reader: Any | None = None) -> None:
        """``engine_root_pid``: the engine's API-server pid, or each engine's where a trial runs several."""
        roots = engine_root_pid if isinstance(engine_root_pid, Sequence) else [engine_root_pid]
        self.engine_root_pids = [pid for pid in roots if pid is not None]
        self._reader = reader
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._clocks: list[int] = []
        self._utils: list[int] = []
        self._cpus: dict[int, set[int]] = {}
        self._procs: list[psutil.Process] = []
        self._cpu0: dict[int, float | None] = {}
        self._t0 = 0.0

    def start(self) -> None:
        self._procs = _tree(self.engine_root_pids)
        self._cpu0 = {p.pid: _cpu_s(p) for p in self._procs}
        self._t0 = time.monotonic()
        self._stop.clear()
        self._thread = threading.Thread(target=self._sample, name="run-probe", daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._stop.is_set():
            if self._reader is not None:
                try:
                    dev = self._reader.read().devices[0]
                    if dev.sm_clock_mhz is not None:
                        self._clocks.append(dev.sm_clock_mhz)
                    if dev.gpu_util_pct is not None:
                        self._utils.append(dev.gpu_util_pct)
                except Exception:  # noqa: BLE001 - a probe never breaks the run it watches
                    pass
            for p in self._procs:
                try:
                    self._cpus.setdefault(p.pid, set()).add(p.cpu_num())
                except psutil.Error:
                    continue
            self._stop.wait(SAMPLE_S)

    def stop(self, *, tokens: int) -> dict[str, Any]:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2.0)
        wall = time.monotonic() - self._t0
        processes = []
        for p in self._procs:
            before, after = self._cpu0.get(p.pid), _cpu_s(p)
            used = None if before is None or after is None else after - before
            try:
                name = p.name()
            except psutil.Error:
                name = "?"
            processes.append({
                "pid": p.pid, "name": name, "client": p.pid == psutil.Process().pid,
                "cpu_s": None if used is None else round(used, 3),
                "cpu_pct": None if used is None or wall <= 0 else round(100 * used / wall, 1),
                "us_per_token": None if used is None or not tokens else round(1e6 * used / tokens, 1),
                "cpus_seen": sorted(self._cpus.get(p.pid, ())),
            })
        return {
            "wall_s": round(wall, 3),
            "sm_clock_mhz_mean": round(statistics.fmean(self._clocks), 1) if self._clocks else None,
            "sm_clock_mhz_min": min(self._clocks) if self._clocks else None,
            "gpu_util_pct_mean": round(statistics.fmean(self._utils), 1) if self._utils else None,
            "processes": [p for p in processes if p["cpu_s"] is None or p["cpu_s"] > 0.005],
        }
