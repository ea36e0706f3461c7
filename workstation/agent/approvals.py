"""An approver that waits for a person: pending requests as futures, resolved by id.

The fleet (or the UI through it) passes ``broker.request`` as an agent's ``approver``;
the agent emits ``ApprovalRequested``; when the user decides, ``broker.resolve(id, …)``
completes the waiting call. A stopped agent cancels its waiting request, and
``broker.cancel_session(sid)`` denies all of a session's requests (e.g. on removal).
"""

from __future__ import annotations

import asyncio

from workstation.core.approvals import ApprovalDecision, ApprovalRequest


class ApprovalBroker:
    """Pending approval requests of any number of sessions."""

    def __init__(self) -> None:
        self._pending: dict[str, tuple[ApprovalRequest, asyncio.Future[ApprovalDecision]]] = {}

    async def request(self, request: ApprovalRequest) -> ApprovalDecision:
        """The agent-side call: waits until :meth:`resolve` (or cancellation)."""
        future: asyncio.Future[ApprovalDecision] = asyncio.get_running_loop().create_future()
        self._pending[request.request_id] = (request, future)
        try:
            return await future
        finally:
            self._pending.pop(request.request_id, None)

    def pending(self, session_id: str | None = None) -> list[ApprovalRequest]:
        return [r for r, _ in self._pending.values() if session_id is None or r.session_id == session_id]

    def resolve(self, request_id: str, decision: ApprovalDecision) -> bool:
        """Answer a request; False when it is no longer pending (already answered or stopped)."""
        entry = self._pending.get(request_id)
        if entry is None or entry[1].done():
            return False
        entry[1].set_result(decision)
        return True

    def cancel_session(self, session_id: str, feedback: str = "the session was closed") -> int:
        """Deny every pending request of a session; returns how many."""
        count = 0
        for request, future in list(self._pending.values()):
            if request.session_id == session_id and not future.done():
                future.set_result(ApprovalDecision.deny(feedback))
                count += 1
        return count
