"""What the GPU suite measures, one function per figure (``suite.py`` runs them part by part).

- the machine: GPU, driver, vLLM, and where the engine's processes can run (``host_topology``);
- ``engine_bench``'s 1 and 16 streams on one or more engines, each run watched by a
  :class:`run_probe.RunProbe`;
- ``nvml_vs_smi`` with the vLLM engine as the GPU's user;
- ``fleet_run`` with its traffic shape captured for the tuner, and the tuner's agent check on
  the tuning round's speculating engines (their drafts' acceptance on what agents really write)
  and its trials of several engines (a real fleet's tok/s on them).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import os
import platform
import statistics
import sys
import threading
import time
from pathlib import Path
from types import ModuleType
from typing import Any

BENCH = Path(__file__).resolve().parents[1]
REPO = BENCH.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # run_probe beside this file

from workstation.engine.chat_client import ChatClient  # noqa: E402
from workstation.engine.launcher import EngineLauncher  # noqa: E402

GIB = 1 << 30

def safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "-" for c in name)


def _load(name: str) -> ModuleType:
    """One of the project's benchmarks as a module (they live outside the package)."""
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    assert spec and spec.loader
    if spec.name in sys.modules:
        return sys.modules[spec.name]
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


def say(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)



# --------------------------------------------------------------------------- the machine
def machine_facts(engine_version: str) -> dict[str, Any]:
    from workstation.telemetry.nvml import GpuState, NvmlReader

    reader = NvmlReader()
    gpu: dict[str, Any] = {}
    driver = None
    if reader.open() is GpuState.OK:
        snap = reader.read()
        driver = snap.driver_version
        devices = snap.devices
        gpu = {"name": devices[0].name, "count": len(devices),
               "memory_total_gib": round((devices[0].memory_total_bytes or 0) / GIB, 1)}
        reader.close()
    return {"date": time.strftime("%Y-%m-%d"), "gpu": gpu, "driver": driver, "vllm": engine_version,
            "host": {"cpu_count": os.cpu_count(), "python": platform.python_version(), **host_topology()}}


def host_topology() -> dict[str, Any]:
    """Where the engine's processes can run: the CPU model, sockets, SMT, NUMA nodes, and the
    GPU's link to the CPUs (``nvidia-smi topo -m``): the facts to read the 1-stream modes with."""
    import shutil
    import subprocess

    def text(cmd: list[str]) -> str | None:
        if shutil.which(cmd[0]) is None:
            return None
        try:
            return subprocess.run(cmd, capture_output=True, text=True, timeout=20).stdout
        except (OSError, subprocess.SubprocessError):
            return None

    out: dict[str, Any] = {}
    lscpu = text(["lscpu"])
    if lscpu:
        wanted = ("Model name", "Socket(s)", "Core(s) per socket", "Thread(s) per core", "NUMA node(s)",
                  "CPU max MHz", "Hypervisor vendor")
        for line in lscpu.splitlines():
            key, _, value = line.partition(":")
            if key.strip() in wanted or key.strip().startswith("NUMA node") and "CPU" in key:
                out[key.strip()] = value.strip()
    topo = text(["nvidia-smi", "topo", "-m"])
    if topo:
        out["nvidia_smi_topo"] = topo.strip()
    with contextlib.suppress(OSError):
        out["cpu_governor"] = Path("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor").read_text().strip()
    return out


# --------------------------------------------------------------------------- engine_bench
def _nvml_reader():  # type: ignore[no-untyped-def]
    from workstation.telemetry.nvml import GpuState, NvmlReader

    reader = NvmlReader()
    return reader if reader.open() is GpuState.OK else None


async def stream_figures(http, engines: dict[str, EngineLauncher], *, tokens: int,  # type: ignore[no-untyped-def]
                         repeats: int) -> dict[str, dict[str, Any]]:
    """engine_bench's 1 and 16 streams, ``repeats`` runs each, on every engine of ``engines``
    (profile name -> its running launcher). With several engines up at once they take turns run
    by run, the order turning each repeat (A B, B A, ...), so a drift of the machine lands on
    all alike. Every run carries a
    :class:`RunProbe` record (GPU clock, each process's CPU per token, the cores it ran on)."""
    from run_probe import RunProbe

    eb = _load("engine_bench")
    clients = {name: ChatClient(http, launcher.endpoint) for name, launcher in engines.items()}
    for client in clients.values():
        await eb._throughput(client, 1, 16)  # warm-up
    reader = await asyncio.to_thread(_nvml_reader)
    runs: dict[str, dict[int, list[dict]]] = {name: {1: [], 16: []} for name in clients}
    try:
        names = list(clients)
        for streams in (1, 16):
            for r in range(repeats):
                for name in names[r % len(names):] + names[:r % len(names)]:  # A B, B A, ...
                    client = clients[name]
                    probe = RunProbe(engines[name].pid, reader=reader)
                    probe.start()
                    try:
                        run = await eb._throughput(client, streams, tokens)
                    finally:
                        run_probe = await asyncio.to_thread(probe.stop, tokens=tokens * streams)
                    runs[name][streams].append({**run, "probe": run_probe})
    finally:
        if reader is not None:
            reader.close()
    out: dict[str, dict[str, Any]] = {}
    for name, by in runs.items():
        out[name] = {
            "stream1_tok_s": round(statistics.median(r["tok_s"] for r in by[1]), 1),
            "stream16_tok_s": round(statistics.median(r["tok_s"] for r in by[16]), 1),
            "stream1_runs": [round(r["tok_s"], 1) for r in by[1]],
            "stream16_runs": [round(r["tok_s"], 1) for r in by[16]],
            "stream1_ttft_s": round(statistics.median(r["ttft_s"] for r in by[1]), 4),
            "stream16_ttft_s": round(statistics.median(r["ttft_s"] for r in by[16]), 4),
            "tokens_per_stream": tokens, "repeats": repeats,
            "stream1_probes": [r["probe"] for r in by[1]],
            "stream16_probes": [r["probe"] for r in by[16]],
        }
    return out


def launcher_facts(launcher: EngineLauncher) -> dict[str, Any]:
    argv = launcher.command()
    return {"start_s": round(launcher.started_s or 0, 1), "flags": argv[argv.index("serve") + 2:],
            "sizing_notes": list(launcher.sizing.notes) if launcher.sizing else [],
            "environment_notes": list(launcher.env_notes)}


# --------------------------------------------------------------------------- nvml_vs_smi under the engine
async def nvml_under_engine(http, launcher: EngineLauncher, seconds: float) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    from workstation.telemetry.nvml import GpuState, NvmlReader
    from workstation.tuning.loadgen import LoadGenerator
    from workstation.tuning.results import Workload

    nv = _load("nvml_vs_smi")
    reader = NvmlReader()
    if reader.open() is not GpuState.OK:
        return {"skipped": reader.message}
    fields = nv.smi_fields()
    idle = await asyncio.to_thread(nv.run_phase, "idle", reader, fields, 3.0, launcher.pid)
    load = Workload(kind="synthetic", concurrency=64, input_len=256, output_len=256, duration_s=seconds + 6,
                    warmup_s=0.0)
    rows: list[dict] = []
    done = threading.Event()

    def compare() -> None:
        time.sleep(3.0)  # let the load settle
        rows.extend(nv.run_phase("engine load", reader, fields, seconds, launcher.pid))
        done.set()

    thread = threading.Thread(target=compare, name="nvml-compare")
    thread.start()
    result = await LoadGenerator(http, launcher.endpoint, load).run()
    await asyncio.to_thread(thread.join)
    reader.close()
    summary = nv.summarize(idle + rows)
    engine_pids = sorted({p for r in rows for g in r["gpus"].values() for p in g.get("engine_pids", [])})
    all_pids = sorted({p for r in rows for g in r["gpus"].values() for p in g.get("pids", [])})
    mem = [g.get("engine_memory_mib") for r in rows for g in r["gpus"].values() if g.get("engine_memory_mib")]
    return {
        "fields": {k: {"max_abs_diff": v["max_abs_diff"], "mean_abs_diff": v["mean_abs_diff"],
                       "mean_nvml": v["mean_nvml"], "mean_smi": v["mean_smi"], "n": v["n"]} for k, v in summary.items()},
        "attribution": {"engine_root_pid": launcher.pid, "engine_pids_seen": engine_pids, "gpu_pids_seen": all_pids,
                        "all_gpu_processes_are_the_engines": bool(all_pids) and set(all_pids) <= set(engine_pids),
                        "engine_memory_mib_max": max(mem) if mem else None},
        "load": {"output_tok_s": round(result.output_tok_s, 1), "workload": load.describe()},
        "seconds_compared": len(rows),
    }


# --------------------------------------------------------------------------- fleet + capture
class ShapeCapture:
    """Records a fleet's model traffic as a traffic shape (what the tuner replays)."""

    def __init__(self, http, endpoint, name: str) -> None:  # type: ignore[no-untyped-def]
        from workstation.tuning.capture import TrafficRecorder

        self.recorder = TrafficRecorder(name, http=http, endpoint=endpoint)

    async def attach(self, fleet) -> None:  # type: ignore[no-untyped-def]
        self.recorder.attach_fleet(fleet)
        await self.recorder.start()

    async def detach(self) -> None:
        await self.recorder.stop()
        self.recorder.detach_all()

    def shape(self):  # type: ignore[no-untyped-def]
        return self.recorder.shape()  # a fleet recorder estimates the shared prefix itself


async def fleet_and_capture(http, endpoint, *, sessions: int, max_steps: int, timeout_s: float,
                            store) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    fr = _load("fleet_run")
    capture = ShapeCapture(http, endpoint, "gpu-fleet-32")
    args = argparse.Namespace(sessions=sessions, max_steps=max_steps, temperature=None, timeout_s=timeout_s,
                              keep=False)
    result = await fr.run(args, endpoint, observe=capture)
    result["aggregate_tok_s"] = result["generated_tok_s"]
    try:
        shape = capture.shape()
    except ValueError as exc:  # no finished request: the fleet's figures still tell why
        result["shape"], result["shape_error"] = None, str(exc)
        return result
    store.save_shape(shape)
    result["shape"] = {"name": shape.name, "summary": shape.summary_line(), "requests": shape.requests,
                       "prompt_tokens_p50": shape.prompt_tokens.p50, "completion_tokens_p50": shape.completion_tokens.p50,
                       "concurrency_p90": shape.concurrency_p90, "common_prefix_tokens": shape.common_prefix_tokens}
    return result


FLEET_TURNS = 8
"""Model turns of each session in ``fleet_on_trials`` (2 in the rehearsal)."""


async def fleets_on_trials(args: argparse.Namespace, results, tuner, make_fleet,  # type: ignore[no-untyped-def]
                                deadline: float) -> None:
    """Real agent sessions on the round's baseline, its speculating engines and its trials of
    several engines on the GPU: how many drafts are accepted on what agents really write (the
    screening replays code text; this checks it), and what a fleet of real sessions gets from
    a profile of several engines (its sessions spread over them, as the app spreads them).
    Each is the tuner's agent check (:func:`workstation.tuning.agent_check.run_agent_check`)
    at the suite's sizes, ``args.sessions`` sessions of :data:`FLEET_TURNS` turns, on fleets of
    ``make_fleet`` (:meth:`Services.fleet`); its figures, acceptance from the engines' own
    ``/metrics`` around the run, go under ``fleet_on_trials``."""
    from workstation.tuning.agent_check import run_agent_check

    out: dict[str, Any] = results.data.get("fleet_on_trials", {})
    trials = [tuner.base, *(t for t in tuner.trials if t.candidate is not None
                            and ("speculation" in t.label or t.engines > 1))]
    if len(trials) < 2:
        return
    for trial in trials:
        left = deadline - time.monotonic()
        if trial.launcher is None or left < 75:
            continue
        say(f"agent check: {args.sessions} agent sessions on '{trial.label}'")
        check = await run_agent_check(make_fleet, trial.endpoints, sessions=args.sessions,
                                      max_turns=FLEET_TURNS if not args.dry_run else 2,
                                      timeout_s=min(90.0, left - 30))
        out[trial.label] = check.to_json()
        results.put("fleet_on_trials", out)
        say(f"  {trial.label}: {check.generated_tok_s} tok/s, {check.tool_calls_mean:g} tool calls a session, "
            f"drafts accepted {check.spec_acceptance_rate}")
