"""One finished (or failed) model request, as the client saw it: the raw material of
throughput meters and of the traffic shape the tuner optimizes for."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RequestRecord:
    endpoint: str
    model: str
    session_id: str | None
    started_s: float
    """``time.monotonic()`` when the request was sent."""
    ttft_s: float | None
    """Seconds to the first streamed token (None if none came)."""
    duration_s: float
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    max_gap_s: float
    """Largest silence between two chunks of the stream."""
    ok: bool
    error: str | None = None
    choices: int = 1
    """Sequences the request asked for (its ``n``); ``completion_tokens`` counts them all."""
