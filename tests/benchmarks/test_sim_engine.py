"""The simulated engine behind ``benchmarks/admission.py`` saturates the way vLLM does: a
shared prompt prefix hits its prefix cache, a KV cache too small for the batch makes
requests wait and preempts, and its ``/metrics`` read like vLLM's to the app's parser."""

from __future__ import annotations

import asyncio
import contextlib

from tests.helpers.sim_engine import LatencyModel, Scheduler
from workstation.telemetry.vllm_metrics import parse_metrics

FAST = dict(step_s=0.0005, per_seq_s=0.0, per_prefill_token_s=0.0, per_context_token_s=0.0)


async def _drain(req) -> int:  # type: ignore[no-untyped-def]
    tokens = 0
    while (n := await req.out.get()) is not None:
        tokens += n
    return tokens


async def test_a_shared_prefix_hits_the_prefix_cache_and_every_token_is_streamed() -> None:
    sched = Scheduler(LatencyModel(kv_tokens=8192, **FAST))
    task = asyncio.create_task(sched.run())
    try:
        prefix = "s" * 4096  # 1,024 tokens at 4 characters a token: 64 full blocks
        first = sched.submit(prefix + "one " * 32, 8)
        assert await _drain(first) == 8
        second = sched.submit(prefix + "two " * 32, 8)
        assert await _drain(second) == 8
        assert first.cached_tokens == 0 and second.cached_tokens == 1024
        reading = parse_metrics(sched.metrics_text("sim"))
        assert reading.counter("prefix_cache_hits") == 1024
        assert reading.counter("prefix_cache_queries") == first.prompt_tokens + second.prompt_tokens
        assert reading.counter("generation_tokens") == 16
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_a_kv_cache_too_small_for_the_batch_queues_and_preempts() -> None:
    # 8 requests of 40 blocks each (prompt + what they generate) in a cache of 128 blocks
    sched = Scheduler(LatencyModel(kv_tokens=2048, block_tokens=16, **FAST))
    task = asyncio.create_task(sched.run())
    try:
        reqs = [sched.submit(f"{i:04d}" * 256, 384) for i in range(8)]  # 256 tokens each, all distinct
        await asyncio.sleep(0.05)
        reading = parse_metrics(sched.metrics_text("sim"))
        assert reading.gauges["waiting"] >= 1  # they do not all fit at once
        assert reading.gauges["kv_cache_usage"] > 0.75  # its blocks are nearly all held
        assert await asyncio.wait_for(asyncio.gather(*(_drain(r) for r in reqs)), 60) == [384] * 8
        final = parse_metrics(sched.metrics_text("sim"))
        assert (final.counter("preemptions") or 0) >= 1  # decoding outgrew the cache: recomputed later
        assert final.gauges["running"] == 0 and final.counter("requests_finished") == 8
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
