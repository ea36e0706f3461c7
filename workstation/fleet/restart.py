"""Bringing the stored sessions back when the app starts again: each into the book with the
state a restart gives it (working ones are queued again, a half-made worktree is undone),
and the working ones whose endpoint is gone (another model or engine now) held back paused,
with ``SessionsMovedEndpoint`` asking a person whether they go on with the current one."""

from __future__ import annotations

from collections.abc import Callable

from workstation.core.fleet_events import SessionsMovedEndpoint
from workstation.core.session_state import RESUMED_AFTER_RESTART, SessionState as S, state_after_restart
from workstation.fleet.book import SessionBook
from workstation.fleet.routing import Router
from workstation.fleet.store import Store
from workstation.fleet.workspace_ops import WorkspaceOps


async def bring_back(store: Store, book: SessionBook, router: Router, workspaces: WorkspaceOps) -> list[str]:
    """Every stored session into ``book``; returns the ids of those to resume."""
    to_resume: list[str] = []
    for rec in await store.load_sessions():
        book.add(rec)
        if rec.endpoint_name:
            router.assign(rec.session_id, previous=rec.endpoint_name)
            router.set_active(rec.session_id, not rec.state.is_finished)
        new = state_after_restart(rec.state)
        if rec.state is S.PREPARING:
            await workspaces.undo_worktree(rec)
            rec.error = "the app stopped while the worktree was being created; remove this session"
        if new is not rec.state:
            book.set_state(rec.session_id, new, RESUMED_AFTER_RESTART, force=True)
        if new is S.QUEUED:
            to_resume.append(rec.session_id)
    return to_resume


def hold_moved(book: SessionBook, router: Router, to_resume: list[str], emit: Callable[[object], None]
               ) -> set[str]:
    """Pause the sessions of ``to_resume`` whose endpoint is gone; returns their ids."""
    names = {e.name for e in router.endpoints}
    by_previous: dict[str, list[str]] = {}
    for sid in to_resume:
        previous = book.rec(sid).endpoint_name
        if previous and previous not in names:
            by_previous.setdefault(previous, []).append(sid)
    current = router.endpoints[0].name if router.endpoints else ""
    for previous, sids in by_previous.items():
        for sid in sids:
            book.set_state(sid, S.PAUSED, f"it ran on {previous}, which is gone; resume it on {current}?",
                           force=True)
        emit(SessionsMovedEndpoint(tuple(sids), previous, current))
    return {sid for sids in by_previous.values() for sid in sids}
