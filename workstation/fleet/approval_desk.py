"""The approvals the fleet's sessions wait for: one future per request, answered by the user.

A session's agent gets :meth:`ApprovalDesk.approver_for` as its approver. While a request
waits, the session is ``AWAITING_APPROVAL`` (``on_waiting``); once answered it runs again
(``on_answered``). Ending a session's driver withdraws its requests: their futures are
cancelled, so the agent winds down as if stopped mid-tool (never as if denied).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from workstation.core.approvals import ApprovalDecision, ApprovalRequest
from workstation.core.errors import UserError
from workstation.fleet.agent_bridge import Approver


class ApprovalDesk:
    def __init__(self, *, on_waiting: Callable[[str, str], None], on_answered: Callable[[str], None]) -> None:
        """``on_waiting(session_id, summary)`` when a request starts waiting;
        ``on_answered(session_id)`` when the user decided it."""
        self._on_waiting = on_waiting
        self._on_answered = on_answered
        self._pending: dict[tuple[str, str], tuple[ApprovalRequest, asyncio.Future[ApprovalDecision]]] = {}

    def approver_for(self, session_id: str) -> Approver:
        async def approve(request: ApprovalRequest) -> ApprovalDecision:
            fut: asyncio.Future[ApprovalDecision] = asyncio.get_running_loop().create_future()
            key = (session_id, request.request_id)
            self._pending[key] = (request, fut)
            self._on_waiting(session_id, request.summary)
            try:
                return await fut
            finally:
                self._pending.pop(key, None)
                if not fut.cancelled():
                    self._on_answered(session_id)

        return approve

    def pending(self) -> list[ApprovalRequest]:
        return [req for req, _ in self._pending.values()]

    def resolve(self, session_id: str, request_id: str, decision: ApprovalDecision) -> None:
        entry = self._pending.get((session_id, request_id))
        if entry is None:
            raise UserError("that approval is no longer pending")
        if not entry[1].done():
            entry[1].set_result(decision)

    def withdraw(self, session_id: str) -> None:
        """Cancel every request of a session that still waits."""
        for (sid, _rid), (_req, fut) in list(self._pending.items()):
            if sid == session_id and not fut.done():
                fut.cancel()
