"""What a load benchmark sends: token-exact prompts for a synthetic workload or a replay.

Prompts are lists of token ids sent to ``/v1/completions`` (vLLM accepts them), with
``ignore_eos`` so each request produces exactly the output length asked for. The ids come
from the server's own ``/tokenize`` of ordinary text, so they are real, common tokens of
the model's vocabulary; they are drawn at random per request so two prompts share a prefix
only where the workload says so.

- **Synthetic** (the report's 512/512 x 256): ``input_len`` fresh tokens after an optional
  ``shared_prefix_len`` common to every request.
- **Replay** of a captured :class:`~workstation.core.traffic.TrafficShape`: each stream
  plays one captured session after another, request by request, with the captured prompt
  and output lengths. Each prompt starts with as many tokens of the stream's previous
  request (its prompt, then the tokens the server really generated, ``return_token_ids``) as
  the captured request shared with its session's previous one, then fresh tokens up to the
  captured length; a session's first request starts with the prefix every session shares.
  So a guided agent's requests — a rebuilt view of the session plus a step hint, several
  per turn on one view — are replayed with the sharing they had, not as one growing history.
  Where the captured request repeated more of an earlier request of *another* session (the
  fleet's ledger: sessions on the same task, the same first view), it starts with that much
  of the replay's own tokens for that request, when the replay has played it.
  A trace that did not measure sharing (older shapes) keeps an append-only history like a
  tool-calling agent does: the whole previous prompt and output, unless the captured prompt
  is shorter (the agent condensed it: start over from the common prefix). A captured request
  for ``n`` sequences at once (a guided agent's drafts) is sent for ``n`` sequences of its
  total output over ``n`` each, and the history grows with the first of them, as the agent
  keeps one draft. A captured request that carried a structured-outputs constraint is sent
  with one (:func:`replay_regex`, unless the workload turns it off): the engine's grammar
  work at every step is part of what agents cost it.
- **Guided** (the built-in agent-like workload where the app's agents use the guided
  protocol, ``Workload.guided_choices``): the same replay machinery plays a built-in trace,
  :func:`guided_session` — a choice, a function's greedy and ``n`` sampled drafts, ``n``
  more after a failed test run, each held to a regex.

Contents (``Workload.content``): ``random`` draws each token at random from the pool;
``code`` takes every fresh run of tokens as one contiguous window of real source code (the
app's own Python sources, tokenized by the server). Agents' prompts are code and tool output,
and what a model writes after code repeats what it read, as agents re-emit code they just
read: the content n-gram speculation's acceptance depends on. On random tokens a model copies
little, so the evening's H200 screening measured n-gram speculation at -21 % to +19 % over
three rounds, which says nothing about agents. The replay of a captured shape uses ``code``;
the synthetic workloads of the reports it is compared with (``vllm bench serve``'s random
dataset) use ``random``.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from workstation.core.traffic import TraceRequest, TrafficShape

SAMPLE_TEXT = (
    "The quick brown fox jumps over the lazy dog while the engineers review a pull request. "
    "def read_config(path):\n    with open(path) as fh:\n        return json.load(fh)\n"
    "Every session keeps its own history, and the server caches the prefix it has seen before. "
    "class Session:\n    def __init__(self, name, repo):\n        self.name = name\n        self.repo = repo\n"
    "Tests assert behaviour; benchmarks report numbers. The model writes code, runs the tests, "
    "reads the failure, and tries again until the build is green or it asks for help. "
    "for index, line in enumerate(lines):\n    if line.startswith('#'):\n        continue\n"
    "Throughput depends on the shape of the traffic: input and output lengths, concurrency, "
    "and how much of each prompt the cache already holds. import os, sys, time, asyncio"
)
FALLBACK_IDS = tuple(range(32, 256))
CODE_TEXT_CHARS = 400_000
"""How much source text the ``code`` content tokenizes (~120k tokens for SmolLM2's tokenizer):
enough that 32 streams of 3k-token prompts rarely draw the same window twice."""


def code_text(limit_chars: int = CODE_TEXT_CHARS) -> str:
    """Real source code to draw prompts from: the app's own Python modules, in a fixed order."""
    root = Path(__file__).resolve().parents[1]
    parts: list[str] = []
    size = 0
    for path in sorted(root.rglob("*.py")):
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        parts.append(f"# {path.relative_to(root.parent)}\n{text}\n")
        size += len(parts[-1])
        if size >= limit_chars:
            break
    return "".join(parts)[:limit_chars]


REPLAY_REGEX_BODY = r"([^\n\x1e]*\n)*[^\n\x1e]*\x1e"
"""Any lines without U+001E (the record separator: code and prose never hold it), then one."""
REPLAY_REGEX_MAX_CHARS = 4096


def replay_regex(nonce: int, chars: int = 0) -> str:
    """The constraint a replayed guided request carries: one that changes nothing of what is
    generated, yet makes the engine compile a grammar and fill and apply its token bitmask at
    every step, as for the agent's own regex. The text may only end after a U+001E, which
    nothing generated contains, so the grammar never lets the end-of-sequence token through
    and never terminates (a terminated grammar stops masking): ``ignore_eos`` and
    ``max_tokens`` keep the captured length. A literal tail after the separator makes each
    request's regex its own (a guided agent's regexes differ request by request — its options,
    its function's header — and each is compiled anew) and as long as the captured one (at
    most :data:`REPLAY_REGEX_MAX_CHARS`)."""
    tag = f"{nonce & 0xFFFFFFFF:08x}"
    size = max(len(tag), min(chars, REPLAY_REGEX_MAX_CHARS) - len(REPLAY_REGEX_BODY))
    return REPLAY_REGEX_BODY + (tag * (size // len(tag) + 1))[:size]


@dataclass(frozen=True, slots=True)
class PlannedRequest:
    prompt: list[int]
    max_tokens: int
    want_ids: bool = False
    """Ask the server for the generated token ids (replay keeps them as history)."""
    choices: int = 1
    """Sequences to ask for at once (``n``); ``max_tokens`` is each one's."""
    regex: str | None = None
    """A structured-outputs regex to send with it (None: unconstrained)."""


class TokenSource:
    """Fresh tokens for prompts: random draws from a pool of ordinary token ids of the served
    model, or, given ``text`` (token ids of real text in reading order), one contiguous window
    of it per call, from a random place (wrapping at the end)."""

    def __init__(self, pool: Sequence[int], seed: int = 0, *, text: Sequence[int] | None = None) -> None:
        ids = sorted(set(int(t) for t in pool))
        if len(ids) < 8:
            ids = list(FALLBACK_IDS)
        self.pool = ids
        self.text = list(text) if text and len(text) >= 64 else None
        self.seed = seed
        self.rng = random.Random(seed)

    def fresh(self, n: int) -> list[int]:
        n = max(0, n)
        text = self.text
        if text is None:
            return self.rng.choices(self.pool, k=n)
        out: list[int] = []
        at = self.rng.randrange(len(text))
        while len(out) < n:
            out += text[at:at + n - len(out)]
            at = 0
        return out


class SyntheticStream:
    """One stream of a synthetic workload: fixed (or ranged) lengths, optional shared prefix."""

    def __init__(self, tokens: TokenSource, input_len: int, output_len: int, *, prefix: Sequence[int] = (),
                 range_ratio: float = 0.0) -> None:
        self.tokens = tokens
        self.input_len = input_len
        self.output_len = output_len
        self.prefix = list(prefix)
        self.range_ratio = max(0.0, min(range_ratio, 0.99))

    def _len(self, base: int) -> int:
        if not self.range_ratio:
            return base
        lo, hi = int(base * (1 - self.range_ratio)), int(base * (1 + self.range_ratio))
        return max(1, self.tokens.rng.randint(lo, hi))

    def next(self) -> PlannedRequest:
        return PlannedRequest(self.prefix + self.tokens.fresh(self._len(self.input_len)),
                              max(1, self._len(self.output_len)))

    def completed(self, output_ids: Sequence[int] | None) -> None:
        """Synthetic requests are independent."""


PLAYED_KEPT = 256
"""Replayed requests whose tokens the streams keep for later requests that repeat them."""


class Played:
    """The tokens (prompt, then the first sequence generated) of the replay's latest requests,
    by their place in the trace: what a later request of any stream repeats when the captured
    one repeated that request (``TraceRequest.reuse_of``). Bounded: the oldest go first."""

    def __init__(self, limit: int = PLAYED_KEPT) -> None:
        self.limit = limit
        self._tokens: dict[tuple[int, int], list[int]] = {}

    def get(self, key: tuple[int, int]) -> list[int] | None:
        return self._tokens.get(key)

    def put(self, key: tuple[int, int], tokens: list[int]) -> None:
        self._tokens.pop(key, None)
        self._tokens[key] = tokens
        while len(self._tokens) > self.limit:
            del self._tokens[next(iter(self._tokens))]


class SessionCursor:
    """The next captured session to replay, shared by the streams of one replay: a stream that
    finishes a session takes the next one in the trace's order, so over a run every session
    is replayed as often as the others and the request mix stays the captured one (streams
    that each looped over a fixed set replayed short sessions more often than long ones)."""

    def __init__(self, sessions: int, first: int) -> None:
        self.sessions = max(1, sessions)
        self._next = first

    def take(self) -> int:
        at, self._next = self._next % self.sessions, self._next + 1
        return at


class ReplayStream:
    """One stream replaying captured sessions in turn, with their captured prefix sharing."""

    def __init__(self, tokens: TokenSource, sessions: Sequence[Sequence[TraceRequest]], *, start: int,
                 step: int, common_prefix: Sequence[int] = (), max_context: int | None = None,
                 constrain: bool = True, played: Played | None = None,
                 positions: Sequence[int] | None = None, cursor: SessionCursor | None = None) -> None:
        """``played`` and ``cursor``: shared by the streams of one replay (without a cursor a
        stream goes on ``step`` sessions at a time); ``positions``: each session's place in the
        trace (default: its index), what ``reuse_of`` names."""
        if not sessions:
            raise ValueError("the traffic shape has no trace to replay")
        self.tokens = tokens
        self.sessions = sessions
        self.played = played
        self.cursor = cursor
        self.positions = list(positions) if positions is not None else list(range(len(sessions)))
        self.start = start
        self.session_index = start % len(sessions)
        self.step = max(1, step)
        self.request_index = 0
        self.common_prefix = list(common_prefix)
        self.max_context = max_context
        self.constrain = constrain
        self.history: list[int] = []
        """The previous request's prompt and the first sequence it generated (empty at a
        session's start and after a failed request)."""
        self._pending_prompt: list[int] = []
        self._pending_key: tuple[int, int] = (0, 0)
        self._sent = 0

    def _current(self) -> TraceRequest:
        reqs = self.sessions[self.session_index]
        if self.request_index >= len(reqs):
            self.session_index = (self.cursor.take() if self.cursor is not None
                                  else (self.session_index + self.step) % len(self.sessions))
            self.request_index = 0
            self.history = []
            reqs = self.sessions[self.session_index]
        return reqs[self.request_index]

    def next(self) -> PlannedRequest:
        req = self._current()
        self._pending_key = (self.positions[self.session_index], self.request_index)
        self.request_index += 1
        choices = max(1, req.choices)
        out = max(1, math.ceil(req.completion_tokens / choices))
        target = req.prompt_tokens
        if self.max_context is not None:
            out = min(out, self.max_context // 2)
            target = min(target, self.max_context - out - 1)
        target = max(1, target)
        if not self.history:
            base = self.common_prefix[:target]
        elif req.shared_tokens is not None:  # measured: that much of the previous request
            base = self.history[:min(req.shared_tokens, target)]
        elif len(self.history) > target:  # append-only, condensed: start over
            base = self.common_prefix[:target]
        else:
            base = self.history
        if req.reuse_of is not None and req.reuse_tokens > len(base) and self.played is not None:
            earlier = self.played.get(req.reuse_of)  # another session's request it repeated more of
            if earlier is not None and len(earlier) > len(base):
                base = earlier[:min(req.reuse_tokens, target)]
        prompt = base + self.tokens.fresh(target - len(base))
        self._pending_prompt = prompt
        self._sent += 1
        regex = None
        if self.constrain and req.constraint is not None:
            # its own per request, run and stream; drawn apart from the prompts' random tokens
            nonce = self.tokens.seed * 0x9E3779B1 + self.start * 65537 + self._sent
            regex = replay_regex(nonce, req.constraint_chars)
        return PlannedRequest(prompt, out, want_ids=True, choices=choices, regex=regex)

    def completed(self, output_ids: Sequence[int] | None) -> None:
        """Grow the history with what the server generated (the first sequence's ids; None: the
        request failed)."""
        if output_ids is None:
            self.history = []
            return
        self.history = self._pending_prompt + list(output_ids)
        if self.played is not None:
            self.played.put(self._pending_key, self.history)


def replay_streams(shape: TrafficShape, tokens: TokenSource, concurrency: int, *,
                   max_context: int | None = None, constrain: bool = True) -> list[ReplayStream]:
    """``constrain``: send a structured-outputs constraint where the captured request had one."""
    kept = [(at, reqs) for at, (_, reqs) in enumerate(shape.trace) if reqs]
    return _streams_of([reqs for _, reqs in kept], [at for at, _ in kept], tokens, concurrency,
                       common_prefix_tokens=shape.common_prefix_tokens, max_context=max_context,
                       constrain=constrain)


def _streams_of(sessions: Sequence[Sequence[TraceRequest]], positions: Sequence[int], tokens: TokenSource,
                concurrency: int, *, common_prefix_tokens: int, max_context: int | None,
                constrain: bool) -> list[ReplayStream]:
    common = tokens.fresh(common_prefix_tokens)
    played = Played()
    cursor = SessionCursor(len(sessions), concurrency)
    return [ReplayStream(tokens, sessions, start=i, step=concurrency, common_prefix=common,
                         max_context=max_context, constrain=constrain, played=played,
                         positions=positions, cursor=cursor) for i in range(concurrency)]


# ----- the built-in workload as the guided protocol sends it -----
# Sizes in SmolLM2 tokens, from the protocol's texts (workstation/agent/guided/) and a fleet
# capture of 4 guided sessions on the demo's tasks against the CPU engine (2026-12-02).
GUIDED_PREFIX_TOKENS = 300
"""The guided system prompt every session shares (captured: 298)."""
GUIDED_VIEW_TOKENS = 500
"""A session's own view after the prefix: the task and the file it read (captured draws'
prompts: 945-1,107 with the prefix and the request for code)."""
GUIDED_HINT_TOKENS = 24
"""The step hint a choice ends with (``[Next: rewrite the function …]``: 22)."""
GUIDED_CALL_TOKENS = 40
"""A chosen call, held to the choice's regex: 35 (``read_file``) to 47 (``replace_in_file``)."""
GUIDED_CHOICE_REGEX_CHARS = 300
"""``actions.choice_regex``: 145 for a choice of three files to read, 463 for read, edit one of
five functions, or run the tests."""
GUIDED_ASK_TOKENS = 200
"""After the view, a draw's prompt: the call chosen and the request for code (the task again,
the function as it is now)."""
GUIDED_DRAFT_TOKENS = 64
"""One draft of a function (captured, per sequence: 46-85 on average per request)."""
GUIDED_CODE_REGEX_CHARS = 77
"""``drafts.code_regex`` of a method (captured: 68-77)."""
GUIDED_FAILURE_TOKENS = 160
"""The failed test run a redraw's prompt adds (in the view, and its summary in the request)."""
GUIDED_TASK_TOKENS = 100
"""What a redraw shares with the draw before it beyond the prefix: the task (the view keeps
only the last two steps, so the read that came after the task has moved on)."""


def guided_session(view_tokens: int, draft_tokens: int, choices: int, *,
                   prefix_tokens: int = GUIDED_PREFIX_TOKENS) -> tuple[TraceRequest, ...]:
    """One guided edit, as ``turn.GuidedTurn`` sends it, as a trace to replay: the model
    chooses the call (``_choose``: one sequence, greedy), then a function's first draws
    (``_draw``: a greedy draft and ``choices`` sampled ones on the same prompt), and after the
    tests failed, ``choices`` new ones. Every request is held to a regex of the protocol's
    size (:func:`replay_regex` keeps the lengths). Steps with one possible call (the read of
    the file the task names, running the tests, finishing) send nothing, so the demo's tasks,
    which name file and function, send no choice at all; a task that does not name them does:
    one choice per edit here."""
    view = prefix_tokens + max(1, view_tokens)
    draw = view + GUIDED_ASK_TOKENS
    redraw = draw + 2 * GUIDED_FAILURE_TOKENS
    n = max(1, choices)
    return (
        TraceRequest(0.0, view + GUIDED_HINT_TOKENS, GUIDED_CALL_TOKENS, constraint="regex",
                     constraint_chars=GUIDED_CHOICE_REGEX_CHARS),
        TraceRequest(0.0, draw, draft_tokens, shared_tokens=view, constraint="regex",
                     constraint_chars=GUIDED_CODE_REGEX_CHARS),
        TraceRequest(0.0, draw, draft_tokens * n, choices=n, shared_tokens=draw, constraint="regex",
                     constraint_chars=GUIDED_CODE_REGEX_CHARS),
        TraceRequest(0.0, redraw, draft_tokens * n, choices=n, shared_tokens=prefix_tokens + GUIDED_TASK_TOKENS,
                     constraint="regex", constraint_chars=GUIDED_CODE_REGEX_CHARS),
    )


def guided_streams(tokens: TokenSource, concurrency: int, *, prefix_tokens: int, view_tokens: int,
                   draft_tokens: int, choices: int, max_context: int | None = None) -> list[ReplayStream]:
    """Streams that play :func:`guided_session` over and over (each play a new session: a
    fresh view after the shared prefix), through the replay's machinery."""
    session = guided_session(view_tokens, draft_tokens, choices, prefix_tokens=prefix_tokens)
    return _streams_of([session], [0], tokens, concurrency, common_prefix_tokens=prefix_tokens,
                       max_context=max_context, constrain=True)
