"""Live token stats per session, counted once for the whole app.

The counting is :class:`~workstation.telemetry.streams.StreamCounters` (one per fleet,
``Fleet.streams``): generated tokens for the live tok/s, ``usage`` for the true counts. The
meters read the same counters, so the pane headers, the status bar, the meter strip and
the recording's caption agree.

A pane's tok/s counts the tokens the engine generated for the session, and nothing else:
where the agent factory's chat clients report them (``token_observers``: each delta's
``events`` of every request, a guided turn's hidden drafts and choices and condensing
included), those reports are the count, and what reaches the transcript is not counted.
The transcript is no measure of generation: a guided turn shows notes ("[7 drafts, 2 usable
…]"), blank lines and, after failed tests, a draft drawn turns ago (the whole code block in
one piece), each counted as a token while the engine generated nothing (0.2-0.4 t/s on
panes beside an engine counter that did not move, measured on the CPU engine); and it
shows one of the drafts it draws (7 at a time), each coalesced piece as one token (995
tokens counted where the engine generated 6,054). Only a factory whose clients do not
report (tests' scripted agents) still has its shown pieces counted. Published here as ``SessionStatsChanged``: the streamed rate
at most every ``interval_s`` per session, and quiet when idle (a session that stopped
streaming is reported once at 0 tok/s, then not again); a turn's usage at once, so a
session's totals are out before whatever its run does next (a run that ends right after
its only model turn showed 0 tokens until the next tick). Each carries the session's cost
at the chosen paid API (``fleet/costs.py``); the fleet's total follows as
``FleetCostChanged`` when it moved."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from workstation.core.fleet_events import FleetCostChanged, SessionStatsChanged, SessionSummary
from workstation.core.requests import TokenObserver
from workstation.fleet.book import SessionBook
from workstation.fleet.costs import SessionCosts
from workstation.fleet.session import SessionRecord
from workstation.telemetry.streams import StreamCounters, UsageLike

STATS_INTERVAL_S = 0.5


class SessionStats:
    def __init__(self, book: SessionBook, *, emit: Callable[[object], None],
                 interval_s: float = STATS_INTERVAL_S, streams: StreamCounters | None = None,
                 costs: SessionCosts | None = None, token_feed: list[TokenObserver] | None = None) -> None:
        """``token_feed``: the agent factory's shared list of token observers (its chat
        clients report every delta's generated tokens there); None where its agents' clients
        do not report, and the pieces the agents show are counted instead."""
        self._book = book
        self._feed = token_feed
        if token_feed is not None:
            token_feed.append(self.generated)
        self._emit = emit
        self.costs = costs or SessionCosts(book)
        self._last_total: FleetCostChanged | None = None
        self._interval_s = interval_s
        self.streams = streams or StreamCounters()
        self._dirty: set[str] = set()
        self._ticker: asyncio.Task[None] | None = None

    # ----- counting (the hot path) -----
    def generated(self, session_id: str, tokens: int) -> None:
        """The engine streamed ``tokens`` generated tokens to one of the session's requests
        (shown in its pane or not): what the pane's rate counts."""
        self.streams.on_chunk(session_id, tokens)
        self._dirty.add(session_id)

    def shown(self, session_id: str, tokens: int = 1) -> None:
        """A piece of model text reached the session's transcript (``tokens`` as its event
        says). Counted only where the clients report no generated tokens (no ``token_feed``):
        a shown piece may be no new token at all (see the module's docstring)."""
        if self._feed is None:
            self.streams.on_chunk(session_id, tokens)
            self._dirty.add(session_id)

    def usage(self, session_id: str, usage: UsageLike) -> None:
        """A model turn ended with ``usage``: the session's totals publish now (once a turn,
        not the per-token path)."""
        self.streams.on_usage(session_id, usage)
        self._dirty.discard(session_id)
        self._publish(session_id)

    # ----- reading -----
    def tokens_per_s(self, session_id: str) -> float:
        return self.streams.rate(session_id)

    def tokens_per_s_total(self) -> float:
        """Every session together (what the status bar and the recording's caption show)."""
        return self.streams.tokens_per_s()

    def summary(self, rec: SessionRecord) -> SessionSummary:
        return rec.summary(self.tokens_per_s(rec.session_id), self.costs.cost_usd(rec))

    def total(self) -> FleetCostChanged:
        """Every session's tokens together and their cost at the chosen API."""
        tokens, cost = self.costs.total()
        price = self.costs.price
        return FleetCostChanged(int(tokens.prompt_tokens), int(tokens.cached_prompt_tokens),
                                int(tokens.output_tokens), cost, price.key if price is not None else None)

    def price_changed(self) -> None:
        """The chosen API changed: every session's cost is republished at the next tick."""
        self._dirty.update(self.streams.session_ids())
        self._last_total = None

    # ----- the ticker -----
    def start(self) -> None:
        if self._ticker is None:
            self._ticker = asyncio.create_task(self._tick(), name="fleet-stats-ticker")

    async def aclose(self) -> None:
        if self._feed is not None and self.generated in self._feed:
            self._feed.remove(self.generated)  # the factory may outlive this fleet
        task, self._ticker = self._ticker, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _tick(self) -> None:
        quiet_reported: set[str] = set()
        while True:
            await asyncio.sleep(self._interval_s)
            for sid in self.streams.session_ids():
                rec = self._book.get(sid)
                if rec is None:
                    continue
                tps = self.streams.rate(sid)
                if sid not in self._dirty and tps == 0 and sid in quiet_reported:
                    continue
                if tps == 0:
                    quiet_reported.add(sid)
                else:
                    quiet_reported.discard(sid)
                self._dirty.discard(sid)
                self._emit(SessionStatsChanged(sid, rec.prompt_tokens, rec.completion_tokens,
                                               rec.cached_tokens, tps, self.costs.cost_usd(rec)))
            total = self.total()
            if total != self._last_total:
                self._last_total = total
                self._emit(total)

    def _publish(self, session_id: str) -> None:
        rec = self._book.get(session_id)
        if rec is not None:
            self._emit(SessionStatsChanged(session_id, rec.prompt_tokens, rec.completion_tokens,
                                           rec.cached_tokens, self.streams.rate(session_id),
                                           self.costs.cost_usd(rec)))
