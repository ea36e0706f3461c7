"""One finished (or failed) model request, as the client saw it: the raw material of
throughput meters and of the traffic shape the tuner optimizes for."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

CONSTRAINT_KINDS = ("regex", "json", "choice", "grammar", "structural_tag", "json_object")
"""vLLM's ``structured_outputs`` kinds, in the order a request's fields are looked at."""
_LEGACY_FIELDS = {"guided_regex": "regex", "guided_json": "json", "guided_choice": "choice",
                  "guided_grammar": "grammar"}


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
    constraint: str | None = None
    """The kind of structured-outputs constraint it carried (one of :data:`CONSTRAINT_KINDS`),
    None when unconstrained: the guided protocol holds every request to a regex, whose
    grammar costs the engine CPU at every step."""
    constraint_chars: int = 0
    """The constraint's size (a regex's characters, a schema's JSON), not the text itself."""
    shared_prefix_tokens: int | None = None
    """Prompt tokens that repeat the previous request of the same client (its session), as the
    client estimated them from the two requests' messages; None when not measured."""
    request_index: int | None = None
    """Its place among its client's requests (0, 1, …), what :attr:`reuse_of` points with."""
    reuse_tokens: int | None = None
    reuse_of: tuple[str, int] | None = None
    """The earlier request of the whole fleet (any session: ``(session id, request_index)``)
    whose prompt this one repeats the longest prefix of, and how many prompt tokens, at a
    prefix cache's block grain (:class:`PromptLedger`); None when no ledger was kept."""


def constraint_of(body: Mapping[str, Any]) -> tuple[str | None, int]:
    """(kind, size) of the structured-outputs constraint a request body carries: vLLM's
    ``structured_outputs``, its older ``guided_*`` fields, or OpenAI's ``response_format``."""
    spec = body.get("structured_outputs")
    if isinstance(spec, Mapping):
        for kind in CONSTRAINT_KINDS:
            value = spec.get(kind)
            if value not in (None, False):
                return kind, _size(value)
    for name, kind in _LEGACY_FIELDS.items():
        if body.get(name) is not None:
            return kind, _size(body[name])
    fmt = body.get("response_format")
    if isinstance(fmt, Mapping) and fmt.get("type") in ("json_schema", "json_object"):
        return ("json" if fmt["type"] == "json_schema" else "json_object"), _size(fmt.get("json_schema") or "")
    return None, 0


def _size(value: Any) -> int:
    if isinstance(value, str):
        return len(value)
    try:
        return len(orjson.dumps(value))
    except TypeError:
        return 0


def common_prefix_bytes(a: bytes, b: bytes) -> int:
    """Length of the common prefix of ``a`` and ``b`` (bisection over C-level compares)."""
    n = min(len(a), len(b))
    ma, mb = memoryview(a), memoryview(b)
    if ma[:n] == mb[:n]:
        return n
    lo, hi = 0, n  # ma[:lo] == mb[:lo] and ma[:hi] != mb[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if ma[:mid] == mb[:mid]:
            lo = mid
        else:
            hi = mid
    return lo


LEDGER_BLOCK_BYTES = 64
"""The ledger's unit: ~16 tokens of JSON, as a prefix cache keeps its blocks."""
LEDGER_MAX_BLOCKS = 65_536
"""Blocks kept (4 MB of prompts, as ~6 MB of hashes): 32 sessions' last few rounds of 8k-token
requests."""


class PromptLedger:
    """Which earlier request (of any session of a fleet) a new prompt repeats the longest
    prefix of, at the grain of a prefix cache's blocks: the prompts' bytes in blocks of
    :data:`LEDGER_BLOCK_BYTES`, each block's hash chained to the one before, mapped to the
    latest request that had it. O(prompt) per request; bounded (oldest blocks go first)."""

    def __init__(self, max_blocks: int = LEDGER_MAX_BLOCKS) -> None:
        self.max_blocks = max_blocks
        self._owner: OrderedDict[int, tuple[str, int]] = OrderedDict()
        """Oldest first. An OrderedDict, not a dict: evicting a dict's first key scans past
        every slot deleted before it (measured with 32-KB prompts: 14.6 ms a request once the
        ledger was full, against 0.57 ms with ``popitem(last=False)``), on the app's loop."""

    def match_and_add(self, prompt: bytes, key: tuple[str, int]) -> tuple[int, tuple[str, int] | None]:
        """(bytes of ``prompt`` that an earlier request repeated, that request's key — the
        latest one with the longest match; None when none), then ``prompt`` is recorded as ``key``'s."""
        chain = 0
        matched, owner = 0, None
        hashes: list[int] = []
        view = memoryview(prompt)
        for at in range(0, len(prompt) - LEDGER_BLOCK_BYTES + 1, LEDGER_BLOCK_BYTES):
            chain = hash((chain, bytes(view[at:at + LEDGER_BLOCK_BYTES])))
            hashes.append(chain)
            if matched == at:  # every block before matched
                seen = self._owner.get(chain)
                if seen is not None:
                    matched, owner = at + LEDGER_BLOCK_BYTES, seen
        for h in hashes:
            self._owner[h] = key
            self._owner.move_to_end(h)  # the newest request owns it, evicted last
        while len(self._owner) > self.max_blocks:
            self._owner.popitem(last=False)
        return matched, owner


class OpenRequests:
    """How many requests are open (sent, not yet finished) per endpoint, counted by the chat
    clients that share it (a fleet's agent factory gives all its clients one).

    Why a switch needs it: the engine's ``/metrics`` gauges count only what its scheduler
    holds. A request the client has sent but the API server has not handed to the scheduler
    yet (tokenizing, on a busy machine), or one the scheduler finished while the API server
    still streams its last chunks, reads as idle there; stopping the engine then cuts it.
    """

    __slots__ = ("_open",)

    def __init__(self) -> None:
        self._open: dict[str, int] = {}

    def opened(self, base_url: str) -> None:
        self._open[base_url] = self._open.get(base_url, 0) + 1

    def closed(self, base_url: str) -> None:
        left = self._open.get(base_url, 0) - 1
        if left > 0:
            self._open[base_url] = left
        else:
            self._open.pop(base_url, None)

    def on(self, base_url: str) -> int:
        """Requests open to the endpoint at ``base_url``."""
        return self._open.get(base_url, 0)


TokenObserver = Callable[[str, int], None]
"""``(session_id, tokens)``: a delta of one of a session's requests carried ``tokens``
generated tokens (its ``events``); what a fleet's panes count, from its chat clients."""
