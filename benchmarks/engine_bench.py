"""Engine start-up and streaming throughput on the managed engine.

    python benchmarks/engine_bench.py [--model smollm2] [--profile default] [--tokens 256]

Cold start = the engine's compile/cache directory emptied first; warm start = an
immediate second start. Streaming: 1 and 16 concurrent streams, each generating
``--tokens`` tokens (``ignore_eos``), through the app's own client path.
Ends with one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from workstation.config import load_settings  # noqa: E402
from workstation.core.profiles import PRESETS, effective  # noqa: E402
from workstation.engine.chat_client import ChatClient  # noqa: E402
from workstation.engine.http import make_http_client  # noqa: E402
from workstation.engine.host import Launchers  # noqa: E402

PROMPT = "Write a long, detailed explanation of how Python's garbage collector works."


async def _stream(client: ChatClient, tokens: int) -> tuple[int, float, float]:
    t0 = time.monotonic()
    first = None
    n = 0
    async for delta in client.stream_chat(
        [{"role": "user", "content": PROMPT}], max_tokens=tokens, temperature=0.0,
        extra={"ignore_eos": True},
    ):
        if delta.content and first is None:
            first = time.monotonic() - t0
        if delta.usage:
            n = delta.usage.completion_tokens
    return n, first or 0.0, time.monotonic() - t0


async def _throughput(client: ChatClient, streams: int, tokens: int) -> dict:
    t0 = time.monotonic()
    results = await asyncio.gather(*(_stream(client, tokens) for _ in range(streams)))
    wall = time.monotonic() - t0
    total = sum(r[0] for r in results)
    return {
        "tok_s": total / wall,
        "ttft_s": sorted(r[1] for r in results)[len(results) // 2],
        "tokens": total,
        "wall_s": wall,
    }


async def main() -> dict:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--profile", default="default", choices=list(PRESETS))
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--no-cold", action="store_true", help="keep the compile cache (skip the cold start)")
    args = parser.parse_args()
    settings = load_settings()
    launchers = Launchers.from_settings(settings, args.model)
    engine, model = launchers.install, launchers.model
    launcher = launchers(args.profile)
    cache = settings.engine_dir / "cache"
    if not args.no_cold:
        shutil.rmtree(cache, ignore_errors=True)
    try:
        await launcher.start(lambda m: print(m, file=sys.stderr))
        start_cold = launcher.started_s
        await launcher.stop()
        await launcher.start(lambda m: print(m, file=sys.stderr))
        start_warm = launcher.started_s
        async with make_http_client() as http:
            client = ChatClient(http, launcher.endpoint)
            await _throughput(client, 1, 16)  # warm-up
            one = await _throughput(client, 1, args.tokens)
            sixteen = await _throughput(client, 16, args.tokens)
    finally:
        await launcher.stop()
    args_eff, _ = effective(launcher.profile, PRESETS)
    result = {
        "model": model.served_name,
        "profile": args.profile,
        "eager": "--enforce-eager" in args_eff,
        "engine": engine.version,
        "start_cold_s": round(start_cold, 1) if not args.no_cold else None,
        "start_warm_s": round(start_warm, 1),
        "stream1_tok_s": round(one["tok_s"], 1),
        "stream1_ttft_s": round(one["ttft_s"], 3),
        "stream16_tok_s": round(sixteen["tok_s"], 1),
        "stream16_ttft_s": round(sixteen["ttft_s"], 3),
        "tokens_per_stream": args.tokens,
    }
    print(f"{'measure':<18}{'value':>10}")
    for key in ("start_cold_s", "start_warm_s", "stream1_tok_s", "stream16_tok_s"):
        print(f"{key:<18}{result[key]!s:>10}")
    return result


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main())))
