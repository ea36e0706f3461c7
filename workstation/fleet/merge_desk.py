"""The fleet's side of the merge queue: marking sessions ready, and running the queue from
the window (``merge_queue.py`` has the git work; ``workstation merge`` runs it without a fleet).

Marking a session ready commits its uncommitted work on its branch and stamps the record
(``ready_at``, in the store, so ``workstation merge`` in another process sees it). A session
that starts working again loses the mark (its work is changing). While the queue runs, each
session's gate appears in its own transcript as a ``merge_gate`` tool call, and every
session's result is announced as ``SessionIntegrated`` (action ``merge-queue``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from workstation.core import agent_events as ev
from workstation.core.errors import UserError
from workstation.core.fleet_events import SessionIntegrated, SessionReadyChanged
from workstation.core.session_state import SessionState as S
from workstation.fleet.book import SessionBook
from workstation.fleet.gitproc import GitRunner
from workstation.fleet.merge_queue import (
    DEFAULT_GATE_TIMEOUT_S,
    MergeReport,
    QueueEvent,
    commit_for_ready,
    item_of,
    pick_ready,
    run_queue,
)
from workstation.fleet.store import Store

GATE_TOOL = "merge_gate"


def _doing(state: S) -> str:
    return "waiting for its engine" if state is S.ENGINE_WAIT else "still working"


class MergeDesk:
    def __init__(self, *, book: SessionBook, store: Store, git: GitRunner, data_dir: Path, sandbox: Any,
                 busy: Callable[[str], bool], emit: Callable[[object], None],
                 emit_event: Callable[[str, object], None]) -> None:
        """``busy(session_id)``: its agent is alive; ``emit`` announces fleet events;
        ``emit_event(session_id, agent_event)`` writes into a session's transcript."""
        self._book = book
        self._store = store
        self._git = git
        self._data_dir = data_dir
        self._sandbox = sandbox
        self._busy = busy
        self._emit = emit
        self._emit_event = emit_event
        self.running = False

    async def mark_ready(self, session_id: str, ready: bool = True, *, message: str | None = None) -> str | None:
        """Mark (or unmark) a session ready to merge; marking commits its uncommitted work
        (returns that commit, None when there was nothing to commit)."""
        rec = self._book.rec(session_id)
        commit = None
        if ready:
            if rec.state.is_working or self._busy(session_id):
                raise UserError(f"{rec.name} is {_doing(rec.state)}; pause or stop it before marking it ready")
            if not Path(rec.worktree_path).is_dir():
                raise UserError(f"the worktree of {rec.name} is gone ({rec.worktree_path})")
            commit = await commit_for_ready(self._git, rec, message)
        self._stamp(session_id, time.time() if ready else 0.0,
                    f"committed {commit[:10]}" if commit else "")
        return commit

    def working_again(self, session_id: str) -> None:
        """The session starts a run: a ready mark no longer describes its work."""
        rec = self._book.get(session_id)
        if rec is not None and rec.ready_at:
            self._stamp(session_id, 0.0, "working again")

    def _stamp(self, session_id: str, ready_at: float, message: str) -> None:
        rec = self._book.rec(session_id)
        rec.ready_at = ready_at
        self._store.queue_update(session_id, ready_at=ready_at)
        self._emit(SessionReadyChanged(session_id, bool(ready_at), message))

    async def merge_ready(self, *, into: str, gate: str, rebase: bool = False, names: Sequence[str] = (),
                          gate_timeout_s: float = DEFAULT_GATE_TIMEOUT_S, require_gate: bool = True) -> MergeReport:
        """Run the queue over the ready sessions (or ``names``, in order); a person asked for
        it, so the gate runs attended. Merged sessions lose their ready mark."""
        if self.running:
            raise UserError("the merge queue is already running")
        await self._store.flush()
        for rec in self._book.records():  # marks made by `workstation ready` in another process
            stored = await self._store.load_session(rec.session_id)
            if stored is not None and stored.ready_at != rec.ready_at:
                rec.ready_at = stored.ready_at
                self._emit(SessionReadyChanged(rec.session_id, bool(rec.ready_at)))
        records = list(self._book)
        chosen = pick_ready(records, names)
        busy = [r.name for r in chosen if self._busy(r.session_id)]
        if busy:
            raise UserError(f"still working: {', '.join(busy)}")
        by_name = {r.name: r.session_id for r in chosen}
        calls: dict[str, str] = {}
        self.running = True
        try:
            report = await run_queue(
                self._git, [item_of(r) for r in chosen], into=into, gate=gate, data_dir=self._data_dir,
                sandbox=self._sandbox, rebase=rebase, attended=True, gate_timeout_s=gate_timeout_s,
                on_event=lambda e: self._on_queue_event(e, by_name, calls), require_gate=require_gate)
        finally:
            self.running = False
        for name in report.merged:
            sid = by_name[name]
            self._stamp(sid, 0.0, f"merged into {into}")
            self._emit(SessionIntegrated(sid, "merge-queue", True, f"merged into {into} ({(report.commit or '')[:10]})"))
        if report.stopped_at is not None:
            self._emit(SessionIntegrated(by_name[report.stopped_at], "merge-queue", False, report.reason or "",
                                         report.conflicts))
        elif not report.ok and chosen:
            self._emit(SessionIntegrated(chosen[0].session_id, "merge-queue", False, report.reason or ""))
        return report

    def _on_queue_event(self, event: QueueEvent, by_name: dict[str, str], calls: dict[str, str]) -> None:
        sid = by_name.get(event.session)
        if sid is None:
            return
        if event.kind == "gate":
            call_id = calls[sid] = f"gate-{time.time_ns()}"
            self._emit_event(sid, ev.ToolCallStarted(sid, call_id, GATE_TOOL, {"command": event.text},
                                                     f"merge queue gate: {event.text}"))
        elif event.kind == "output" and sid in calls:
            self._emit_event(sid, ev.CommandOutputStreamed(sid, calls[sid], event.text))
        elif event.kind == "gate_done" and sid in calls:
            ok = event.exit_code == 0
            self._emit_event(sid, ev.ToolCallFinished(
                sid, calls.pop(sid), GATE_TOOL, "ok" if ok else "error",
                f"exit status {event.exit_code}\n{event.text.strip()}"))
