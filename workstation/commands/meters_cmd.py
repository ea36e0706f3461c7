"""``workstation meters``: every meter from the command line.

``--once --json`` prints one snapshot (GPU, host, each endpoint's engine metrics,
cost) as JSON; without ``--json`` a short table. Without ``--once`` it prints a
line per interval until Ctrl-C (or ``--count`` lines).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
from typing import Any

from workstation.core.endpoints import Endpoint
from workstation.core.errors import UserError


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "meters",
        help="print the GPU, host, engine and cost meters",
        description="Read every meter: GPU (NVML), host (psutil), the engine's /metrics, cost.",
    )
    p.add_argument("--once", action="store_true", help="one snapshot, then exit")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument("--window", type=float, default=1.0, metavar="S",
                   help="seconds between the two readings that rates are computed from (default 1)")
    p.add_argument("--count", type=int, default=0, metavar="N",
                   help="without --once: stop after N lines (default: until Ctrl-C)")
    p.add_argument("--url", metavar="URL",
                   help="engine base URL to scrape (default: engine.external_url from settings)")
    p.add_argument("--api-key", metavar="KEY", help="API key for --url")
    p.add_argument("--name", default="engine", help="name of that endpoint in the output")
    p.add_argument("--api-price", metavar="MODEL",
                   help="paid API to compare against (default: telemetry.api_price_model)")
    p.set_defaults(func=run)


def _endpoints(args: argparse.Namespace, settings: Any) -> list[Endpoint]:
    url = args.url or settings.engine.external_url
    if not url:
        return []
    if not url.startswith(("http://", "https://")):
        raise UserError(f"--url must start with http:// or https://, not {url!r}")
    key = args.api_key if args.api_key is not None else (settings.engine.external_api_key or "")
    return [Endpoint(base_url=url, api_key=key, model="", name=args.name)]


def run(args: argparse.Namespace) -> int:
    from workstation.config import load_settings

    if args.window <= 0 or not math.isfinite(args.window):
        raise UserError("--window must be a positive number of seconds")
    settings = load_settings()
    endpoints = _endpoints(args, settings)
    return asyncio.run(_run(args, settings, endpoints))


async def _run(args: argparse.Namespace, settings: Any, endpoints: list[Endpoint]) -> int:
    from workstation.engine.http import make_http_client
    from workstation.services import Services

    async with make_http_client(max_connections=8, read_timeout_s=10.0) as http, \
            Services(settings, http=http) as services:  # the meters close before the client
        meters = services.meters(endpoints=endpoints, metrics_interval_s=args.window)
        if args.api_price:
            if meters.set_api_price(args.api_price) is None:
                raise UserError(f"no price for {args.api_price!r}",
                                hint="known: " + ", ".join(meters.prices.models()))
        if args.once:
            snap = await meters.collect_once(args.window)
            print(json.dumps(snap.to_dict(), indent=2, default=str) if args.json else _table(snap))
            return 0
        lines = 0
        while args.count <= 0 or lines < args.count:
            snap = await meters.collect_once(args.window)
            print(json.dumps(snap.to_dict(), default=str) if args.json else _line(snap), flush=True)
            lines += 1
        return 0


def _fmt(value: Any, spec: str = ".1f", unit: str = "") -> str:
    if value is None:
        return "n/a"
    return f"{value:{spec}}{unit}"


def _gib(n: int | None) -> str:
    return "n/a" if n is None else f"{n / 2**30:.1f}"


def _table(snap: Any) -> str:
    out: list[str] = []
    gpu = snap.gpu
    if gpu is None or not gpu.ok:
        out.append(f"GPU     {gpu.message if gpu else 'not sampled'}")
    else:
        for d in gpu.devices:
            procs = d.processes or ()
            engine = sum(1 for p in procs if p.is_engine)
            out.append(
                f"GPU{d.index}    {d.name}  util {_fmt(d.gpu_util_pct, 'd', '%')}  "
                f"mem {_gib(d.memory_used_bytes)}/{_gib(d.memory_total_bytes)} GiB  "
                f"power {_fmt(d.power_w, '.0f', ' W')}/{_fmt(d.power_limit_w, '.0f', ' W')}  "
                f"{_fmt(d.temperature_c, 'd', ' °C')}  SM {_fmt(d.sm_clock_mhz, 'd', ' MHz')}  "
                f"P{d.pstate if d.pstate is not None else '?'}  "
                f"clocks: {', '.join(d.clock_event_reasons) if d.clock_event_reasons else 'n/a'}  "
                f"procs {len(procs)} (engine {engine})"
            )
    h = snap.host
    if h is not None:
        out.append(
            f"host    CPU {h.cpu_pct:.0f}% of {h.cpu_count} cores  mem {_gib(h.memory_used_bytes)}/"
            f"{_gib(h.memory_total_bytes)} GiB  app {h.app.cpu_pct:.0f}% {_gib(h.app.rss_bytes)} GiB"
            if h.app else f"host    CPU {h.cpu_pct:.0f}%"
        )
    if not snap.engines:
        out.append("engine  no endpoint (give --url, or set engine.external_url)")
    for e in snap.engines:
        if not e.up:
            out.append(f"engine  {e.endpoint}: down ({e.error})")
            continue
        if not e.has_metrics:
            out.append(f"engine  {e.endpoint}: no metrics ({e.error})")
            continue
        out.append(
            f"engine  {e.endpoint} ({e.model or '?'}): gen {_fmt(e.generation_tokens_per_s)} tok/s  "
            f"prompt {_fmt(e.prompt_tokens_per_s)} tok/s  run {_fmt(e.running, 'd')} · wait "
            f"{_fmt(e.waiting, 'd')}  KV {_fmt(e.kv_cache_usage_pct, '.1f', '%')}  prefix hits "
            f"{_fmt(e.prefix_cache_hit_rate_lifetime_pct, '.1f', '%')} (lifetime)"
        )
    c = snap.cost
    if c is not None:
        api = c.api.key if c.api else "no API chosen"
        out.append(
            f"cost    vs {api}: self-host {_fmt(c.self_host_usd_per_m_tokens, '.3f')} $/M  API "
            f"{_fmt(c.api_usd_per_m_tokens, '.3f')} $/M  saving {_fmt(c.savings_pct, '.0f', '%')}"
            + (f"  ({'; '.join(c.notes)})" if c.notes else "")
        )
    return "\n".join(out)


def _line(snap: Any) -> str:
    parts = []
    gpu = snap.gpu
    if gpu is not None and gpu.ok:
        for d in gpu.devices:
            parts.append(f"GPU{d.index} {_fmt(d.gpu_util_pct, 'd', '%')} {_fmt(d.power_w, '.0f', 'W')}")
    else:
        parts.append("no GPU")
    for e in snap.engines:
        parts.append(f"{e.endpoint} {_fmt(e.generation_tokens_per_s, '.0f')} tok/s "
                     f"run {_fmt(e.running, 'd')} wait {_fmt(e.waiting, 'd')}" if e.up and e.has_metrics
                     else f"{e.endpoint} no metrics" if e.up else f"{e.endpoint} down")
    if snap.host is not None:
        parts.append(f"CPU {snap.host.cpu_pct:.0f}%")
    return " | ".join(parts)
