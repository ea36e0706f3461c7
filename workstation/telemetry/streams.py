"""Per-session token counters fed by the chat streams: the app's one token rate.

The fleet feeds it (``Fleet.streams``) from its agents' events; the pane headers, the
status bar, the meter strip, the meters' ``sessions.tokens_per_s`` series and the
recording's caption all read it, so they agree.

Two sources, kept apart:

* ``on_usage`` — the ``usage`` object that ends each stream (requested with
  ``stream_options.include_usage``): authoritative prompt / cached / completion counts;
* ``on_chunk`` — generated tokens as they stream: the live count of the pane's tok/s (the
  fleet feeds it each delta's token-carrying events of every request of the session,
  ``fleet/stats.py``; never the text a pane shows, which is no measure of generation).
  vLLM sends one SSE event per generated token unless ``--stream-interval`` batches them,
  but a token whose text is empty (an end-of-turn token, half a UTF-8 character) sends
  none, so events slightly undercount (measured on the CPU engine: 64 events for 64 tokens
  of one choice, 206-218 for 211-222 of six); ``usage`` then gives the true count.

The hot path (``on_chunk``) is a dict lookup and an integer add into a 0.25 s bucket.
Nothing here emits per chunk; the meters publish :meth:`snapshot` at their own rate.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from workstation.core.cost import TokenCounts

BUCKET_S = 0.25
TOKEN_RATE_WINDOW_S = 5.0
"""The trailing window of the app's token rates: each session's streamed rate here, and the
engines' ``/metrics`` generation counter (``MetricsDeriver.rate_window_s``) that the meter
strip and the meters dock show, so a pane and the strip beside it count over the same
seconds. Chosen here only; everything else defaults to it."""


class UsageLike(Protocol):
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int


@dataclass(frozen=True, slots=True)
class SessionTokens:
    session_id: str
    requests: int
    """Streams that ended with a ``usage`` object."""
    prompt_tokens: int
    cached_prompt_tokens: int
    completion_tokens: int
    streamed_chunks: int
    tokens_per_s: float
    """Live: chunks per second over the counters' window."""
    last_t_mono: float | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "requests": self.requests,
            "prompt_tokens": self.prompt_tokens,
            "cached_prompt_tokens": self.cached_prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "streamed_chunks": self.streamed_chunks,
            "tokens_per_s": round(self.tokens_per_s, 2),
        }


@dataclass(frozen=True, slots=True)
class ModelTokens:
    """Tokens of one model name: a LoRA adapter, or the base model."""

    model: str
    requests: int
    prompt_tokens: int
    cached_prompt_tokens: int
    completion_tokens: int

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model, "requests": self.requests, "prompt_tokens": self.prompt_tokens,
                "cached_prompt_tokens": self.cached_prompt_tokens, "completion_tokens": self.completion_tokens}


class _Counter:
    __slots__ = ("requests", "prompt", "cached", "completion", "chunks", "buckets", "last_t")

    def __init__(self) -> None:
        self.requests = 0
        self.prompt = 0
        self.cached = 0
        self.completion = 0
        self.chunks = 0
        self.buckets: deque[list[float]] = deque()  # [bucket_start, count]
        self.last_t: float | None = None


class StreamCounters:
    """Token counts per session; thread-unsafe by design (the event loop calls it)."""

    def __init__(self, *, window_s: float = TOKEN_RATE_WINDOW_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.window_s = window_s
        self._clock = clock
        self._sessions: dict[str, _Counter] = {}
        self._models: dict[str, list[int]] = {}

    def _get(self, session_id: str) -> _Counter:
        c = self._sessions.get(session_id)
        if c is None:
            c = self._sessions[session_id] = _Counter()
        return c

    def on_chunk(self, session_id: str, n: int = 1) -> None:
        """A streamed delta arrived for ``session_id`` (``n`` tokens, usually 1)."""
        c = self._get(session_id)
        t = self._clock()
        c.chunks += n
        c.last_t = t
        start = t - (t % BUCKET_S)
        if c.buckets and c.buckets[-1][0] == start:
            c.buckets[-1][1] += n
        else:
            c.buckets.append([start, n])
            cutoff = t - self.window_s - BUCKET_S
            while c.buckets and c.buckets[0][0] < cutoff:
                c.buckets.popleft()

    def on_usage(self, session_id: str, usage: UsageLike) -> None:
        """A stream ended with ``usage`` (the authoritative counts; also per model, where the
        usage says which: a LoRA adapter's tokens apart from the base model's)."""
        c = self._get(session_id)
        c.requests += 1
        prompt, cached = int(usage.prompt_tokens or 0), int(getattr(usage, "cached_tokens", 0) or 0)
        completion = int(usage.completion_tokens or 0)
        c.prompt += prompt
        c.cached += cached
        c.completion += completion
        c.last_t = self._clock()
        model = getattr(usage, "model", "") or ""
        if model:
            m = self._models.setdefault(model, [0, 0, 0, 0])
            m[0] += 1
            m[1] += prompt
            m[2] += cached
            m[3] += completion

    def by_model(self) -> tuple[ModelTokens, ...]:
        """Usage-reported tokens per model name (each LoRA adapter, the base model)."""
        return tuple(ModelTokens(name, *counts) for name, counts in sorted(self._models.items()))

    def forget(self, session_id: str) -> None:
        self._sessions.pop(session_id, None)

    def session_ids(self) -> list[str]:
        return list(self._sessions)

    def rate(self, session_id: str) -> float:
        """Live streamed tokens per second of one session (0 when it never streamed)."""
        c = self._sessions.get(session_id)
        return self._rate(c, self._clock()) if c is not None else 0.0

    def _rate(self, c: _Counter, now: float) -> float:
        since = now - self.window_s
        total = 0.0
        for start, n in c.buckets:
            if start + BUCKET_S > since:
                total += n
        return total / self.window_s

    def session(self, session_id: str) -> SessionTokens | None:
        c = self._sessions.get(session_id)
        if c is None:
            return None
        return self._sample(session_id, c, self._clock())

    def _sample(self, session_id: str, c: _Counter, now: float) -> SessionTokens:
        return SessionTokens(
            session_id=session_id,
            requests=c.requests,
            prompt_tokens=c.prompt,
            cached_prompt_tokens=c.cached,
            completion_tokens=c.completion,
            streamed_chunks=c.chunks,
            tokens_per_s=self._rate(c, now),
            last_t_mono=c.last_t,
        )

    def snapshot(self) -> tuple[SessionTokens, ...]:
        now = self._clock()
        return tuple(self._sample(sid, c, now) for sid, c in sorted(self._sessions.items()))

    def totals(self) -> TokenCounts:
        """Usage-reported tokens of every session together."""
        return TokenCounts(
            prompt_tokens=sum(c.prompt for c in self._sessions.values()),
            cached_prompt_tokens=sum(c.cached for c in self._sessions.values()),
            output_tokens=sum(c.completion for c in self._sessions.values()),
        )

    def tokens_per_s(self) -> float:
        """Live streamed tokens per second, all sessions together."""
        now = self._clock()
        return sum(self._rate(c, now) for c in self._sessions.values())
