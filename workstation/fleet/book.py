"""Every session's record, and the one place a session changes state.

A state change is checked against the state machine (``core.session_state``), persisted
(queued to the store), counted as the router's load (finished sessions are no load), and
announced as ``SessionStateChanged``. The fleet, its drivers, its event sink and its
workspace operations all read and change sessions through the book.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

from workstation.core.errors import UserError
from workstation.core.fleet_events import SessionStateChanged
from workstation.core.session_state import IllegalTransition, SessionState as S, check_transition
from workstation.fleet.routing import Router
from workstation.fleet.session import SessionRecord
from workstation.fleet.store import Store

log = logging.getLogger(__name__)

_KEEPS_REASON = (S.FAILED, S.ENGINE_WAIT, S.NEEDS_INPUT, S.BUDGET_REACHED)
"""States whose reason is the session's standing error line."""


class SessionBook:
    def __init__(self, store: Store, router: Router, *, emit: Callable[[object], None],
                 on_change: Callable[[], None]) -> None:
        """``emit`` announces fleet events; ``on_change()`` runs after every state change (the
        fleet re-checks whether it has settled)."""
        self._store = store
        self._router = router
        self._emit = emit
        self._on_change = on_change
        self._records: dict[str, SessionRecord] = {}

    # ----- lookup -----
    def get(self, session_id: str) -> SessionRecord | None:
        return self._records.get(session_id)

    def rec(self, session_id: str) -> SessionRecord:
        """The live record, or a ``UserError`` naming the unknown id."""
        try:
            return self._records[session_id]
        except KeyError:
            raise UserError(f"no session with id {session_id!r}") from None

    def __contains__(self, session_id: object) -> bool:
        return session_id in self._records

    def __iter__(self) -> Iterator[SessionRecord]:
        """The records in tile order (creation order)."""
        return iter(sorted(self._records.values(), key=lambda r: r.position))

    def records(self) -> list[SessionRecord]:
        """A list of the live records (safe to iterate while sessions change)."""
        return list(self._records.values())

    def names(self) -> set[str]:
        return {r.name for r in self._records.values()}

    def any_in(self, state: S) -> bool:
        return any(r.state is state for r in self._records.values())

    # ----- membership -----
    def add(self, rec: SessionRecord) -> None:
        self._records[rec.session_id] = rec

    def forget(self, session_id: str) -> SessionRecord | None:
        return self._records.pop(session_id, None)

    # ----- state -----
    def set_state(self, session_id: str, new: S, reason: str = "", *, force: bool = False) -> bool:
        """Move a session to ``new``; an illegal move is ignored (logged) unless ``force``.
        True when the state changed."""
        rec = self._records.get(session_id)
        if rec is None:
            return False
        if rec.state is new:
            if new in _KEEPS_REASON and reason and reason != rec.error:
                rec.error = reason
                self._store.queue_update(session_id, error=reason)
            return False
        old = rec.state
        if not force:
            try:
                check_transition(old, new)
            except IllegalTransition as exc:
                log.debug("ignored for %s: %s (%s)", rec.name, exc, reason)
                return False
        rec.state = new
        rec.updated_at = time.time()
        if new in _KEEPS_REASON:
            rec.error = reason
        elif new in (S.QUEUED, S.RUNNING, S.READY):
            rec.error = ""
        self._store.queue_update(session_id, state=new, error=rec.error)
        self._router.set_active(session_id, not new.is_finished)
        self._emit(SessionStateChanged(session_id, old, new, reason))
        self._on_change()
        return True

    def update_spec(self, session_id: str, **changes: Any) -> SessionRecord:
        """Change settings of a session's spec (its background mark, its budget), persisted."""
        rec = self.rec(session_id)
        rec.spec = replace(rec.spec, **changes)
        self._store.queue_update(session_id, spec=rec.spec)
        return rec

    # ----- what the agent keeps besides its messages -----
    def keep_meta(self, session_id: str, meta: dict[str, Any] | None) -> None:
        rec = self._records.get(session_id)
        if rec is not None and meta is not None:
            rec.agent_meta = meta
            self._store.queue_update(session_id, agent_meta=meta)

    def note_meta(self, rec: SessionRecord, key: str, value: Any) -> None:
        if rec.agent_meta.get(key) != value:
            rec.agent_meta[key] = value
            self._store.queue_update(rec.session_id, agent_meta=dict(rec.agent_meta))
