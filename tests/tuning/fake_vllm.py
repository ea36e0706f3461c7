"""A deterministic in-process stand-in for vLLM engines, over ``httpx.MockTransport``.

Each fake engine lives at its own base URL (``http://fake-<n>``) and answers what the
tuning lab uses: ``/tokenize``, ``/metrics`` (running/waiting gauges and prefix-cache
counters), ``/v1/completions`` (streamed, vLLM's continuous usage and ``token_ids``) and
``/v1/chat/completions`` (streamed, usage at the end). A completion for ``n`` > 1 sequences
interleaves its choices' chunks, each with that choice's own running usage (as vLLM does),
the last usage the sum of all, and is refused under greedy sampling (as vLLM refuses it). Tokens come every ``token_delay_s``.
:class:`FakeLauncher` imitates ``EngineLauncher`` for the safe switch (start, stop, alive).
"""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson

from workstation.core.endpoints import Endpoint
from workstation.core.profiles import Profile

_ids = itertools.count(1)


@dataclass
class FakeEngine:
    base_url: str
    token_delay_s: float = 0.005
    running: int = 0
    up: bool = True
    served: int = 0
    prompt_tokens: int = 0
    hits: int = 0
    seen_prefixes: set[tuple[int, ...]] = field(default_factory=set)
    kill_streams: bool = False
    choices_asked: list[int] = field(default_factory=list)
    """Each completion request's ``n``."""
    max_tokens_asked: list[int] = field(default_factory=list)
    prompts: list[list[int]] = field(default_factory=list)
    constraints_asked: list[dict[str, Any] | None] = field(default_factory=list)
    """Each completion request's ``structured_outputs`` (None: none)."""
    admit_delay_s: float = 0.0
    """How long a chat request stays in the API server before the scheduler counts it (its
    ``/metrics`` gauges miss it meanwhile: tokenizing on a busy machine)."""
    constrained_stop_after: int | None = None
    """End a constrained completion after this many tokens (as an engine whose grammar breaks)."""
    fail_completions: int = 0
    """Answer this many completions (the first ones) HTTP 500 with vLLM's error body."""


class FakeVllm:
    """Routes requests to fake engines by URL."""

    def __init__(self) -> None:
        self.engines: dict[str, FakeEngine] = {}

    def add(self, token_delay_s: float = 0.005) -> FakeEngine:
        engine = FakeEngine(f"http://fake-{next(_ids)}", token_delay_s)
        self.engines[engine.base_url] = engine
        return engine

    def client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(transport=httpx.MockTransport(self._handle), timeout=30.0)

    async def _handle(self, request: httpx.Request) -> httpx.Response:
        base = f"{request.url.scheme}://{request.url.host}"
        engine = self.engines.get(base)
        if engine is None or not engine.up:
            raise httpx.ConnectError("connection refused", request=request)
        path = request.url.path
        if path == "/tokenize":
            return httpx.Response(200, json={"tokens": list(range(100, 160))})
        if path == "/metrics":
            text = (
                "# TYPE vllm:num_requests_running gauge\n"
                f'vllm:num_requests_running{{model_name="m",engine="0"}} {engine.running}\n'
                "# TYPE vllm:num_requests_waiting gauge\n"
                'vllm:num_requests_waiting{model_name="m",engine="0"} 0\n'
                "# TYPE vllm:prefix_cache_queries counter\n"
                f'vllm:prefix_cache_queries_total{{model_name="m",engine="0"}} {engine.prompt_tokens}\n'
                "# TYPE vllm:prefix_cache_hits counter\n"
                f'vllm:prefix_cache_hits_total{{model_name="m",engine="0"}} {engine.hits}\n'
            )
            return httpx.Response(200, text=text)
        body = orjson.loads(request.content)
        if path == "/v1/completions":
            return self._completion(engine, body)
        if path == "/v1/chat/completions":
            return self._chat(engine, body)
        return httpx.Response(404, json={"error": {"message": "not found"}})

    def _completion(self, engine: FakeEngine, body: dict[str, Any]) -> httpx.Response:
        if engine.fail_completions > 0:
            engine.fail_completions -= 1
            return httpx.Response(500, json={"error": {"message": "EngineCore encountered an issue.",
                                                       "type": "InternalServerError", "code": 500}})
        prompt = body["prompt"]
        n = int(body["max_tokens"])
        seqs = int(body.get("n") or 1)
        if seqs > 1 and not body.get("temperature"):
            return httpx.Response(400, json={"error": {"message": f"n must be 1 when using greedy sampling, got {seqs}."}})
        engine.choices_asked.append(seqs)
        engine.max_tokens_asked.append(n)
        engine.constraints_asked.append(body.get("structured_outputs"))
        if isinstance(prompt, list):
            engine.prompts.append(list(prompt))
        if isinstance(prompt, list):
            engine.prompt_tokens += len(prompt)
            for cut in range(len(prompt) // 16, 0, -1):
                if tuple(prompt[: cut * 16]) in engine.seen_prefixes:
                    engine.hits += cut * 16
                    break
            for cut in range(1, len(prompt) // 16 + 1):
                engine.seen_prefixes.add(tuple(prompt[: cut * 16]))
        plen = len(prompt) if isinstance(prompt, list) else 1
        if body.get("structured_outputs") and engine.constrained_stop_after is not None:
            n = min(n, engine.constrained_stop_after)

        async def stream():  # type: ignore[no-untyped-def]
            engine.running += 1
            counted = True
            try:
                for i in range(n):
                    await asyncio.sleep(engine.token_delay_s)
                    if not engine.up:
                        raise httpx.RemoteProtocolError("peer closed connection without sending complete message body")
                    for index in range(seqs):
                        token = 200 + index * 50 + i % 50
                        chunk = {"choices": [{"index": index, "text": "x", "token_ids": [token]
                                              if body.get("return_token_ids") else None, "finish_reason": None}],
                                 "usage": {"prompt_tokens": plen, "completion_tokens": i + 1}}
                        yield b"data: " + orjson.dumps(chunk) + b"\n\n"
                yield b"data: " + orjson.dumps({"choices": [], "usage": {"prompt_tokens": plen,
                                                                         "completion_tokens": n * seqs}}) + b"\n\n"
                engine.served += 1
                engine.running -= 1
                counted = False
                yield b"data: [DONE]\n\n"
            finally:
                if counted:
                    engine.running -= 1

        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=stream())

    def _chat(self, engine: FakeEngine, body: dict[str, Any]) -> httpx.Response:
        n = int(body.get("max_tokens") or 8)

        async def stream():  # type: ignore[no-untyped-def]
            if engine.admit_delay_s:
                await asyncio.sleep(engine.admit_delay_s)
                if not engine.up:
                    raise httpx.RemoteProtocolError("peer closed connection without sending complete message body")
            engine.running += 1
            counted = True
            try:
                for _i in range(n):
                    await asyncio.sleep(engine.token_delay_s)
                    if not engine.up:
                        raise httpx.RemoteProtocolError("peer closed connection without sending complete message body")
                    yield b"data: " + orjson.dumps({"choices": [{"index": 0, "delta": {"content": "y"}}]}) + b"\n\n"
                yield b"data: " + orjson.dumps({"choices": [], "usage": {"prompt_tokens": 10,
                                                                         "completion_tokens": n}}) + b"\n\n"
                engine.served += 1
                engine.running -= 1
                counted = False
                yield b"data: [DONE]\n\n"
            finally:
                if counted:
                    engine.running -= 1

        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=stream())


class FakeLauncher:
    """What the safe switch needs of an ``EngineLauncher``."""

    def __init__(self, vllm: FakeVllm, profile: Profile, env: dict[str, str] | None = None, *,
                 fail_start: bool = False, start_delay_s: float = 0.05, token_delay_s: float = 0.005,
                 fail_completions: int = 0) -> None:
        self.vllm = vllm
        self.profile = profile
        self.env = dict(env or {})
        self.fail_start = fail_start
        self.start_delay_s = start_delay_s
        self.token_delay_s = token_delay_s
        self.fail_completions = fail_completions
        self.engine: FakeEngine | None = None
        self.stopped = False

    @property
    def endpoint(self) -> Endpoint:
        assert self.engine is not None
        return Endpoint(self.engine.base_url, "k", "m", name=self.profile.name)

    def alive(self) -> bool:
        return self.engine is not None and self.engine.up

    async def start(self, progress=None) -> Endpoint:  # type: ignore[no-untyped-def]
        await asyncio.sleep(self.start_delay_s)
        if self.fail_start:
            raise RuntimeError("engine exited with code 1 during start-up")
        self.engine = self.vllm.add(self.token_delay_s)
        self.engine.fail_completions = self.fail_completions
        return self.endpoint

    async def stop(self) -> None:
        self.stopped = True
        if self.engine is not None:
            self.engine.up = False
