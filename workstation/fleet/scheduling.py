"""What the user changes about how sessions are scheduled, and the check before each turn:
the focus view's session, the background mark, budgets, the paid API's price, and the
engines' ``/metrics`` readings. Kept apart from the fleet's façade: callers reach it as
``fleet.scheduling``.

It owns no state of its own; it tells the owners — :class:`~workstation.fleet.admission.Admission`
(priorities, adaptive limits), :class:`~workstation.fleet.costs.SessionCosts` (price,
budgets), :class:`~workstation.fleet.failover.Failover` (drained engines) and the book
(the session's spec) — and announces a changed spec as ``SessionSettingsChanged``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from workstation.core.cost import ApiPrice
from workstation.core.errors import UserError
from workstation.core.fleet_events import SessionSettingsChanged
from workstation.core.session_state import SessionState as S
from workstation.fleet.admission import Admission
from workstation.fleet.book import SessionBook
from workstation.fleet.costs import SessionCosts
from workstation.fleet.failover import Failover
from workstation.fleet.session import SessionRecord
from workstation.fleet.stats import SessionStats
from workstation.telemetry.vllm_metrics import EngineMetricsSample


class SessionScheduling:
    def __init__(self, *, book: SessionBook, admission: Admission, costs: SessionCosts, failover: Failover,
                 stats: SessionStats, emit: Callable[[object], None],
                 resume: Callable[[str], Awaitable[None]]) -> None:
        """``resume(session_id)`` starts a session again (one whose budget was raised)."""
        self._book = book
        self._admission = admission
        self._costs = costs
        self._failover = failover
        self._stats = stats
        self._emit = emit
        self._resume = resume

    def observe_engine(self, sample: EngineMetricsSample) -> None:
        """A scrape of an engine's ``/metrics`` (from the shared scrapers): adaptive admission
        steers by it, a failing engine is drained."""
        self._admission.observe(sample)
        self._failover.observe(sample)

    def set_focus(self, session_id: str | None) -> None:
        """The session the user watches in the focus view goes first (None: none)."""
        self._admission.focus(session_id)

    async def set_background(self, session_id: str, background: bool = True) -> None:
        """Mark a session background (its turns let the others' go first) or not."""
        self._update_spec(session_id, background=background)
        self._admission.background_changed(session_id)

    async def set_budget(self, session_id: str, *, tokens: int | None = None, usd: float | None = None) -> None:
        """A session's budget in tokens and/or money (None: none); a session paused in
        ``budget_reached`` continues when the new budget leaves room."""
        if (tokens is not None and tokens < 1) or (usd is not None and not usd > 0):
            raise UserError("a budget is a positive number of tokens or dollars")
        rec = self._update_spec(session_id, budget_tokens=tokens, budget_usd=usd)
        if rec.state is S.BUDGET_REACHED and self._costs.budget_reached(rec) is None:
            await self._resume(session_id)

    def set_price(self, price: ApiPrice | None) -> None:
        """The paid API whose prices count sessions' costs and money budgets."""
        self._costs.set_price(price)
        self._stats.price_changed()

    def check_turn(self, session_id: str) -> None:
        """Before a session queues for its next model turn: refuse it (``SlotRefused``) when
        its budget is used up or its agent runs on an engine the session has left."""
        self._costs.check(session_id)
        self._failover.check(session_id)

    def _update_spec(self, session_id: str, **changes: Any) -> SessionRecord:
        rec = self._book.update_spec(session_id, **changes)
        self._emit(SessionSettingsChanged(self._stats.summary(rec)))
        return rec
