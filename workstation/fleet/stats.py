"""Live token stats per session: tokens per second from the streamed pieces, published as
``SessionStatsChanged`` at most every ``interval_s`` per session, and quiet when idle (a
session that stopped streaming is reported once at 0 tok/s, then not again)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from workstation.core.fleet_events import SessionStatsChanged, SessionSummary
from workstation.fleet.book import SessionBook
from workstation.fleet.session import SessionRecord, TokenRate

STATS_INTERVAL_S = 0.5


class SessionStats:
    def __init__(self, book: SessionBook, *, emit: Callable[[object], None],
                 interval_s: float = STATS_INTERVAL_S) -> None:
        self._book = book
        self._emit = emit
        self._interval_s = interval_s
        self._rates: dict[str, TokenRate] = {}
        self._dirty: set[str] = set()
        self._ticker: asyncio.Task[None] | None = None

    # ----- counting (the hot path) -----
    def streamed(self, session_id: str, tokens: int = 1) -> None:
        rate = self._rates.get(session_id)
        if rate is None:
            rate = self._rates[session_id] = TokenRate()
        rate.add(tokens)
        self._dirty.add(session_id)

    def changed(self, session_id: str) -> None:
        """The session's token totals changed (publish at the next tick)."""
        self._dirty.add(session_id)

    # ----- reading -----
    def tokens_per_s(self, session_id: str) -> float:
        rate = self._rates.get(session_id)
        return rate.rate() if rate is not None else 0.0

    def summary(self, rec: SessionRecord) -> SessionSummary:
        return rec.summary(self.tokens_per_s(rec.session_id))

    # ----- the ticker -----
    def start(self) -> None:
        if self._ticker is None:
            self._ticker = asyncio.create_task(self._tick(), name="fleet-stats-ticker")

    async def aclose(self) -> None:
        task, self._ticker = self._ticker, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _tick(self) -> None:
        quiet_reported: set[str] = set()
        while True:
            await asyncio.sleep(self._interval_s)
            for sid, rate in list(self._rates.items()):
                rec = self._book.get(sid)
                if rec is None:
                    self._rates.pop(sid, None)
                    continue
                tps = rate.rate()
                if sid not in self._dirty and tps == 0 and sid in quiet_reported:
                    continue
                if tps == 0:
                    quiet_reported.add(sid)
                else:
                    quiet_reported.discard(sid)
                self._dirty.discard(sid)
                self._emit(SessionStatsChanged(sid, rec.prompt_tokens, rec.completion_tokens,
                                               rec.cached_tokens, tps))
