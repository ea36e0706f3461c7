"""The app's own load generator: N streams against ``/v1/completions`` over the shared httpx
client, bounded in time and count, measured in a steady-state window.

Why not only ``vllm bench serve``: it cannot replay a captured shape with append-only
histories, it runs a whole vLLM import per run (seconds of CPU on a 2-core machine, per
repeat), and it measures until the last request ends, so the tail (fewer and fewer streams)
weighs on short runs. Here every token is timestamped as it arrives and only tokens that
arrive inside the window ``[warmup, warmup + duration]`` count; requests still running at
the end are cancelled (the server aborts them) and reported as ``cut``.

Token counts are exact: vLLM's ``continuous_usage_stats`` puts the running usage in every
chunk — with ``n`` > 1, that chunk's choice's own running count (the chunks of the choices
interleave; the last usage, without choices, sums them), so each choice is counted on its own
and every generated token once. TTFT, TPOT (per request, first token excluded), ITL (between chunks of one
choice, what a reader of it sees) and end-to-end latency are vLLM bench's definitions; goodput counts requests
that met the SLO, per second of window.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx
import orjson

from workstation.config import Settings
from workstation.core.endpoints import Endpoint
from workstation.core.traffic import TrafficShape
from workstation.core.errors import UserError
from workstation.engine.models import ModelSpec, resolve_model
from workstation.telemetry.vllm_metrics import MetricsReading, parse_metrics
from workstation.tuning.checks import agents_constrain_output
from workstation.tuning.results import BenchResult, LatencyStats, Slo, Workload
from workstation.tuning.workload import (
    GUIDED_DRAFT_TOKENS,
    GUIDED_PREFIX_TOKENS,
    GUIDED_VIEW_TOKENS,
    SAMPLE_TEXT,
    PlannedRequest,
    ReplayStream,
    SyntheticStream,
    TokenSource,
    code_text,
    guided_streams,
    replay_streams,
)

log = logging.getLogger(__name__)

HARD_LIMIT_S = 3600.0
CONTENTS = ("random", "code")
CHOICES_TEMPERATURE = 1.0
"""Sampling temperature of a request for several sequences: vLLM refuses ``n`` > 1 under greedy
sampling, and a guided agent samples its drafts at 0.7-1.2 (``ignore_eos`` keeps the lengths)."""
TOKENIZE_CHUNK_CHARS = 8_000
"""One ``/tokenize`` request's share of the code text: ~2.5k tokens, inside any context."""
_code_tokens: dict[tuple[str, str], list[int]] = {}
CODE_TOKENS_KEPT = 8
"""Endpoints whose code tokens are kept (~120k ids each; a tuning round starts a new engine,
on a new port, per change)."""


class StreamPlan(Protocol):
    def next(self) -> PlannedRequest: ...

    def completed(self, output_ids: Sequence[int] | None) -> None: ...


@dataclass(slots=True)
class RequestTiming:
    sent_s: float
    prompt_tokens: int = 0
    first_s: float | None = None
    last_s: float | None = None
    output_tokens: int = 0
    chunks: list[tuple[float, int, int]] = field(default_factory=list)
    """(arrival time, tokens in the chunk, its choice's index)."""
    output_ids: list[int] = field(default_factory=list)
    """The first sequence's generated ids (of a request for several)."""
    choices: int = 1
    choice_tokens: dict[int, int] = field(default_factory=dict)
    """Tokens counted per choice index (one entry unless it asked for several)."""
    max_tokens: int = 0
    """Each sequence's length asked for (``ignore_eos``: what it generates unless the engine ends it)."""
    done: bool = False
    error: str | None = None


class LoadError(UserError):
    """The endpoint refused the benchmark's requests (wrong key, model, or lengths): the
    user's to fix, so a verb ends with the message, not a traceback."""


async def token_pool(http: httpx.AsyncClient, endpoint: Endpoint) -> list[int]:
    """Ordinary token ids of the served model, from its ``/tokenize`` (fallback: low ids)."""
    headers = endpoint.auth_headers()
    body = {"model": endpoint.model, "prompt": SAMPLE_TEXT, "add_special_tokens": False}
    with contextlib.suppress(httpx.HTTPError, ValueError, KeyError, TypeError):
        response = await http.post(endpoint.base_url.rstrip("/") + "/tokenize", json=body, headers=headers)
        if response.status_code == 200:
            return [int(t) for t in response.json()["tokens"]]
    log.info("no /tokenize at %s; drawing prompt tokens from low ids", endpoint.base_url)
    return []


async def code_tokens(http: httpx.AsyncClient, endpoint: Endpoint) -> list[int]:
    """:func:`~workstation.tuning.workload.code_text` as the served model's token ids, by its
    own ``/tokenize`` in chunks (kept per endpoint and model; empty when it cannot tokenize)."""
    key = (endpoint.base_url, endpoint.model)
    if key in _code_tokens:
        return _code_tokens[key]
    headers = endpoint.auth_headers()
    text = code_text()
    ids: list[int] = []
    url = endpoint.base_url.rstrip("/") + "/tokenize"
    try:
        for at in range(0, len(text), TOKENIZE_CHUNK_CHARS):
            body = {"model": endpoint.model, "prompt": text[at:at + TOKENIZE_CHUNK_CHARS], "add_special_tokens": False}
            response = await http.post(url, json=body, headers=headers)
            if response.status_code != 200:
                log.info("/tokenize at %s answered %s; prompts fall back to random tokens",
                         endpoint.base_url, response.status_code)
                return []
            ids += [int(t) for t in response.json()["tokens"]]
    except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
        log.info("no /tokenize at %s (%s); prompts fall back to random tokens", endpoint.base_url, exc)
        return []
    while len(_code_tokens) >= CODE_TOKENS_KEPT:
        del _code_tokens[next(iter(_code_tokens))]  # the oldest
    _code_tokens[key] = ids
    return ids


async def read_metrics(http: httpx.AsyncClient, endpoint: Endpoint) -> MetricsReading | None:
    """One scrape of ``/metrics`` parsed by the telemetry parser (None when unavailable)."""
    headers = endpoint.auth_headers()
    try:
        response = await http.get(endpoint.base_url.rstrip("/") + "/metrics", headers=headers, timeout=5.0)
        if response.status_code != 200:
            return None
        return parse_metrics(response.text)
    except (httpx.HTTPError, ValueError):
        return None


def counter_delta(a: MetricsReading | None, b: MetricsReading | None, key: str) -> float | None:
    """How much counter ``key`` (the telemetry parser's name) grew between two readings."""
    if a is None or b is None:
        return None
    x, y = a.counter(key), b.counter(key)
    return None if x is None or y is None else y - x


def counters_delta(before: Sequence[MetricsReading | None], after: Sequence[MetricsReading | None],
                   key: str) -> float | None:
    """:func:`counter_delta` summed over several engines' readings (pairwise); None when no
    engine could say."""
    deltas = [d for a, b in zip(before, after) if (d := counter_delta(a, b, key)) is not None]
    return sum(deltas) if deltas else None


class LoadGenerator:
    """Run one bounded workload against one endpoint, or against several engines of the same
    model (stream *i* on engine *i* mod *k*, as the app keeps each session on its engine, so
    every engine's prefix cache sees its own sessions' histories); ``await run()`` returns the
    numbers, summed over the engines."""

    def __init__(
        self,
        http: httpx.AsyncClient,
        endpoint: Endpoint | Sequence[Endpoint],
        workload: Workload,
        *,
        shape: TrafficShape | None = None,
        slo: Slo | None = None,
        max_context: int | None = None,
        request_timeout_s: float = 300.0,
    ) -> None:
        if workload.guided_choices < 0 or (workload.guided_choices and workload.kind != "synthetic"):
            raise ValueError("guided_choices is the built-in synthetic workload's (a replay sends what was captured)")
        if workload.kind == "replay" and shape is None:
            raise ValueError("a replay needs the captured traffic shape")
        if workload.kind == "synthetic" and (not workload.input_len or not workload.output_len):
            raise ValueError("a synthetic workload needs input and output lengths")
        if workload.concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        if workload.content not in CONTENTS:
            raise ValueError(f"unknown prompt content {workload.content!r}; one of {', '.join(CONTENTS)}")
        if max_context and workload.kind == "synthetic":
            need = (workload.input_len or 0) + workload.shared_prefix_len + (workload.output_len or 0)
            if need > max_context:
                raise ValueError(f"{need} tokens per request do not fit the model's context of {max_context}")
        self.endpoints: tuple[Endpoint, ...] = (endpoint,) if isinstance(endpoint, Endpoint) else tuple(endpoint)
        if not self.endpoints:
            raise ValueError("a load needs at least one endpoint")
        self.http = http
        self.endpoint = self.endpoints[0]
        """The first engine: it tokenizes for all (they serve the same model)."""
        self.workload = workload
        self.shape = shape
        self.slo = slo or Slo()
        self.max_context = max_context
        self.request_timeout_s = request_timeout_s
        self.timings: list[RequestTiming] = []
        self._first_error: str | None = None

    # ----- plan -----
    async def _streams(self) -> list[StreamPlan]:
        pool = await token_pool(self.http, self.endpoint)
        w = self.workload
        text = await code_tokens(self.http, self.endpoint) if w.content == "code" else None
        if w.kind == "replay":
            assert self.shape is not None
            return list(replay_streams(self.shape, TokenSource(pool, w.seed, text=text), w.concurrency,
                                       max_context=self.max_context, constrain=w.constrained))
        if w.guided_choices:
            return list(guided_streams(TokenSource(pool, w.seed, text=text), w.concurrency,
                                       prefix_tokens=w.shared_prefix_len, view_tokens=w.input_len or 1,
                                       draft_tokens=w.output_len or 1, choices=w.guided_choices,
                                       max_context=self.max_context))
        shared = TokenSource(pool, w.seed, text=text).fresh(w.shared_prefix_len)
        return [SyntheticStream(TokenSource(pool, w.seed * 7919 + i + 1, text=text), w.input_len or 1,
                                w.output_len or 1, prefix=shared) for i in range(w.concurrency)]

    # ----- one request -----
    async def _request(self, planned: PlannedRequest, endpoint: Endpoint | None = None) -> RequestTiming:
        endpoint = endpoint or self.endpoint
        body: dict[str, Any] = {
            "model": endpoint.model, "prompt": planned.prompt, "max_tokens": planned.max_tokens,
            "stream": True, "ignore_eos": True, "temperature": 0.0,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        }
        if planned.want_ids:
            body["return_token_ids"] = True
        if planned.choices > 1:
            body["n"] = planned.choices
            body["temperature"] = CHOICES_TEMPERATURE
        if planned.regex is not None:
            body["structured_outputs"] = {"regex": planned.regex}
        headers = {"Content-Type": "application/json", **endpoint.auth_headers()}
        timing = RequestTiming(sent_s=time.monotonic(), prompt_tokens=len(planned.prompt), choices=planned.choices,
                               max_tokens=planned.max_tokens)
        counted = timing.choice_tokens
        self.timings.append(timing)
        url = endpoint.v1 + "/completions"
        try:
            async with self.http.stream("POST", url, content=orjson.dumps(body), headers=headers,
                                        timeout=httpx.Timeout(self.request_timeout_s, connect=10.0)) as response:
                if response.status_code != 200:
                    text = (await response.aread()).decode("utf-8", "replace")[:300]
                    timing.error = f"HTTP {response.status_code}: {text}"
                    return timing
                async for line in response.aiter_lines():
                    if not line.startswith("data:"):
                        continue
                    data = line[5:].strip()
                    if data == "[DONE]":
                        break
                    now = time.monotonic()
                    obj = orjson.loads(data)
                    usage = obj.get("usage") or {}
                    choices = obj.get("choices") or ()
                    if not choices:
                        continue
                    choice = choices[0]
                    index = int(choice.get("index") or 0)
                    ids = choice.get("token_ids")
                    if ids and index == 0:
                        timing.output_ids.extend(ids)
                    total = usage.get("completion_tokens")  # this choice's running count
                    before = counted.get(index, 0)
                    n = (int(total) - before) if total is not None else (len(ids) if ids else 1)
                    if usage.get("prompt_tokens"):
                        timing.prompt_tokens = int(usage["prompt_tokens"])
                    if n <= 0 and not choice.get("text"):
                        continue
                    n = max(n, 0)
                    counted[index] = before + n
                    if timing.first_s is None:
                        timing.first_s = now
                    timing.last_s = now
                    timing.output_tokens += n
                    timing.chunks.append((now, n, index))
            timing.done = True
        except (httpx.HTTPError, orjson.JSONDecodeError) as exc:
            timing.error = f"{type(exc).__name__}: {exc}"
        return timing

    # ----- the run -----
    async def _prime(self, streams: Sequence[StreamPlan]) -> None:
        """Compute a replay's common prefix once before the streams start, as the app's fleet
        primes the prefix cache with its shared system prompt before its sessions start (else
        every stream's first request computes it in the same step), on every engine. Not
        measured; a refusal shows in the run itself."""
        prefix = next((s.common_prefix for s in streams if isinstance(s, ReplayStream) and s.common_prefix), None)
        if not prefix:
            return
        await asyncio.gather(*(self._request(PlannedRequest(list(prefix), 1), e) for e in self.endpoints))
        self.timings.clear()

    async def _read_metrics(self) -> list[MetricsReading | None]:
        return list(await asyncio.gather(*(read_metrics(self.http, e) for e in self.endpoints)))

    async def run(self) -> BenchResult:
        w = self.workload
        streams = await self._streams()
        await self._prime(streams)
        t0 = time.monotonic()
        window_start = t0 + w.warmup_s
        window_end = window_start + min(w.duration_s, HARD_LIMIT_S)
        stop = asyncio.Event()
        issued = 0
        arrivals: asyncio.Queue[None] | None = asyncio.Queue() if w.request_rate_per_s else None
        metrics_at: dict[str, list[MetricsReading | None]] = {}

        async def stream_worker(plan: StreamPlan, endpoint: Endpoint) -> None:
            nonlocal issued
            while not stop.is_set():
                if arrivals is not None:
                    await arrivals.get()
                    if stop.is_set():
                        return
                if w.max_requests is not None and issued >= w.max_requests:
                    return
                issued += 1
                timing = await self._request(plan.next(), endpoint)
                if timing.error and self._first_error is None:
                    self._first_error = timing.error
                plan.completed(timing.output_ids if timing.done else None)
                if timing.error and timing.output_tokens == 0:
                    await asyncio.sleep(0.2)  # a refusing server is not hammered

        async def dispatcher() -> None:
            assert arrivals is not None and w.request_rate_per_s
            rng = random.Random(w.seed)
            while not stop.is_set():
                arrivals.put_nowait(None)
                await asyncio.sleep(rng.expovariate(w.request_rate_per_s))

        async def clock() -> None:
            await asyncio.sleep(max(0.0, window_start - time.monotonic()))
            metrics_at["start"] = await self._read_metrics()
            await asyncio.sleep(max(0.0, window_end - time.monotonic()))
            stop.set()

        engines = self.endpoints
        workers = [asyncio.create_task(stream_worker(s, engines[i % len(engines)]), name=f"loadgen-stream-{i}")
                   for i, s in enumerate(streams)]
        helpers = [asyncio.create_task(clock(), name="loadgen-clock")]
        if arrivals is not None:
            helpers.append(asyncio.create_task(dispatcher(), name="loadgen-arrivals"))
        waiter = asyncio.create_task(stop.wait(), name="loadgen-stop")
        helpers.append(waiter)
        try:
            pending: set[asyncio.Task[Any]] = {waiter, *workers}
            while waiter in pending and any(t in pending for t in workers):
                _, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            stop.set()
            t_end = min(time.monotonic(), window_end)
        finally:
            for task in [*workers, *helpers]:
                task.cancel()
            await asyncio.gather(*workers, *helpers, return_exceptions=True)
        metrics_at["end"] = await self._read_metrics()
        if not any(t.output_tokens for t in self.timings) and self._first_error:
            raise LoadError(f"the endpoint refused the benchmark's requests: {self._first_error}")
        return self._result(window_start, max(t_end, window_start + 1e-3), metrics_at)

    def _result(self, start: float, end: float, metrics_at: dict[str, list[MetricsReading | None]]) -> BenchResult:
        span = end - start
        out_tokens = sum(n for t in self.timings for (ts, n, _) in t.chunks if start <= ts <= end)
        prompt_tokens = sum(t.prompt_tokens for t in self.timings
                            if t.first_s is not None and start <= t.first_s <= end)
        completed = [t for t in self.timings if t.done and not t.error and t.last_s is not None
                     and start <= t.last_s <= end]
        failed = sum(1 for t in self.timings if t.error and t.sent_s <= end)
        cut = sum(1 for t in self.timings if not t.done and not t.error)
        ttfts = [t.first_s - t.sent_s for t in self.timings if t.first_s is not None and start <= t.first_s <= end]
        tpots: list[float] = []
        itls: list[float] = []
        e2es: list[float] = []
        good = 0
        for t in completed:
            assert t.first_s is not None and t.last_s is not None
            per_sequence = t.output_tokens / max(1, t.choices)  # n sequences decode side by side
            tpot = (t.last_s - t.first_s) / (per_sequence - 1) if per_sequence > 1 else None
            if tpot is not None:
                tpots.append(tpot)
            e2es.append(t.last_s - t.sent_s)
            if self.slo.met(t.first_s - t.sent_s, tpot):
                good += 1
        for t in self.timings:
            prev: dict[int, float] = {}  # per choice: a request for n sequences interleaves n streams
            for ts, _n, index in t.chunks:
                if index in prev and start <= ts <= end:
                    itls.append(ts - prev[index])
                prev[index] = ts
        a, b = metrics_at.get("start") or [], metrics_at.get("end") or []
        queries = counters_delta(a, b, "prefix_cache_queries")
        hits = counters_delta(a, b, "prefix_cache_hits")
        drafts = counters_delta(a, b, "spec_draft_tokens")
        accepted = counters_delta(a, b, "spec_accepted_tokens")
        notes = []
        if self._first_error:
            notes.append(f"first error: {self._first_error[:200]}")
        short = sum(1 for t in completed if t.output_tokens < t.max_tokens * t.choices)
        if short:  # ignore_eos: only the engine ends a sequence early (a constraint it could not keep …)
            notes.append(f"{short} of {len(completed)} requests ended before their length "
                         "(the engine stopped them; with structured outputs: constrained decoding broke?)")
        return BenchResult(
            tool="loadgen", workload=self.workload, profile="?", profile_args=(), profile_env=(),
            engine_version="?", platform="?", model=self.endpoint.model, hardware={},
            duration_s=span, completed=len(completed), failed=failed, cut=cut,
            output_tokens=out_tokens, prompt_tokens=prompt_tokens,
            output_tok_s=out_tokens / span, total_tok_s=(out_tokens + prompt_tokens) / span,
            requests_per_s=len(completed) / span,
            ttft=LatencyStats.of_seconds(ttfts), tpot=LatencyStats.of_seconds(tpots),
            itl=LatencyStats.of_seconds(itls), e2e=LatencyStats.of_seconds(e2es), slo=self.slo,
            goodput_req_s=good / span, goodput_pct=(100.0 * good / len(completed)) if completed else None,
            prefix_cache_hit_rate=(hits / queries) if hits is not None and queries else None,
            preemptions=counters_delta(a, b, "preemptions"),
            spec_acceptance_rate=(accepted / drafts) if accepted is not None and drafts else None,
            endpoint=" + ".join(e.base_url for e in self.endpoints), notes=tuple(notes), ended_early=short,
        )


def workload_from_shape(shape: TrafficShape, *, concurrency: int | None = None, duration_s: float = 30.0,
                        warmup_s: float = 5.0, max_requests: int | None = None, seed: int = 0,
                        keep_rate: bool = False, content: str = "code", constrained: bool = True) -> Workload:
    """A replay workload for a captured shape: its p90 concurrency, closed loop unless asked,
    prompts of code text (agents read and write code), a structured-outputs constraint on the
    requests that carried one (``constrained=False``: none)."""
    return Workload(
        kind="replay", concurrency=concurrency or shape.suggested_concurrency(), shape=shape.name,
        request_rate_per_s=shape.request_rate_per_s if keep_rate else None,
        duration_s=duration_s, warmup_s=warmup_s, max_requests=max_requests, seed=seed, content=content,
        constrained=constrained,
    )


AGENT_PREFIX_TOKENS = 1_300
"""Shared prefix of the built-in agent-like workload: the agents' system prompt and tool specs
(1,332 tokens for SmolLM2's tool-only protocol, measured with the prefix-cache priming request)."""
AGENT_TURN_TOKENS = 256
"""Each request's own part: the task and its growing history of tool results."""
AGENT_OUTPUT_TOKENS = 48
"""A turn's answer: one tool call (a path, a command, a short edit)."""
AGENT_STREAMS = 4
"""Sized for the CPU engine, where such prompts are prefill-bound: at 8 streams of 512 own
tokens the first round (the prefix not cached yet) outlasted an 8-second window on a 2-core
machine and measured 0 tok/s. ``--concurrency`` sets more where the engine is a GPU."""


def agent_like_workload(*, concurrency: int | None = None, duration_s: float = 30.0, warmup_s: float = 5.0,
                        max_requests: int | None = None, seed: int = 0, content: str = "code",
                        guided_choices: int = 0) -> Workload:
    """What to tune for before any traffic was captured: coding agents' turns — a long prefix
    every request shares, a few hundred tokens of its own, a short answer. ``guided_choices``
    (:func:`guided_agent_choices`): where the agents use the guided protocol, what it sends
    instead (:func:`~workstation.tuning.workload.guided_session`: a short guided system prompt,
    every request held to a regex, drafts drawn ``guided_choices`` at a time)."""
    lengths = (dict(input_len=GUIDED_VIEW_TOKENS, output_len=GUIDED_DRAFT_TOKENS,
                    shared_prefix_len=GUIDED_PREFIX_TOKENS) if guided_choices > 0 else
               dict(input_len=AGENT_TURN_TOKENS, output_len=AGENT_OUTPUT_TOKENS,
                    shared_prefix_len=AGENT_PREFIX_TOKENS))
    return Workload(
        kind="synthetic", concurrency=concurrency or AGENT_STREAMS, duration_s=duration_s, warmup_s=warmup_s,
        max_requests=max_requests, seed=seed, content=content, guided_choices=max(0, guided_choices), **lengths,
    )


def guided_draft_choices() -> int:
    """How many drafts at once (``n``) the guided protocol draws (the agents' configuration)."""
    from workstation.agent.config import AgentConfig

    return max(1, AgentConfig().guided_drafts)


def guided_agent_choices(settings: Settings, model: ModelSpec) -> int:
    """:func:`guided_draft_choices` where the app's agents use the guided protocol for
    ``model`` (:func:`~workstation.tuning.checks.agents_constrain_output`), else 0 (unknown
    counts as not guided: the plain built-in workload). Reads the model's files: call off the
    event loop."""
    return guided_draft_choices() if agents_constrain_output(settings, model) else 0


def agent_sequences_per_request(settings: Settings, model: ModelSpec) -> int:
    """Sequences one request of the app's agents asks ``model`` for (its ``n``): the guided
    protocol's drafts where they are guided for it, else 1. The managed engine's batch is
    sized for it (``Services.launchers``, ``workstation engine profiles``). Reads the model's
    files."""
    return max(1, guided_agent_choices(settings, model))


def workload_model(settings: Settings, name: str | None = None) -> ModelSpec:
    """The model the built-in workload is chosen for: ``name`` (a model setting, or the name an
    engine serves it by; None: the settings' model) resolved where it can be — the settings'
    own model where an engine serves it under its directory's name — else known by its name
    only (a model not prepared here, an external engine's)."""
    try:
        spec = resolve_model(settings, name)
    except UserError:
        return ModelSpec(served_name=name or settings.engine.model, source=name or settings.engine.model,
                         local_dir=None)
    if name is not None and spec.local_dir is None:
        with contextlib.suppress(UserError):
            own = resolve_model(settings)
            if own.served_name == name:
                return own
    return spec


def builtin_workload(settings: Settings | None, model: str | None = None, *, guided: bool | None = None,
                     concurrency: int | None = None, duration_s: float = 30.0, warmup_s: float = 5.0,
                     max_requests: int | None = None, content: str = "code") -> tuple[Workload, str]:
    """The built-in agent-like workload (what to measure before a shape is captured) as the
    app's agents send it to ``model`` (:func:`workload_model`; None: the settings' model):
    the guided protocol's requests where the agents are guided for it, else the plain ones
    (no settings: plain); ``guided`` True or False: that way whatever the model. With the
    words that say which and why ("as the guided protocol sends it (the app's agents are
    guided for smollm2)"). The tune and bench verbs and the Tuning dock's jobs all decide it
    here. Reads the model's files: call off the event loop."""
    why = ""
    if guided is None:
        guided = False
        if settings is not None:
            spec = workload_model(settings, model)
            guided = guided_agent_choices(settings, spec) > 0
            why = f" (the app's agents are {'' if guided else 'not '}guided for {spec.served_name})"
    workload = agent_like_workload(concurrency=concurrency, duration_s=duration_s, warmup_s=warmup_s,
                                   max_requests=max_requests, content=content,
                                   guided_choices=guided_draft_choices() if guided else 0)
    return workload, ("as the guided protocol sends it" if guided else "plain") + why
