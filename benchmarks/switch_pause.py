"""The pause a running session sees when the live engine is switched to another profile.

    python benchmarks/switch_pause.py [--model tiny|smollm2] [--sessions 8] [--max-tokens 64]
                                      [--to-args "--enforce-eager --max-num-batched-tokens 4096"]

Starts engine A (profile ``default``), lets ``--sessions`` chat sessions stream one request
after another (each a ``ChatClient``; a broken request is retried once, as the agent loop
does), watches them for ``--baseline-s``, then switches side by side to profile B
(``--to-args``) with :class:`workstation.tuning.switch.SafeSwitch` — the new engine bound
apart from the old one — and keeps streaming for ``--after-s``. Both engines are stopped
at the end whatever happens. Prints a short table and ends with one JSON line.

The pause is the largest gap between two chunks (or before a first chunk) of any request
that overlapped the switch, as the sessions' own clients measured it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from workstation.config import load_settings  # noqa: E402
from workstation.core.profiles import PRESETS, Profile, flatten  # noqa: E402
from workstation.core.requests import RequestRecord  # noqa: E402
from workstation.engine.chat_client import ChatClient, EngineHTTPError, EngineUnreachable  # noqa: E402
from workstation.engine.http import make_http_client  # noqa: E402
from workstation.engine.host import Launchers  # noqa: E402
from workstation.engine.launcher import EngineLauncher  # noqa: E402
from workstation.tuning.bench import tuning_settings  # noqa: E402
from workstation.tuning.placement import plan_placement  # noqa: E402
from workstation.tuning.switch import SafeSwitch  # noqa: E402

PROMPT = [{"role": "user", "content": "Write a Python function that parses an INI file into a dict."}]


async def main(args: argparse.Namespace) -> dict:
    settings = tuning_settings(load_settings(), kv_cache_gib=args.kv_cache_gib)
    make = Launchers.from_settings(settings, args.model)
    engine, model = make.install, make.model
    logs = Path(tempfile.mkdtemp(prefix="switch-pause-"))
    old_profile = flatten(PRESETS["default"], PRESETS)
    new_profile = Profile("switch-target", "benchmark target",
                          args=tuple(shlex.split(args.to_args)))
    launchers: list[EngineLauncher] = []

    def factory(profile: Profile, env: dict[str, str]) -> EngineLauncher:
        launchers.append(make(profile, env, log_dir=logs / profile.name))
        return launchers[-1]

    records: list[RequestRecord] = []
    counts = {"done": 0, "retried": 0, "lost": 0}
    stop = asyncio.Event()

    async def session(client: ChatClient) -> None:
        while not stop.is_set():
            for attempt in range(2):
                try:
                    await client.complete(PROMPT, max_tokens=args.max_tokens, temperature=0.7)
                    counts["done"] += 1
                    break
                except (EngineUnreachable, EngineHTTPError):
                    counts["retried" if attempt == 0 else "lost"] += 1

    old = factory(old_profile, {})
    tasks: list[asyncio.Task[None]] = []
    try:
        print(f"starting engine A ({model.served_name}, profile default) …", file=sys.stderr, flush=True)
        await old.start()
        async with make_http_client() as http:
            clients = [ChatClient(http, old.endpoint, session_id=f"s{i}", observers=[records.append])
                       for i in range(args.sessions)]
            tasks = [asyncio.create_task(session(c), name=f"session-{i}") for i, c in enumerate(clients)]
            await asyncio.sleep(args.warmup_s)
            placement = plan_placement(engine.platform, live_env=dict(os.environ), cpu_count=os.cpu_count() or 1)
            switch = SafeSwitch(http, old, factory, clients=clients, side_by_side=placement.side_by_side,
                                placement_env=dict(placement.env), placement_reason=placement.reason,
                                baseline_s=args.baseline_s, drain_timeout_s=args.drain_timeout_s)
            switch.state_changed.connect(lambda ph, d: print(f"  switch: {ph.value} {d}", file=sys.stderr, flush=True))
            t_switch0 = time.monotonic() + args.baseline_s
            report, serving = await switch.run(new_profile)
            t_switch1 = time.monotonic()
            await asyncio.sleep(args.after_s)
            stop.set()
            await asyncio.gather(*tasks)
    finally:
        stop.set()
        for t in tasks:
            t.cancel()
        for launcher in launchers:
            await launcher.stop()

    def gaps(lo: float, hi: float) -> list[float]:
        return [r.max_gap_s for r in records if r.ok and r.started_s >= lo and r.started_s + r.duration_s <= hi]

    before = gaps(t_switch0 - args.baseline_s, t_switch0)
    after = gaps(t_switch1, t_switch1 + args.after_s + 5)
    out = {
        "model": model.served_name, "engine": engine.version, "sessions": args.sessions,
        "max_tokens": args.max_tokens, "ok": report.ok, "rolled_back": report.rolled_back,
        "placement": report.placement, "new_engine_up_s": report.start_new_s, "drain_s": report.drain_s,
        "switch_total_s": report.total_s, "in_flight_at_switch": report.in_flight_at_switch,
        "left_on_old": report.left_on_old, "requests_during": report.requests_during,
        "failed_during": report.failed_during, "pause_s": report.largest_gap_s,
        "pause_session": report.gap_session, "baseline_gap_s": report.baseline_gap_s,
        "median_gap_before_s": statistics.median(before) if before else None,
        "median_gap_after_s": statistics.median(after) if after else None,
        "requests_done": counts["done"], "retried": counts["retried"], "lost": counts["lost"],
    }
    return out


def cli() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="tiny")
    p.add_argument("--sessions", type=int, default=8)
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--to-args", default="--enforce-eager --max-num-batched-tokens 4096")
    p.add_argument("--kv-cache-gib", type=float, default=0.5)
    p.add_argument("--warmup-s", type=float, default=5.0)
    p.add_argument("--baseline-s", type=float, default=10.0)
    p.add_argument("--after-s", type=float, default=10.0)
    p.add_argument("--drain-timeout-s", type=float, default=60.0)
    args = p.parse_args()
    out = asyncio.run(main(args))

    def s(x: float | None) -> str:
        return "n/a" if x is None else f"{x:.2f} s"

    rows = [
        ("switched", "yes" if out["ok"] else ("rolled back" if out["rolled_back"] else "failed")),
        ("placement", out["placement"]),
        ("new engine up after", s(out["new_engine_up_s"])),
        ("drain of the old engine", s(out["drain_s"])),
        ("requests in flight at the switch", str(out["in_flight_at_switch"])),
        ("requests done / retried / lost", f"{out['requests_done']} / {out['retried']} / {out['lost']}"),
        ("largest gap a session saw (switch)", f"{s(out['pause_s'])} ({out['pause_session']})"),
        ("largest gap before the switch", s(out["baseline_gap_s"])),
        ("median per-request gap before / after", f"{s(out['median_gap_before_s'])} / {s(out['median_gap_after_s'])}"),
    ]
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"{k:<{width}}  {v}")
    print(json.dumps(out))


if __name__ == "__main__":
    cli()
