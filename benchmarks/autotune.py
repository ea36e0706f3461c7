"""The autotuner's figure: ``workstation tune`` on this machine, its workload stated.

    python benchmarks/autotune.py [--budget-s 1800] [--duration-s 30] [--model smollm2] [--shape NAME]

Runs the autotuner exactly as a user does (``workstation tune --json``, in a child process so
the engines it starts are its own and stop with it): from the ``default`` profile, one change
at a time, each measurement on an engine of its own, ``--repeats`` runs each, a change kept
only when its gain clears twice the pooled run-to-run noise. The workload is a captured
``--shape`` if given, else the built-in agent-like one (``tuning.loadgen.agent_like_workload``:
a 1,300-token prefix every request shares, 256 tokens of its own, 48 out, 4 streams, closed
loop). Steps that do not fit the budget are reported as skipped.

Prints the tuner's table, a short summary and one JSON line: the workload, the noise, the
baseline and best tok/s, which changes were kept and refused, what was not run.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--budget-s", type=float, default=1800.0, help="the tuner's time budget (default 1800)")
    ap.add_argument("--model", default=None, help="model to tune (default: settings, i.e. smollm2)")
    ap.add_argument("--shape", default=None, help="a captured traffic shape (default: the built-in agent-like one)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--duration-s", type=float, default=30.0,
                    help="measured window per run (default 30: on the CPU engine one round of the agent-like "
                         "workload takes ~8-10 s under load, and 8-second windows measured 0, 1 or 2 rounds — "
                         "noise 100%%)")
    args = ap.parse_args()
    argv = [sys.executable, "-m", "workstation", "tune", "--json", "--budget-s", str(args.budget_s),
            "--repeats", str(args.repeats), "--duration-s", str(args.duration_s)]
    if args.model:
        argv += ["--model", args.model]
    if args.shape:
        argv += ["--shape", args.shape]
    started = time.monotonic()
    proc = subprocess.run(argv, cwd=str(REPO), stdout=subprocess.PIPE, text=True,
                          timeout=args.budget_s + 600)  # the tuner stops itself at its budget
    lines = proc.stdout.splitlines()
    if proc.returncode != 0 or not lines or not lines[-1].startswith("{"):
        print(proc.stdout[-3000:])
        print(f"workstation tune failed (exit {proc.returncode})", file=sys.stderr)
        return 1
    data = json.loads(lines[-1])
    print("\n".join(lines[:-1]))
    kept = [s["change"] for s in data["steps"][1:] if s["kept"]]
    refused = [s["change"] for s in data["steps"][1:] if not s["kept"]]
    gain = (100.0 * (data["best_tok_s"] / data["baseline_tok_s"] - 1)) if data.get("baseline_tok_s") else None
    print(f"\nworkload: {data['workload']} ({data['shape'] or 'built-in agent-like'}), model {data['model']}, "
          f"{data['engine']}")
    print(f"noise {data['noise_pct']:.1f}%; kept: {', '.join(kept) or 'none'}; refused: {', '.join(refused) or 'none'}; "
          f"not run: {len(data['not_run'])}; best {gain:+.1f}% over the baseline" if gain is not None else "")
    summary = {
        "workload": data["workload"], "shape": data["shape"], "model": data["model"], "engine": data["engine"],
        "noise_pct": data["noise_pct"], "baseline_tok_s": data["baseline_tok_s"], "best_tok_s": data["best_tok_s"],
        "gain_pct": None if gain is None else round(gain, 1), "kept": kept, "refused": refused,
        "deltas_pct": {s["change"]: s["delta_pct"] for s in data["steps"][1:]},
        "not_run": [s["change"] for s in data["not_run"]], "budget_s": data["budget_s"],
        "elapsed_s": round(time.monotonic() - started, 1), "repeats": args.repeats,
        "hardware": data.get("hardware"),
    }
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
