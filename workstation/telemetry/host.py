"""Host meters through psutil: CPU, memory, and the app's and engine's process trees.

Blocking (psutil reads /proc): the host sampler calls :class:`HostReader` on its
own thread. Per-process CPU needs two readings, so the reader keeps the
``psutil.Process`` objects it has seen; a process's first reading counts 0 %.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

import psutil


@dataclass(frozen=True, slots=True)
class ProcessTreeUsage:
    """A process and all its descendants, summed."""

    root_pid: int
    processes: int
    cpu_pct: float
    """Percent of ONE core (a tree using two full cores reads 200)."""
    rss_bytes: int
    alive: bool = True

    def to_dict(self) -> dict[str, Any]:
        return {
            "root_pid": self.root_pid,
            "alive": self.alive,
            "processes": self.processes,
            "cpu_pct": round(self.cpu_pct, 1),
            "rss_bytes": self.rss_bytes,
        }


@dataclass(frozen=True, slots=True)
class HostSample:
    t_mono: float
    t_wall: float
    cpu_pct: float
    """Whole machine, 0–100 (all cores)."""
    cpu_count: int
    per_cpu_pct: tuple[float, ...]
    load_avg_1m: float | None
    memory_used_bytes: int
    memory_total_bytes: int
    memory_available_bytes: int
    swap_used_bytes: int
    app: ProcessTreeUsage | None
    engine: ProcessTreeUsage | None
    """None when no engine process is known (external endpoint, or not started)."""
    read_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "t_wall": self.t_wall,
            "cpu_pct": round(self.cpu_pct, 1),
            "cpu_count": self.cpu_count,
            "per_cpu_pct": [round(v, 1) for v in self.per_cpu_pct],
            "load_avg_1m": self.load_avg_1m if self.load_avg_1m is not None else "n/a",
            "memory_used_bytes": self.memory_used_bytes,
            "memory_total_bytes": self.memory_total_bytes,
            "memory_available_bytes": self.memory_available_bytes,
            "swap_used_bytes": self.swap_used_bytes,
            "app": self.app.to_dict() if self.app else "n/a",
            "engine": self.engine.to_dict() if self.engine else "no engine process",
            "read_ms": round(self.read_s * 1e3, 3),
        }


def process_tree(root_pid: int) -> list[psutil.Process]:
    """The root and its descendants (empty when the root is gone)."""
    try:
        root = psutil.Process(root_pid)
        return [root, *root.children(recursive=True)]
    except psutil.Error:
        return []


class HostReader:
    """Reads host-wide and per-tree usage. One thread calls it."""

    def __init__(self, app_pid: int | None = None) -> None:
        self.app_pid = os.getpid() if app_pid is None else app_pid
        self._procs: dict[int, psutil.Process] = {}
        psutil.cpu_percent(percpu=True)  # prime the machine-wide counters

    def _tree_usage(self, root_pid: int) -> ProcessTreeUsage:
        tree = process_tree(root_pid)
        if not tree:
            return ProcessTreeUsage(root_pid=root_pid, processes=0, cpu_pct=0.0, rss_bytes=0, alive=False)
        cpu = 0.0
        rss = 0
        count = 0
        for fresh in tree:
            proc = self._procs.get(fresh.pid)
            if proc is None or not _same_process(proc, fresh):
                proc = fresh
                self._procs[fresh.pid] = proc
            try:
                with proc.oneshot():
                    cpu += proc.cpu_percent(None)
                    rss += proc.memory_info().rss
                count += 1
            except psutil.Error:
                self._procs.pop(fresh.pid, None)
        return ProcessTreeUsage(root_pid=root_pid, processes=count, cpu_pct=cpu, rss_bytes=rss)

    def read(self, engine_pid: int | None = None) -> HostSample:
        t0 = time.perf_counter()
        t_mono, t_wall = time.monotonic(), time.time()
        per_cpu = tuple(psutil.cpu_percent(percpu=True))
        vm = psutil.virtual_memory()
        try:
            swap_used = psutil.swap_memory().used
        except (OSError, RuntimeError):
            swap_used = 0
        try:
            load1 = os.getloadavg()[0]
        except OSError:
            load1 = None
        app = self._tree_usage(self.app_pid)
        engine = self._tree_usage(engine_pid) if engine_pid else None
        self._forget_dead()
        return HostSample(
            t_mono=t_mono,
            t_wall=t_wall,
            cpu_pct=sum(per_cpu) / len(per_cpu) if per_cpu else 0.0,
            cpu_count=len(per_cpu),
            per_cpu_pct=per_cpu,
            load_avg_1m=load1,
            memory_used_bytes=vm.total - vm.available,
            memory_total_bytes=vm.total,
            memory_available_bytes=vm.available,
            swap_used_bytes=swap_used,
            app=app,
            engine=engine,
            read_s=time.perf_counter() - t0,
        )

    def _forget_dead(self) -> None:
        if len(self._procs) < 256:
            return
        for pid, proc in list(self._procs.items()):
            if not proc.is_running():
                del self._procs[pid]


def _same_process(a: psutil.Process, b: psutil.Process) -> bool:
    try:
        return a.create_time() == b.create_time()
    except psutil.Error:
        return False
