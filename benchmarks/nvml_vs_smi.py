"""The GPU sampler against ``nvidia-smi --query-gpu`` in the same seconds, idle and under load.

A PyTorch bf16 matmul loop in a child process stands in for the engine (vLLM is not
needed): it runs under a small shell so the sampler must find it through the process
tree, as it finds vLLM's workers under the API server. Every second the script reads
NVML through :class:`NvmlReader`, runs ``nvidia-smi``, reads NVML again, and compares
smi's numbers with the mean of the two NVML readings around it.

Phases: ``idle`` (no load), then for each ``--load`` placement (``0``, ``all``, ``0,1``,
…) the load runs on those GPUs only, so with several GPUs each card must show its own
utilization, power and process. Sampler cost per GPU count (reads of the first k
devices, k = 1..n) is timed at the end.

    python benchmarks/nvml_vs_smi.py [--idle-s 5] [--load-s 15] [--load all --load 0]

Ends with one JSON line: per-field differences (mean / max absolute, and the means of
both sides), attribution results, read cost per GPU count.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from workstation.telemetry.nvml import GpuSnapshot, GpuState, NvmlReader  # noqa: E402

LOAD_SCRIPT = r"""
import os, sys, time, torch
gpus = [int(x) for x in sys.argv[1].split(",")]
seconds = float(sys.argv[2])
torch.backends.cuda.matmul.allow_tf32 = True
work = []
for g in gpus:
    dev = torch.device("cuda", g)
    a = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    ballast = torch.empty(8 * 2**30, dtype=torch.uint8, device=dev)  # 8 GiB: a visible memory step
    work.append((dev, a, b, ballast))
for dev, *_ in work:
    torch.cuda.synchronize(dev)
print("ready", os.getpid(), flush=True)
end = time.monotonic() + seconds
while time.monotonic() < end:
    for dev, a, b, _ in work:
        with torch.cuda.device(dev):
            for _ in range(8):
                torch.mm(a, b)
    for dev, *_ in work:
        torch.cuda.synchronize(dev)
"""

# smi field → (GpuDevice attribute, conversion of the NVML value to smi's unit)
FIELDS: dict[str, tuple[str, Any]] = {
    "power.draw": ("power_w", lambda v: v),
    "memory.used": ("memory_used_bytes", lambda v: v / 2**20),
    "utilization.gpu": ("gpu_util_pct", lambda v: v),
    "utilization.memory": ("mem_util_pct", lambda v: v),
    "temperature.gpu": ("temperature_c", lambda v: v),
    "clocks.sm": ("sm_clock_mhz", lambda v: v),
    "clocks.mem": ("mem_clock_mhz", lambda v: v),
}
EXTRA = ["power.draw.instant", "power.draw.average", "memory.reserved", "pstate",
         "clocks_event_reasons.active", "clocks_throttle_reasons.active"]
KEY = {"power.draw": "power_w", "memory.used": "memory_used_mib", "utilization.gpu": "gpu_util_pct",
       "utilization.memory": "mem_util_pct", "temperature.gpu": "temperature_c", "clocks.sm": "sm_clock_mhz",
       "clocks.mem": "mem_clock_mhz"}


def smi_fields() -> list[str]:
    ok = []
    for f in ["index", *FIELDS, *EXTRA]:
        r = subprocess.run(["nvidia-smi", f"--query-gpu={f}", "--format=csv,noheader,nounits"],
                           capture_output=True, text=True)
        if r.returncode == 0 and "not a valid field" not in (r.stdout + r.stderr).lower():
            ok.append(f)
    return ok


def query_smi(fields: list[str]) -> tuple[float, dict[int, dict[str, str]]]:
    t0 = time.monotonic()
    r = subprocess.run(["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"],
                       capture_output=True, text=True, check=True)
    t1 = time.monotonic()
    rows: dict[int, dict[str, str]] = {}
    for line in r.stdout.strip().splitlines():
        values = [v.strip() for v in line.split(",")]
        row = dict(zip(fields, values))
        rows[int(row["index"])] = row
    return (t0 + t1) / 2, rows


def smi_apps() -> list[tuple[int, str, float]]:
    r = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,gpu_uuid,used_memory", "--format=csv,noheader,nounits"],
                       capture_output=True, text=True)
    out = []
    for line in r.stdout.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 3 and parts[0].isdigit():
            out.append((int(parts[0]), parts[1], float(parts[2]) if parts[2].replace(".", "").isdigit() else -1.0))
    return out


def as_float(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def compare_second(reader: NvmlReader, fields: list[str], engine_root: int | None) -> dict[str, Any]:
    a = reader.read(engine_root_pid=engine_root)
    t_smi, smi = query_smi(fields)
    b = reader.read(engine_root_pid=engine_root)
    row: dict[str, Any] = {"t": t_smi, "nvml_read_ms": [a.read_s * 1e3, b.read_s * 1e3], "gpus": {}}
    for da, db in zip(a.devices, b.devices):
        s = smi.get(da.index, {})
        per: dict[str, Any] = {}
        for f, (attr, conv) in FIELDS.items():
            va, vb = getattr(da, attr), getattr(db, attr)
            sv = as_float(s.get(f, ""))
            if va is None or vb is None or sv is None:
                continue
            per[KEY[f]] = (conv((va + vb) / 2), sv)
        if "power.draw.instant" in s and da.power_w is not None:
            per["power_w_vs_instant"] = ((da.power_w + db.power_w) / 2, as_float(s["power.draw.instant"]))
        per["pstate"] = (f"P{db.pstate}" if db.pstate is not None else "n/a", s.get("pstate", "n/a"))
        reasons = s.get("clocks_event_reasons.active") or s.get("clocks_throttle_reasons.active")
        per["clock_reasons"] = (db.clock_event_mask, reasons, list(db.clock_event_reasons or ()))
        per["engine_pids"] = sorted(p.pid for p in db.processes or () if p.is_engine)
        per["pids"] = sorted(p.pid for p in db.processes or ())
        per["engine_memory_mib"] = None if db.engine_memory_bytes is None else db.engine_memory_bytes / 2**20
        row["gpus"][da.index] = per
    return row


def start_load(gpus: list[int], seconds: float) -> tuple[subprocess.Popen, int]:
    """The stand-in engine: ``sh`` (the root we hand the sampler) → python (the GPU user)."""
    env = {**os.environ, "LOAD_SCRIPT": LOAD_SCRIPT}
    cmd = f'"{sys.executable}" -c "$LOAD_SCRIPT" {",".join(map(str, gpus))} {seconds}; true'
    proc = subprocess.Popen(["sh", "-c", cmd], env=env, stdout=subprocess.PIPE, text=True, start_new_session=True)
    assert proc.stdout is not None
    line = proc.stdout.readline().split()
    if not line or line[0] != "ready":
        proc.wait(timeout=30)
        raise SystemExit("the PyTorch load did not start")
    return proc, int(line[1])


def stop(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    proc.wait(timeout=30)


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    fields: dict[str, dict[str, Any]] = {}
    for row in rows:
        for gpu, per in row["gpus"].items():
            for key, val in per.items():
                if not isinstance(val, tuple) or len(val) != 2 or not all(isinstance(x, float | int) for x in val):
                    continue
                d = fields.setdefault(f"gpu{gpu}.{key}", {"nvml": [], "smi": [], "diff": []})
                d["nvml"].append(val[0])
                d["smi"].append(val[1])
                d["diff"].append(abs(val[0] - val[1]))
    return {
        k: {
            "mean_abs_diff": round(statistics.fmean(v["diff"]), 3),
            "max_abs_diff": round(max(v["diff"]), 3),
            "mean_nvml": round(statistics.fmean(v["nvml"]), 3),
            "mean_smi": round(statistics.fmean(v["smi"]), 3),
            "n": len(v["diff"]),
        }
        for k, v in sorted(fields.items())
    }


def _diffs(summary: dict[str, dict[str, Any]]) -> dict[str, list[float]]:
    """field → [mean |Δ|, mean NVML, mean smi] (compact, for the per-phase part of the JSON)."""
    return {k: [v["mean_abs_diff"], v["mean_nvml"], v["mean_smi"]] for k, v in summary.items()}


def run_phase(name: str, reader: NvmlReader, fields: list[str], seconds: float, engine_root: int | None) -> list[dict]:
    rows = []
    end = time.monotonic() + seconds
    next_t = time.monotonic()
    while time.monotonic() < end:
        rows.append(compare_second(reader, fields, engine_root))
        next_t += 1.0
        time.sleep(max(0.0, next_t - time.monotonic()))
    print(f"  {name}: {len(rows)} seconds compared", flush=True)
    return rows


def read_cost_by_count(n: int, repeats: int = 20) -> dict[str, float]:
    """Median ms of one full read of the first k GPUs, k = 1..n."""
    out = {}
    for k in range(1, n + 1):
        reader = NvmlReader(only=range(k))
        reader.open()
        reader.read()
        times = []
        for _ in range(repeats):
            times.append(reader.read().read_s * 1e3)
        reader.close()
        out[str(k)] = round(statistics.median(times), 3)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--idle-s", type=float, default=5.0)
    ap.add_argument("--load-s", type=float, default=15.0)
    ap.add_argument("--load", action="append", default=None,
                    help="GPUs the load runs on in one phase: 'all' or '0,1' (repeatable; default 'all')")
    ap.add_argument("--settle-s", type=float, default=3.0, help="seconds after the load starts before comparing")
    args = ap.parse_args()

    reader = NvmlReader()
    if reader.open() is not GpuState.OK:
        print(json.dumps({"state": reader.state.value, "message": reader.message}))
        return 1
    if shutil.which("nvidia-smi") is None:
        print(json.dumps({"state": "no_smi", "message": "nvidia-smi not found"}))
        return 1
    n = reader.device_count
    fields = smi_fields()
    first: GpuSnapshot = reader.read()
    print(f"{n} GPU(s): {', '.join(d.name for d in first.devices)}; driver {first.driver_version}")
    print(f"nvidia-smi fields: {', '.join(fields)}")
    print(f"unsupported by NVML: {sorted({u for d in first.devices for u in d.unsupported})}")

    phases: dict[str, Any] = {}
    rows_all: list[dict] = []
    idle = run_phase("idle", reader, fields, args.idle_s, None)
    phases["idle"] = {"mean_abs_diff": _diffs(summarize(idle)),
                      "pstate_last": {g: per["pstate"] for g, per in idle[-1]["gpus"].items()}}
    rows_all += idle
    attribution: dict[str, Any] = {}
    for placement in args.load or ["all"]:
        gpus = list(range(n)) if placement == "all" else [int(x) for x in placement.split(",")]
        proc, load_pid = start_load(gpus, args.load_s + args.settle_s + 10)
        try:
            time.sleep(args.settle_s)
            rows = run_phase(f"load on {placement}", reader, fields, args.load_s, proc.pid)
            apps = smi_apps()
        finally:
            stop(proc)
        uuid_to_index = {d.uuid: d.index for d in first.devices}
        smi_gpus_of_load = sorted({uuid_to_index.get(u, -1) for pid, u, _ in apps if pid == load_pid})
        last = rows[-1]["gpus"]
        sampler_gpus_of_load = sorted(g for g, per in last.items() if load_pid in per["engine_pids"])
        wrong = sorted(g for g, per in last.items() if per["engine_pids"] and g not in gpus)
        attribution[placement] = {
            "load_pid": load_pid,
            "engine_root_pid": proc.pid,
            "load_gpus": gpus,
            "sampler_attributed_gpus": sampler_gpus_of_load,
            "smi_compute_app_gpus": smi_gpus_of_load,
            "attributed_ok": sampler_gpus_of_load == gpus and not wrong,
            "engine_memory_mib": {g: last[g]["engine_memory_mib"] for g in last},
            "gpu_util_pct_mean": {
                g: round(statistics.fmean(r["gpus"][g]["gpu_util_pct"][0] for r in rows
                                          if "gpu_util_pct" in r["gpus"][g]), 1)
                for g in last
            },
        }
        phases[f"load:{placement}"] = {"mean_abs_diff": _diffs(summarize(rows)),
                                       "clock_reasons_last": {g: last[g]["clock_reasons"] for g in last},
                                       "pstate_last": {g: last[g]["pstate"] for g in last}}
        rows_all += rows
    read_ms = [ms for r in rows_all for ms in r["nvml_read_ms"]]
    cost = read_cost_by_count(n)
    reader.close()

    overall = summarize(rows_all)
    print(f"\n{'field':34} {'mean |Δ|':>9} {'max |Δ|':>9} {'NVML':>10} {'smi':>10}")
    for k, v in overall.items():
        print(f"{k:34} {v['mean_abs_diff']:9.2f} {v['max_abs_diff']:9.2f} {v['mean_nvml']:10.1f} {v['mean_smi']:10.1f}")
    for placement, a in attribution.items():
        print(f"load on {placement}: attributed {a['sampler_attributed_gpus']} (smi {a['smi_compute_app_gpus']}) "
              f"ok={a['attributed_ok']} util {a['gpu_util_pct_mean']}")
    print(f"NVML read: p50 {statistics.median(read_ms):.2f} ms; by GPU count {cost}")
    print(json.dumps({
        "gpus": n,
        "gpu_name": first.devices[0].name,
        "driver": first.driver_version,
        "seconds_compared": len(rows_all),
        "fields": overall,
        "phases": phases,
        "attribution": attribution,
        "nvml_unsupported": sorted({u for d in first.devices for u in d.unsupported}),
        "nvml_read_ms_p50": round(statistics.median(read_ms), 3),
        "nvml_read_ms_max": round(max(read_ms), 3),
        "nvml_read_ms_by_gpu_count": cost,
    }, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
