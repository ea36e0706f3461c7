"""An approver that waits for a person: pending requests as futures, resolved by id.

The fleet (or the UI through it) passes ``broker.request`` as an agent's ``approver``;
the agent emits ``ApprovalRequested``; when the user decides, ``broker.resolve(id, …)``
completes the waiting call. A stopped agent cancels its waiting request, and
``broker.cancel_session(sid)`` denies all of a session's requests (e.g. on removal).
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable
from typing import Any

from workstation.core import agent_events as ev
from workstation.core.approvals import ApprovalDecision, ApprovalRequest, ToolCategory

_request_ids = itertools.count(1)


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


async def request_approval(
    approver: Callable[[ApprovalRequest], Awaitable[ApprovalDecision]] | None,
    emit: Callable[[ev.AgentEvent], None],
    *, session_id: str, call_id: str, tool: str, category: ToolCategory, arguments: dict[str, Any],
    summary: str, reason: str, on_wait: Callable[[], None] = lambda: None, preview: str = "",
) -> ApprovalDecision | None:
    """Ask ``approver`` about one action, with the events; None when nobody can approve. The
    request the approver gets is the ``ApprovalRequested`` event itself."""
    request = ev.ApprovalRequested(f"{session_id}:approval:{next(_request_ids)}", session_id, call_id, tool,
                                   category, dict(arguments), summary, reason, preview)
    emit(request)
    if approver is None:
        emit(ev.ApprovalResolved(session_id, request.request_id, False, "no one can approve in this session",
                                 by="nobody"))
        return None
    on_wait()
    decision = await approver(request)
    emit(ev.ApprovalResolved(session_id, request.request_id, decision.approved, decision.feedback,
                             decision.arguments is not None))
    return decision
