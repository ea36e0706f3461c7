"""Where each agent event of each session goes: stored (all but the per-token pieces),
counted into the session's token stats (usage; the shown pieces only where no chat client
reports generated tokens, ``fleet/stats.py``), mapped to a session state, and re-emitted as
``SessionAgentEvent`` — the hot path, one call per streamed piece.

Before a tool runs (``ToolCallStarted``) everything queued is committed, so after a crash
the tool is known to have started and is reported as interrupted instead of being run
again; a model turn that was in flight is simply missing from the history and is retried.
"""

from __future__ import annotations

from collections.abc import Callable

from workstation.core import agent_events as ev
from workstation.core.fleet_events import SessionAgentEvent
from workstation.core.session_state import SessionState as S
from workstation.fleet.book import SessionBook
from workstation.fleet.event_codec import encode, is_stored
from workstation.fleet.stats import SessionStats
from workstation.fleet.store import Store

_AGENT_TO_SESSION = {
    ev.AgentState.GENERATING: S.RUNNING,
    ev.AgentState.RUNNING_TOOL: S.RUNNING,
    ev.AgentState.AWAITING_APPROVAL: S.AWAITING_APPROVAL,
    ev.AgentState.NEEDS_INPUT: S.NEEDS_INPUT,
}
_STREAMED = (ev.TextStreamed, ev.ReasoningStreamed, ev.ToolCallStreamed)


class SessionEventSink:
    def __init__(self, book: SessionBook, store: Store, stats: SessionStats, *,
                 emit: Callable[[SessionAgentEvent], None]) -> None:
        self._book = book
        self._store = store
        self._stats = stats
        self._emit = emit

    def on_agent_event(self, session_id: str, event: object) -> None:
        rec = self._book.get(session_id)
        if rec is None:
            return
        store = self._store
        if is_stored(event):
            kind, body = encode(event)
            seq = store.append_event(session_id, kind, body)
        else:
            seq = store.last_seq(session_id)
        if isinstance(event, ev.ToolCallStarted):
            store.commit_now()
        elif isinstance(event, _STREAMED):
            self._stats.shown(session_id, event.tokens)
        elif isinstance(event, ev.UsageReported):
            rec.prompt_tokens += event.prompt_tokens
            rec.completion_tokens += event.completion_tokens
            rec.cached_tokens += event.cached_tokens
            store.queue_update(session_id, prompt_tokens=rec.prompt_tokens,
                               completion_tokens=rec.completion_tokens, cached_tokens=rec.cached_tokens)
            self._stats.usage(session_id, event)
        elif isinstance(event, ev.AgentStateChanged):
            new = _AGENT_TO_SESSION.get(event.new)
            if new is not None:
                self._book.set_state(session_id, new, event.detail or event.new.value)
        elif isinstance(event, ev.CheckpointCreated):
            store.queue_checkpoint(session_id, event.commit, event_seq=seq, label=event.label)
        elif isinstance(event, ev.TurnFinished) and event.finish_reason != "error":
            self._book.note_meta(rec, "turns", event.turn)
        elif isinstance(event, ev.ProtocolSelected):
            self._book.note_meta(rec, "protocol", event.protocol.value)
        elif isinstance(event, ev.ModeChanged):
            self._book.note_meta(rec, "mode", event.mode.value)
        self._emit(SessionAgentEvent(session_id, seq, event))
