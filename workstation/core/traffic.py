"""The shape of a workload, from the requests it made: pure statistics, no I/O.

A :class:`TrafficShape` is what the tuner optimizes for (the report's lesson: tuning
depends on the traffic). It is computed from :class:`~workstation.core.requests.RequestRecord`
(one per finished request, as the chat client saw it) and holds

- prompt and output length distributions (percentiles and log2 histograms for a chart; an
  output length is one sequence's, a request for ``n`` sequences counting its total over ``n``),
- concurrency over time (a time-weighted series, one point per ``bin_s``) and its summary,
- the request rate,
- the shared-prefix share: the part of prompt tokens that repeat the session's previous
  request. Where the client measured it (``RequestRecord.shared_prefix_tokens``: the common
  prefix of the two requests' messages) that is used — a guided agent's requests are a
  rebuilt view of the session plus a step hint, several per turn on one view, so they share
  far more, and differently, than an append-only history would. Otherwise it is estimated
  from the append-only structure (``min(prev_prompt + prev_completion, prompt)`` per follow-up
  request; a prompt shorter than the previous one means the history was condensed and counts
  as not shared). ``prefix_reuse`` is the distribution of the per-request share (percent).
  Prefixes shared *across* sessions (system prompt, tool specs) are added when the capture
  knows their length (``common_prefix_tokens``). It is what an unbounded prefix cache could hit.
- the prefix-cache hit rate the server really achieved: cached / prompt tokens where the
  server reports cached tokens, else whatever the capture measured on ``/metrics``.
- how many requests asked for several sequences at once (``n``: a small model's guided
  agent drafts six) and how many;
- how many carried a structured-outputs constraint, of which kinds (the guided protocol holds
  every request to a regex, whose grammar the engine applies at every step);
- a bounded trace (per session: offset, prompt, completion tokens, choices, shared prefix,
  constraint) that a benchmark replays.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from workstation.core.requests import RequestRecord

TRACE_LIMIT = 5000
SERIES_LIMIT = 600
SHAPE_VERSION = 3
"""2: each trace request may carry its ``choices`` (version 1 shapes load with 1).
3: and its measured shared prefix and constraint kind and size (older shapes load without:
estimated sharing, no constraint)."""


def percentile(sorted_values: Sequence[float], q: float) -> float | None:
    """Linear-interpolated percentile (``q`` in 0-100) of an already sorted sequence."""
    if not sorted_values:
        return None
    if len(sorted_values) == 1:
        return float(sorted_values[0])
    pos = (len(sorted_values) - 1) * min(max(q, 0.0), 100.0) / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    frac = pos - lo
    return float(sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * frac)


@dataclass(frozen=True, slots=True)
class Distribution:
    """Summary of one quantity (token counts, seconds …)."""

    count: int
    mean: float
    p10: float
    p50: float
    p90: float
    p99: float
    max: float
    histogram: tuple[tuple[int, int], ...] = ()
    """``(upper_edge, count)`` pairs on log2 edges (1, 2, 4 … ), for a small bar chart."""

    @classmethod
    def of(cls, values: Iterable[float], *, histogram: bool = True) -> Distribution:
        data = sorted(float(v) for v in values)
        if not data:
            return cls(0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
        hist: tuple[tuple[int, int], ...] = ()
        if histogram:
            counts: dict[int, int] = {}
            for v in data:
                edge = 1 << max(0, math.ceil(math.log2(v))) if v > 1 else 1
                counts[edge] = counts.get(edge, 0) + 1
            hist = tuple(sorted(counts.items()))
        return cls(
            count=len(data), mean=sum(data) / len(data),
            p10=percentile(data, 10) or 0.0, p50=percentile(data, 50) or 0.0,
            p90=percentile(data, 90) or 0.0, p99=percentile(data, 99) or 0.0,
            max=data[-1], histogram=hist,
        )

    def to_dict(self) -> dict[str, Any]:
        return {"count": self.count, "mean": self.mean, "p10": self.p10, "p50": self.p50,
                "p90": self.p90, "p99": self.p99, "max": self.max,
                "histogram": [list(p) for p in self.histogram]}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Distribution:
        return cls(int(d["count"]), float(d["mean"]), float(d["p10"]), float(d["p50"]),
                   float(d["p90"]), float(d["p99"]), float(d["max"]),
                   tuple((int(a), int(b)) for a, b in d.get("histogram", ())))


@dataclass(frozen=True, slots=True)
class TraceRequest:
    """One request of a captured session, relative to the capture's start."""

    offset_s: float
    prompt_tokens: int
    completion_tokens: int
    """All the request's sequences together (``choices`` of them)."""
    duration_s: float = 0.0
    choices: int = 1
    """Sequences asked for at once (the request's ``n``)."""
    shared_tokens: int | None = None
    """Prompt tokens that repeat the session's previous request (None: not measured)."""
    constraint: str | None = None
    """Its structured-outputs kind (``regex`` …), None when it carried none."""
    constraint_chars: int = 0
    reuse_of: tuple[int, int] | None = None
    """An earlier request of the trace (session position, request position) that it repeats
    more of than its own previous (a session on the same task, the same first view …)."""
    reuse_tokens: int = 0
    """How many prompt tokens it repeats of ``reuse_of``."""


@dataclass(frozen=True, slots=True)
class TrafficShape:
    name: str
    requests: int
    failed: int
    span_s: float
    request_rate_per_s: float
    sessions: int
    prompt_tokens: Distribution
    completion_tokens: Distribution
    concurrency_mean: float
    concurrency_p90: float
    concurrency_max: int
    concurrency_series: tuple[float, ...]
    """Mean number of requests in flight in each ``bin_s`` window from the start."""
    bin_s: float
    shared_prefix_share: float
    """0-1: prompt tokens that repeat an earlier request's prefix (estimate, see module doc)."""
    prefix_cache_hit_rate: float | None
    """0-1 as the server reported it (None: not reported)."""
    prefix_cache_source: str
    """``usage`` (cached tokens per request), ``metrics`` (/metrics counters) or ``none``."""
    common_prefix_tokens: int = 0
    trace: tuple[tuple[str, tuple[TraceRequest, ...]], ...] = ()
    """Per session, its requests in order (bounded to :data:`TRACE_LIMIT` requests)."""
    source: str = ""
    """Where it was captured (``fleet``, ``chat-client``, ``synthetic`` …)."""
    notes: tuple[str, ...] = field(default=())
    multi_choice_requests: int = 0
    """Requests that asked for more than one sequence (``n`` > 1)."""
    choices: Distribution = field(default_factory=lambda: Distribution.of(()))
    """The ``n`` of those requests (empty when none)."""
    constrained_requests: int = 0
    """Requests that carried a structured-outputs constraint."""
    constraint_kinds: tuple[tuple[str, int], ...] = ()
    """``(kind, requests)`` of those, most first."""
    prefix_reuse: Distribution = field(default_factory=lambda: Distribution.of(()))
    """Per follow-up request whose sharing was measured: percent of its prompt tokens that
    repeat the session's previous request (empty when not measured)."""

    # ----- derived -----
    @property
    def guided_fraction(self) -> float:
        """0-1: the share of requests that carried a structured-outputs constraint."""
        return self.constrained_requests / self.requests if self.requests else 0.0

    def suggested_concurrency(self) -> int:
        """Streams to replay with: the p90 of the observed concurrency, at least 1."""
        return max(1, round(self.concurrency_p90))

    def summary_line(self) -> str:
        hit = "n/a" if self.prefix_cache_hit_rate is None else f"{100 * self.prefix_cache_hit_rate:.0f}%"
        return (
            f"{self.name}: {self.requests} requests in {self.span_s:.0f} s from {self.sessions} sessions, "
            f"prompt p50 {self.prompt_tokens.p50:.0f} / p90 {self.prompt_tokens.p90:.0f} tok, "
            f"output p50 {self.completion_tokens.p50:.0f} / p90 {self.completion_tokens.p90:.0f} tok, "
            f"concurrency mean {self.concurrency_mean:.1f} / p90 {self.concurrency_p90:.1f} / max "
            f"{self.concurrency_max}, {self.request_rate_per_s:.2f} req/s, shared prefix "
            f"{100 * self.shared_prefix_share:.0f}%, cache hits {hit}{self._choices_part()}"
            f"{self._constraint_part()}"
        )

    def _constraint_part(self) -> str:
        if not self.constrained_requests:
            return ""
        kinds = "/".join(k for k, _ in self.constraint_kinds)
        return f", {100 * self.guided_fraction:.0f}% constrained ({kinds})"

    def _choices_part(self) -> str:
        if not self.multi_choice_requests:
            return ""
        return (f", {self.multi_choice_requests} requests for several sequences "
                f"(n p50 {self.choices.p50:.0f} / max {self.choices.max:.0f})")

    # ----- (de)serialisation -----
    def to_dict(self) -> dict[str, Any]:
        return {
            "version": SHAPE_VERSION, "name": self.name, "requests": self.requests,
            "failed": self.failed, "span_s": self.span_s,
            "request_rate_per_s": self.request_rate_per_s, "sessions": self.sessions,
            "prompt_tokens": self.prompt_tokens.to_dict(),
            "completion_tokens": self.completion_tokens.to_dict(),
            "concurrency_mean": self.concurrency_mean, "concurrency_p90": self.concurrency_p90,
            "concurrency_max": self.concurrency_max,
            "concurrency_series": list(self.concurrency_series), "bin_s": self.bin_s,
            "shared_prefix_share": self.shared_prefix_share,
            "prefix_cache_hit_rate": self.prefix_cache_hit_rate,
            "prefix_cache_source": self.prefix_cache_source,
            "common_prefix_tokens": self.common_prefix_tokens,
            "trace": [
                {"session": sid, "requests": [[r.offset_s, r.prompt_tokens, r.completion_tokens, r.duration_s,
                                               r.choices, r.shared_tokens, r.constraint, r.constraint_chars,
                                               None if r.reuse_of is None else [*r.reuse_of, r.reuse_tokens]]
                                              for r in reqs]}
                for sid, reqs in self.trace
            ],
            "source": self.source, "notes": list(self.notes),
            "multi_choice_requests": self.multi_choice_requests, "choices": self.choices.to_dict(),
            "constrained_requests": self.constrained_requests,
            "constraint_kinds": [list(k) for k in self.constraint_kinds],
            "prefix_reuse": self.prefix_reuse.to_dict(),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> TrafficShape:
        if int(d.get("version", 0)) > SHAPE_VERSION:
            raise ValueError("this traffic shape was written by a newer workstation")
        trace = tuple(
            (str(s["session"]), tuple(_trace_request(r) for r in s["requests"]))
            for s in d.get("trace", ())
        )
        hit = d.get("prefix_cache_hit_rate")
        return cls(
            name=str(d["name"]), requests=int(d["requests"]), failed=int(d.get("failed", 0)),
            span_s=float(d["span_s"]), request_rate_per_s=float(d["request_rate_per_s"]),
            sessions=int(d["sessions"]),
            prompt_tokens=Distribution.from_dict(d["prompt_tokens"]),
            completion_tokens=Distribution.from_dict(d["completion_tokens"]),
            concurrency_mean=float(d["concurrency_mean"]), concurrency_p90=float(d["concurrency_p90"]),
            concurrency_max=int(d["concurrency_max"]),
            concurrency_series=tuple(float(x) for x in d.get("concurrency_series", ())),
            bin_s=float(d.get("bin_s", 1.0)), shared_prefix_share=float(d["shared_prefix_share"]),
            prefix_cache_hit_rate=None if hit is None else float(hit),
            prefix_cache_source=str(d.get("prefix_cache_source", "none")),
            common_prefix_tokens=int(d.get("common_prefix_tokens", 0)), trace=trace,
            source=str(d.get("source", "")), notes=tuple(str(n) for n in d.get("notes", ())),
            multi_choice_requests=int(d.get("multi_choice_requests", 0)),
            choices=Distribution.from_dict(d["choices"]) if d.get("choices") else Distribution.of(()),
            constrained_requests=int(d.get("constrained_requests", 0)),
            constraint_kinds=tuple((str(k), int(n)) for k, n in d.get("constraint_kinds", ())),
            prefix_reuse=Distribution.from_dict(d["prefix_reuse"]) if d.get("prefix_reuse") else Distribution.of(()),
        )


def _trace_request(row: Sequence[Any]) -> TraceRequest:
    """``[offset, prompt, completion, duration]`` (version 1) with ``choices`` after (version 2)
    and ``shared, constraint, constraint_chars, [reuse session, request, tokens]`` after that
    (version 3)."""
    shared = row[5] if len(row) > 5 else None
    constraint = row[6] if len(row) > 6 else None
    reuse = row[8] if len(row) > 8 else None
    return TraceRequest(float(row[0]), int(row[1]), int(row[2]), float(row[3]),
                        max(1, int(row[4])) if len(row) > 4 else 1,
                        shared_tokens=None if shared is None else max(0, int(shared)),
                        constraint=None if constraint is None else str(constraint),
                        constraint_chars=max(0, int(row[7])) if len(row) > 7 else 0,
                        reuse_of=None if not reuse else (int(reuse[0]), int(reuse[1])),
                        reuse_tokens=max(0, int(reuse[2])) if reuse else 0)


# --------------------------------------------------------------------------- statistics
def concurrency_series(intervals: Sequence[tuple[float, float]], start: float, end: float,
                       bin_s: float) -> list[float]:
    """Time-weighted mean number of open intervals in each bin of ``[start, end)``."""
    if end <= start or bin_s <= 0:
        return []
    n_bins = max(1, math.ceil((end - start) / bin_s))
    busy = [0.0] * n_bins
    for a, b in intervals:
        a, b = max(a, start), min(b, end)
        if b <= a:
            continue
        first, last = int((a - start) // bin_s), min(n_bins - 1, int((b - start) // bin_s))
        for i in range(first, last + 1):
            lo, hi = start + i * bin_s, start + (i + 1) * bin_s
            busy[i] += max(0.0, min(b, hi) - max(a, lo))
    widths = [min(bin_s, end - (start + i * bin_s)) for i in range(n_bins)]
    return [busy[i] / widths[i] if widths[i] > 0 else 0.0 for i in range(n_bins)]


def max_overlap(intervals: Iterable[tuple[float, float]]) -> int:
    events = sorted([(a, 1) for a, _ in intervals] + [(b, -1) for _, b in intervals], key=lambda e: (e[0], e[1]))
    now = best = 0
    for _, step in events:
        now += step
        best = max(best, now)
    return best


def shared_with_previous(rec: RequestRecord, prev: RequestRecord | None) -> int:
    """Prompt tokens of ``rec`` that repeat ``prev``, its session's previous request: as the
    client measured it, else estimated for an append-only history (of a request for ``n``
    sequences, one sequence's share goes on in the history)."""
    if rec.shared_prefix_tokens is not None:
        return min(rec.shared_prefix_tokens, rec.prompt_tokens)
    if prev is None or rec.prompt_tokens < prev.prompt_tokens:
        return 0
    kept = math.ceil(prev.completion_tokens / max(1, prev.choices))
    return min(prev.prompt_tokens + kept, rec.prompt_tokens)


@dataclass(slots=True)
class _Sharing:
    """What the requests of a capture repeat of earlier ones, per request and in all."""

    shared_total: int = 0
    percents: list[float] = field(default_factory=list)
    """Per request whose sharing was measured: percent of its prompt repeated."""
    refs: dict[int, tuple[tuple[int, int], int]] = field(default_factory=dict)
    """``id(record)`` → (trace position of the earlier request it repeats more of than its own
    previous, tokens)."""


def _sharing(sessions: Sequence[Sequence[RequestRecord]], common_prefix_tokens: int) -> _Sharing:
    """Each request's own previous share (:func:`shared_with_previous`; a session's first one
    repeats the common prefix, but in the first session), or, where longer, what the fleet's
    ledger found it repeating of any earlier request (``reuse_tokens``)."""
    out = _Sharing()
    where = {(rec.session_id or "", rec.request_index): (si, ri)
             for si, reqs in enumerate(sessions) for ri, rec in enumerate(reqs) if rec.request_index is not None}
    for si, reqs in enumerate(sessions):
        prev: RequestRecord | None = None
        for ri, rec in enumerate(reqs):
            if prev is not None:
                own = shared_with_previous(rec, prev)
            else:
                own = min(common_prefix_tokens, rec.prompt_tokens) if si else 0
            reused = min(rec.reuse_tokens or 0, rec.prompt_tokens)
            ref = where.get(rec.reuse_of) if rec.reuse_of is not None else None
            if ref is not None and reused > own and ref != (si, ri - 1):
                out.refs[id(rec)] = (ref, reused)
            out.shared_total += max(own, reused)
            measured = rec.reuse_tokens is not None or (prev is not None and rec.shared_prefix_tokens is not None)
            if rec.prompt_tokens and measured:
                out.percents.append(100.0 * max(own, reused) / rec.prompt_tokens)
            prev = rec
    return out


def _downsample(series: list[float], limit: int) -> tuple[list[float], int]:
    factor = max(1, math.ceil(len(series) / limit))
    if factor == 1:
        return series, 1
    out = [sum(series[i:i + factor]) / len(series[i:i + factor]) for i in range(0, len(series), factor)]
    return out, factor


def shape_from_records(
    name: str,
    records: Sequence[RequestRecord],
    *,
    bin_s: float = 1.0,
    span: tuple[float, float] | None = None,
    common_prefix_tokens: int = 0,
    metrics_hit_rate: float | None = None,
    source: str = "",
    notes: Sequence[str] = (),
) -> TrafficShape:
    """Compute a :class:`TrafficShape` from finished requests.

    ``span`` is the capture window on ``time.monotonic()`` (default: first start to last end);
    ``metrics_hit_rate`` is the prefix-cache hit rate measured on ``/metrics`` during the
    capture, used when no request reported its cached tokens.
    """
    ok = [r for r in records if r.ok and (r.prompt_tokens or r.completion_tokens)]
    failed = sum(1 for r in records if not r.ok)
    if not ok:
        raise ValueError("no finished requests to compute a traffic shape from")
    ok.sort(key=lambda r: r.started_s)
    intervals = [(r.started_s, r.started_s + r.duration_s) for r in ok]
    start = span[0] if span else min(a for a, _ in intervals)
    end = span[1] if span else max(b for _, b in intervals)
    end = max(end, start + 1e-6)
    raw_series = concurrency_series(intervals, start, end, bin_s)
    series, factor = _downsample(raw_series, SERIES_LIMIT)
    conc_sorted = sorted(raw_series)
    total_time = sum(min(bin_s, end - (start + i * bin_s)) for i in range(len(raw_series)))
    conc_mean = (sum(raw_series[i] * min(bin_s, end - (start + i * bin_s)) for i in range(len(raw_series)))
                 / total_time) if total_time > 0 else 0.0

    by_session: dict[str, list[RequestRecord]] = {}
    for i, r in enumerate(ok):
        by_session.setdefault(r.session_id or f"request-{i}", []).append(r)
    prompt_total = sum(r.prompt_tokens for r in ok)
    sharing = _sharing(list(by_session.values()), common_prefix_tokens)
    share = min(1.0, sharing.shared_total / prompt_total) if prompt_total else 0.0

    reported = [r for r in ok if r.cached_tokens]
    if reported:
        hit: float | None = sum(r.cached_tokens for r in ok) / prompt_total if prompt_total else 0.0
        hit_source = "usage"
    elif metrics_hit_rate is not None:
        hit, hit_source = metrics_hit_rate, "metrics"
    else:
        hit, hit_source = None, "none"

    trace: list[tuple[str, tuple[TraceRequest, ...]]] = []
    budget = TRACE_LIMIT
    for sid, reqs in by_session.items():
        if budget <= 0:
            break
        kept = reqs[:budget]
        budget -= len(kept)
        trace.append((sid, tuple(
            TraceRequest(round(r.started_s - start, 3), r.prompt_tokens, r.completion_tokens, round(r.duration_s, 3),
                         max(1, r.choices), shared_tokens=_measured_shared(r, i), constraint=r.constraint,
                         constraint_chars=r.constraint_chars, **_reuse(sharing, r))
            for i, r in enumerate(kept))))
    multi = [r for r in ok if r.choices > 1]
    constrained = [r for r in ok if r.constraint]
    kinds: dict[str, int] = {}
    for r in constrained:
        kinds[str(r.constraint)] = kinds.get(str(r.constraint), 0) + 1
    extra_notes = list(notes)
    if budget <= 0:
        extra_notes.append(f"trace cut at {TRACE_LIMIT} requests")
    return TrafficShape(
        name=name, requests=len(ok), failed=failed, span_s=end - start,
        request_rate_per_s=len(ok) / (end - start), sessions=len(by_session),
        prompt_tokens=Distribution.of(r.prompt_tokens for r in ok),
        completion_tokens=Distribution.of(r.completion_tokens / max(1, r.choices) for r in ok),
        concurrency_mean=conc_mean, concurrency_p90=percentile(conc_sorted, 90) or 0.0,
        concurrency_max=max_overlap(intervals), concurrency_series=tuple(round(x, 3) for x in series),
        bin_s=bin_s * factor, shared_prefix_share=share, prefix_cache_hit_rate=hit,
        prefix_cache_source=hit_source, common_prefix_tokens=common_prefix_tokens,
        trace=tuple(trace), source=source, notes=tuple(extra_notes),
        multi_choice_requests=len(multi), choices=Distribution.of(r.choices for r in multi),
        constrained_requests=len(constrained),
        constraint_kinds=tuple(sorted(kinds.items(), key=lambda kv: (-kv[1], kv[0]))),
        prefix_reuse=Distribution.of(sharing.percents),
    )


def _reuse(sharing: _Sharing, rec: RequestRecord) -> dict[str, Any]:
    ref = sharing.refs.get(id(rec))
    return {} if ref is None else {"reuse_of": ref[0], "reuse_tokens": ref[1]}


def _measured_shared(rec: RequestRecord, index: int) -> int | None:
    """What the trace keeps of a request's sharing: the measured count (a session's first
    request shares nothing with a previous one of its own: 0), None when not measured."""
    if index == 0:
        return 0 if rec.shared_prefix_tokens is not None else None
    return None if rec.shared_prefix_tokens is None else min(rec.shared_prefix_tokens, rec.prompt_tokens)


def largest_token_gap(records: Iterable[RequestRecord], start_s: float, end_s: float) -> tuple[float | None, str | None]:
    """The largest silence a running session saw in ``[start_s, end_s]``: the biggest
    ``max_gap_s`` (which includes the wait for the first token) among requests that overlap
    the window, and the session that saw it. Time between a session's requests (its own tool
    runs) is not a pause of the engine and is not counted."""
    best: float | None = None
    who: str | None = None
    for r in records:
        if r.started_s + r.duration_s < start_s or r.started_s > end_s:
            continue
        if best is None or r.max_gap_s > best:
            best, who = r.max_gap_s, r.session_id
    return best, who
