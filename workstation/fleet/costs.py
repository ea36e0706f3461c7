"""What each session's tokens would have cost at the chosen paid API, and its budget.

The same cost model as the meters (``core/cost.py``: uncached prompt tokens at the input
price, cached ones at the cached-input price, generated ones at the output price), applied
to the session's own ``usage`` counts. The price is the one the cost panel shows
(``Meters.set_api_price``; the service factory keeps the fleet on it).

A session may have a budget in tokens (prompt + completion over its life) or in money at
that price (``SessionSpec.budget_tokens`` / ``budget_usd``). Before each model turn the gate
asks :meth:`check`: once a budget is used up the turn is refused
(:class:`~workstation.core.admission.SlotRefused`) and the session pauses in
``budget_reached`` — it continues when the user raises or clears the budget. A money budget
without a price cannot be judged and is not enforced (the pane says so).
"""

from __future__ import annotations

from workstation.core.admission import SlotRefused
from workstation.core.agent_events import RunStatus
from workstation.core.cost import ApiPrice, TokenCounts
from workstation.fleet.book import SessionBook
from workstation.fleet.session import SessionRecord


def tokens_of(rec: SessionRecord) -> TokenCounts:
    return TokenCounts(prompt_tokens=rec.prompt_tokens, cached_prompt_tokens=min(rec.cached_tokens, rec.prompt_tokens),
                       output_tokens=rec.completion_tokens)


class SessionCosts:
    def __init__(self, book: SessionBook, price: ApiPrice | None = None) -> None:
        self._book = book
        self.price = price

    def set_price(self, price: ApiPrice | None) -> None:
        self.price = price

    def cost_usd(self, rec: SessionRecord) -> float | None:
        """The session's tokens at the chosen API's prices; None without a price."""
        if self.price is None:
            return None
        return self.price.cost_usd(tokens_of(rec))

    def total(self) -> tuple[TokenCounts, float | None]:
        """Every session's tokens together, and their cost (None without a price)."""
        tokens = TokenCounts.total(tokens_of(r) for r in self._book.records())
        return tokens, self.price.cost_usd(tokens) if self.price is not None else None

    def budget_reached(self, rec: SessionRecord) -> str | None:
        """Plain words when a budget of the session is used up, else None."""
        spec = rec.spec
        used = rec.prompt_tokens + rec.completion_tokens
        if spec.budget_tokens is not None and used >= spec.budget_tokens:
            return f"budget reached: {used:,} of {spec.budget_tokens:,} tokens"
        cost = self.cost_usd(rec) if spec.budget_usd is not None else None
        if cost is not None and cost >= spec.budget_usd:  # None without a price: not judged
            return f"budget reached: ${cost:,.4f} of ${spec.budget_usd:,.4f} at {self.price.model} prices"
        return None

    def check(self, session_id: str) -> None:
        """Refuse the session's next model turn when a budget is used up."""
        rec = self._book.get(session_id)
        if rec is None:
            return
        reason = self.budget_reached(rec)
        if reason is not None:
            raise SlotRefused(reason, status=RunStatus.BUDGET_EXHAUSTED)
