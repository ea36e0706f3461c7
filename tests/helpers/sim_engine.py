"""A simulated vLLM: an OpenAI-compatible server whose timing follows a latency model of
continuous batching over a paged KV cache with a prefix cache — an engine that saturates,
for the scaling parts the CPU engine is too slow for (``benchmarks/admission.py``, the
admission tests).

The model, step by step like vLLM V1's scheduler:

- **KV cache** of ``kv_tokens`` in blocks of ``block_tokens``. A request holds the blocks of
  its prompt and of what it generated. Full prompt blocks are named by a hash chain of
  their text, shared between requests and kept after a request ends (free but cached,
  evicted least recently used): a prompt whose leading blocks are cached skips their
  prefill (``prefix_cache_hits``).
- **Scheduler**: each step, every running request that finished its prefill decodes one
  token (a new block at each block boundary; when none is free the newest running request
  is preempted, its blocks freed, and it is recomputed later, as vLLM does); then waiting
  requests are admitted first-come first-served while fewer than ``max_num_seqs`` run and
  their prompt fits in the KV cache, and prefill proceeds in chunks within
  ``max_batched_tokens`` per step.
- **Step time** = ``step_s`` + ``per_seq_s`` × decoding requests + ``per_prefill_token_s`` ×
  prefilled tokens + ``per_context_token_s`` × tokens the decoding requests attend to.

Prompts are laid out as the app's chat template does — the system message, the tools, then
the conversation as JSON — at ``chars_per_token`` characters a token (append-only histories
share their prefix). Replies are
``max_tokens`` tokens of filler text (``ignore_eos``). ``/metrics`` speaks vLLM's names:
``num_requests_running``/``waiting``, ``kv_cache_usage_perc``, the token and prefix-cache
counters, preemptions, and the TTFT histogram with vLLM's buckets.

In-process: ``async with SimEngine(LatencyModel(...)) as sim: sim.endpoint``. As its own
process (so the clients' CPU does not slow the engine's clock): ``python -m
tests.helpers.sim_engine [--kv-tokens N ...]`` prints ``READY <port>`` and serves until
stdin closes or SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import collections
import contextlib
import dataclasses
import itertools
import signal
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import orjson

from tests.helpers.scripted_server import ScriptedServer

TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
                10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
"""vLLM's ``time_to_first_token_seconds`` buckets."""


@dataclass(frozen=True)
class LatencyModel:
    kv_tokens: int = 131_072
    block_tokens: int = 16
    max_num_seqs: int = 256
    max_batched_tokens: int = 2048
    step_s: float = 0.004
    per_seq_s: float = 0.0004
    per_prefill_token_s: float = 0.00002
    per_context_token_s: float = 2e-8
    chars_per_token: int = 4
    stream_interval: int = 1
    """Tokens per streamed chunk (vLLM's ``--stream-interval``)."""

    @property
    def kv_blocks(self) -> int:
        return max(1, self.kv_tokens // self.block_tokens)


@dataclass(eq=False)
class _Request:
    hashes: list[int]
    """Hash chain of the prompt's full blocks."""
    prompt_tokens: int
    max_tokens: int
    arrival: float
    out: asyncio.Queue[int | None] = field(default_factory=asyncio.Queue)
    computed: int = 0
    """Tokens of (prompt + generated) whose KV is computed."""
    generated: int = 0
    cached_tokens: int = 0
    shared: list[int] = field(default_factory=list)
    """Hashes of the shared blocks it holds."""
    private: int = 0
    """Blocks it holds alone (the prompt's last partial block, what it generated)."""
    first_token_t: float | None = None
    pending: int = 0
    """Tokens generated but not streamed yet."""

    @property
    def length(self) -> int:
        return self.prompt_tokens + self.generated

    @property
    def prefilling(self) -> bool:
        return self.computed < self.length


class BlockPool:
    """Paged KV blocks: shared (hashed, ref-counted, cached when free) and private."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.ref: dict[int, int] = {}
        self.cached: collections.OrderedDict[int, None] = collections.OrderedDict()
        self.private = 0

    @property
    def used(self) -> int:
        return len(self.ref) + self.private

    def leading_hits(self, hashes: list[int]) -> int:
        n = 0
        for h in hashes:
            if h in self.ref or h in self.cached:
                n += 1
            else:
                break
        return n

    def fits(self, hashes: list[int], private: int) -> bool:
        new = sum(1 for h in hashes if h not in self.ref and h not in self.cached) + private
        reused = sum(1 for h in hashes if h in self.cached)
        return new + reused <= self.capacity - self.used

    def acquire(self, hashes: list[int], private: int) -> None:
        """Take the blocks (call :meth:`fits` first)."""
        for h in hashes:
            if h in self.ref:
                self.ref[h] += 1
            elif h in self.cached:
                del self.cached[h]
                self.ref[h] = 1
        for h in hashes:
            if h not in self.ref:
                self._make_room()
                self.ref[h] = 1
        for _ in range(private):
            self._make_room()
            self.private += 1

    def take_private(self) -> bool:
        if self.used >= self.capacity:
            return False
        self._make_room()
        self.private += 1
        return True

    def _make_room(self) -> None:
        if self.used + len(self.cached) >= self.capacity and self.cached:
            self.cached.popitem(last=False)

    def release(self, hashes: list[int], private: int) -> None:
        for h in hashes:
            count = self.ref.get(h, 0) - 1
            if count > 0:
                self.ref[h] = count
            else:
                self.ref.pop(h, None)
                self.cached[h] = None
                self.cached.move_to_end(h)
        self.private -= private


class Scheduler:
    """The engine's step loop (see the module docstring)."""

    def __init__(self, model: LatencyModel) -> None:
        self.model = model
        self.pool = BlockPool(model.kv_blocks)
        self.waiting: collections.deque[_Request] = collections.deque()
        self.running: list[_Request] = []
        self.counters = collections.Counter[str]()
        self.ttft_counts = [0] * (len(TTFT_BUCKETS) + 1)
        self.ttft_sum = 0.0
        self._wake = asyncio.Event()

    # ----- requests -----
    def submit(self, text: str, max_tokens: int) -> _Request:
        m = self.model
        chunk = m.block_tokens * m.chars_per_token
        hashes: list[int] = []
        h = 0
        for i in range(len(text) // chunk):
            h = hash((h, text[i * chunk:(i + 1) * chunk]))
            hashes.append(h)
        req = _Request(hashes, max(1, len(text) // m.chars_per_token), max(1, max_tokens), time.monotonic())
        self.waiting.append(req)
        self._wake.set()
        return req

    def cancel(self, req: _Request) -> None:
        if req in self.running:
            self.running.remove(req)
            self.pool.release(req.shared, req.private)
        elif req in self.waiting:
            self.waiting.remove(req)

    # ----- the loop -----
    async def run(self) -> None:
        """Steps on a clock of their own: a step that ends late (the machine was busy) is made
        up by the next ones, so the engine's speed is the model's, not the host's load."""
        m = self.model
        clock = time.monotonic()
        while True:
            if not self.running and not self.waiting:
                self._wake.clear()
                await self._wake.wait()
                clock = time.monotonic()
            decoded, prefill = self._schedule()
            context = sum(r.length for r in decoded)
            clock += (m.step_s + m.per_seq_s * len(decoded) + m.per_prefill_token_s * prefill
                      + m.per_context_token_s * context)
            clock = max(clock, time.monotonic() - 0.25)  # never more than a quarter second to make up
            await asyncio.sleep(max(0.0, clock - time.monotonic()))
            self._emit(decoded)

    def _schedule(self) -> tuple[list[_Request], int]:
        m = self.model
        decoding = [r for r in self.running if not r.prefilling]
        out: list[_Request] = []
        for req in decoding:
            if req not in self.running:
                continue  # preempted by an earlier one this step
            if req.length % m.block_tokens == 0:
                while not self.pool.take_private():
                    victim = self.running[-1]
                    self._preempt(victim)
                    if victim is req:
                        break
                if req not in self.running:
                    continue
                req.private += 1
            out.append(req)
        budget = m.max_batched_tokens - len(out)
        prefill = 0
        for req in self.running:  # chunked prefill of admitted requests
            if budget <= 0:
                break
            if req.prefilling:
                n = min(budget, req.length - req.computed)
                req.computed += n
                budget -= n
                prefill += n
                if not req.prefilling:
                    out.append(req)
        while self.waiting and budget > 0 and len(self.running) < m.max_num_seqs:
            req = self.waiting[0]
            full = req.hashes[: req.length // m.block_tokens]
            blocks = -(-req.length // m.block_tokens)
            private = blocks - len(full)
            if not self.pool.fits(full, private):
                break
            self.waiting.popleft()
            hits = self.pool.leading_hits(full)
            self.pool.acquire(full, private)
            req.shared, req.private = list(full), private
            hit_tokens = min(hits * m.block_tokens, req.length - 1)
            if req.generated == 0:
                req.cached_tokens = hit_tokens
                self.counters["prefix_cache_queries"] += req.prompt_tokens
                self.counters["prefix_cache_hits"] += hit_tokens
                self.counters["prompt_tokens"] += req.prompt_tokens
            req.computed = hit_tokens
            self.running.append(req)
            n = min(budget, req.length - req.computed)
            req.computed += n
            budget -= n
            prefill += n
            if not req.prefilling:
                out.append(req)
        return out, prefill

    def _preempt(self, req: _Request) -> None:
        self.running.remove(req)
        self.pool.release(req.shared, req.private)
        req.shared, req.private, req.computed = [], 0, 0
        self.waiting.appendleft(req)
        self.counters["preemptions"] += 1

    def _emit(self, produced: list[_Request]) -> None:
        now = time.monotonic()
        interval = self.model.stream_interval
        for req in produced:
            if req not in self.running:
                continue
            req.generated += 1
            req.computed += 1
            req.pending += 1
            self.counters["generation_tokens"] += 1
            if req.first_token_t is None:
                req.first_token_t = now
                ttft = now - req.arrival
                self.ttft_counts[bisect.bisect_left(TTFT_BUCKETS, ttft)] += 1
                self.ttft_sum += ttft
            done = req.generated >= req.max_tokens
            if done or req.pending >= interval or req.generated == 1:
                req.out.put_nowait(req.pending)
                req.pending = 0
            if done:
                self.running.remove(req)
                self.pool.release(req.shared, req.private)
                self.counters["requests_finished"] += 1
                req.out.put_nowait(None)

    # ----- /metrics -----
    def metrics_text(self, model: str) -> str:
        label = f'model_name="{model}"'
        c = self.counters
        lines = [
            "# TYPE vllm:num_requests_running gauge", f"vllm:num_requests_running{{{label}}} {len(self.running)}",
            "# TYPE vllm:num_requests_waiting gauge", f"vllm:num_requests_waiting{{{label}}} {len(self.waiting)}",
            "# TYPE vllm:kv_cache_usage_perc gauge",
            f"vllm:kv_cache_usage_perc{{{label}}} {self.pool.used / self.pool.capacity:.6f}",
        ]
        for name, key in (("prompt_tokens", "prompt_tokens"), ("generation_tokens", "generation_tokens"),
                          ("prefix_cache_queries", "prefix_cache_queries"),
                          ("prefix_cache_hits", "prefix_cache_hits"), ("num_preemptions", "preemptions")):
            lines += [f"# TYPE vllm:{name} counter", f"vllm:{name}_total{{{label}}} {float(c[key])}"]
        lines += ["# TYPE vllm:request_success counter",
                  f'vllm:request_success_total{{finished_reason="length",{label}}} {float(c["requests_finished"])}',
                  "# TYPE vllm:time_to_first_token_seconds histogram"]
        total = 0
        for bound, count in zip((*TTFT_BUCKETS, float("inf")), self.ttft_counts):
            total += count
            le = "+Inf" if bound == float("inf") else repr(bound)
            lines.append(f'vllm:time_to_first_token_seconds_bucket{{le="{le}",{label}}} {float(total)}')
        lines += [f"vllm:time_to_first_token_seconds_count{{{label}}} {float(total)}",
                  f"vllm:time_to_first_token_seconds_sum{{{label}}} {self.ttft_sum}", ""]
        return "\n".join(lines)


def render(request: dict[str, Any]) -> str:
    """The prompt's text as the app's chat template lays it out: the system message, the
    tools, then the conversation."""
    messages = list(request.get("messages") or [])
    system = ""
    if messages and messages[0].get("role") == "system":
        system = str(messages[0].get("content") or "")
        messages = messages[1:]
    tools = orjson.dumps(request["tools"]).decode() if request.get("tools") else ""
    return system + tools + orjson.dumps(messages).decode()


class SimEngine(ScriptedServer):
    """The HTTP side: ``ScriptedServer``'s plumbing, chat completions and ``/metrics`` from
    the :class:`Scheduler`."""

    def __init__(self, model: LatencyModel | None = None, *, name: str = "sim", api_key: str = "sim-key",
                 max_model_len: int = 32768) -> None:
        super().__init__(model="sim", api_key=api_key, max_model_len=max_model_len)
        self.latency = model or LatencyModel()
        self.name = name
        self.scheduler: Scheduler | None = None
        self._loop_task: asyncio.Task[None] | None = None
        self._ids = itertools.count(1)

    @property
    def endpoint(self):  # type: ignore[no-untyped-def]
        return dataclasses.replace(super().endpoint, name=self.name, native_tools=True)

    async def start(self) -> SimEngine:
        self.scheduler = Scheduler(self.latency)
        self._loop_task = asyncio.create_task(self.scheduler.run(), name="sim-engine-steps")
        await super().start()
        return self

    async def aclose(self) -> None:
        await super().aclose()
        if self._loop_task is not None:
            self._loop_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._loop_task

    async def _route(self, method: str, path: str, headers: dict[str, str], body: bytes,
                     writer: asyncio.StreamWriter) -> bool:
        assert self.scheduler is not None
        if path == "/metrics":
            return await self._send(writer, 200, self.scheduler.metrics_text(self.model).encode(),
                                    "text/plain; version=0.0.4")
        if path == "/v1/chat/completions" and method == "POST" \
                and headers.get("authorization") == f"Bearer {self.api_key}":
            try:
                request = orjson.loads(body)
            except orjson.JSONDecodeError:
                return await self._send(writer, 400, self._error_body(400, "invalid JSON body"))
            return await self._simulate(writer, request)
        return await super()._route(method, path, headers, body, writer)

    async def _simulate(self, writer: asyncio.StreamWriter, request: dict[str, Any]) -> bool:
        assert self.scheduler is not None
        req = self.scheduler.submit(render(request), int(request.get("max_tokens") or 16))
        cid = f"chatcmpl-sim-{next(self._ids)}"
        base = {"id": cid, "object": "chat.completion.chunk", "created": int(time.time()), "model": self.model}

        async def event(payload: dict[str, Any] | None) -> None:
            data = b"data: " + (orjson.dumps(payload) if payload is not None else b"[DONE]") + b"\n\n"
            writer.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            await writer.drain()

        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\n"
                     b"transfer-encoding: chunked\r\n\r\n")
        try:
            await event({**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                              "finish_reason": None}]})
            while (n := await req.out.get()) is not None:
                await event({**base, "choices": [{"index": 0, "delta": {"content": "tok " * n},
                                                  "finish_reason": None}]})
            await event({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]})
            if (request.get("stream_options") or {}).get("include_usage"):
                await event({**base, "choices": [], "usage": {
                    "prompt_tokens": req.prompt_tokens, "completion_tokens": req.generated,
                    "total_tokens": req.prompt_tokens + req.generated,
                    "prompt_tokens_details": {"cached_tokens": req.cached_tokens}}})
            await event(None)
            writer.write(b"0\r\n\r\n")
            await writer.drain()
        except (ConnectionError, asyncio.CancelledError):
            self.scheduler.cancel(req)
            raise
        return True


def _model_from_args(args: argparse.Namespace) -> LatencyModel:
    fields = {f.name for f in dataclasses.fields(LatencyModel)}
    return LatencyModel(**{k: v for k, v in vars(args).items() if k in fields and v is not None})


async def _serve(args: argparse.Namespace) -> None:
    engine = SimEngine(_model_from_args(args), name=args.name, api_key=args.api_key)
    await engine.start()
    print(f"READY {engine.port}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    loop.add_reader(sys.stdin.fileno(), lambda: stop.set() if not sys.stdin.buffer.read1(1 << 16) else None)
    await stop.wait()
    await engine.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description="a simulated vLLM that saturates")
    for f in dataclasses.fields(LatencyModel):
        parser.add_argument("--" + f.name.replace("_", "-"), type=type(f.default), default=None)
    parser.add_argument("--name", default="sim")
    parser.add_argument("--api-key", default="sim-key")
    asyncio.run(_serve(parser.parse_args()))


if __name__ == "__main__":
    main()
