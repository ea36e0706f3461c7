"""Service events → Qt signals on the GUI thread, and agent events → pane documents.

The fleet emits psygnal events on the asyncio loop, which under qasync *is* the GUI
thread: they are handled at once. An event from any other thread is queued and handled
on the GUI thread at the next drain (a zero-timer, once per batch) — never one
cross-thread signal per token.

The hot path is :class:`TextStreamed`: one list append into the session's document; the
window's flush tick paints. Everything else becomes a transcript line or a Qt signal.
The bridge talks to the window only through :class:`workstation.ui.backend.SessionView`
(it never reaches into a pane), and the window reads what the bridge keeps (command output,
checkpoints) through its methods.
"""

from __future__ import annotations

import collections
import json
import logging
import threading
from dataclasses import replace
from typing import Any

from PySide6.QtCore import QObject, QTimer, Signal

from workstation.agent.tool_specs import COMPLETION_TOOL, QUESTION_TOOL, SPECS_BY_NAME, TOOL_SPECS
from workstation.agent.transcript import render_line
from workstation.core import agent_events as ev
from workstation.core.approvals import ApprovalRequest
from workstation.core import fleet_events as fe
from workstation.core.session_state import RESUMED_AFTER_RESTART, SessionState
from workstation.fleet.service import Fleet
from workstation.ui.backend import SessionView
from workstation.ui.panes.session_pane import PaneInfo, money
from workstation.ui.panes.transcript_doc import Line, LineStyle, TranscriptDoc

log = logging.getLogger(__name__)

DETAIL_MAX_CHARS = 4000
OUTPUT_MAX_CHUNKS = 2000

TOOL_MARK = {spec.name: spec.mark for spec in TOOL_SPECS}
"""The mark before each tool's line (carried by the tool's spec)."""
STATUS_MARK = {"ok": "", "error": " ✗", "denied": " ⊘ denied", "skipped": " · skipped",
               "interrupted": " · interrupted"}


def info_from_summary(summary: fe.SessionSummary) -> PaneInfo:
    repo = summary.repo_path.rstrip("/").rsplit("/", 1)[-1] if summary.repo_path else ""
    return PaneInfo(
        session_id=summary.session_id, name=summary.name, repo=repo, branch=summary.branch,
        mode=summary.mode.capitalize() if summary.mode else "", state=summary.state,
        tokens=summary.prompt_tokens + summary.completion_tokens,
        tokens_per_s=summary.tokens_per_s, detail=summary.error, ready=summary.ready, adapter=summary.adapter,
        cost_usd=summary.cost_usd, background=summary.background,
    )


def protocol_label(protocol: ev.ToolProtocol) -> str:
    """How the pane names a session's protocol: ``guided`` (small models) or ``full``."""
    return "guided" if protocol is ev.ToolProtocol.GUIDED else "full"


def tool_line(event: ev.ToolCallStarted) -> tuple[str, str]:
    """(compact line, details) for a tool call."""
    spec = SPECS_BY_NAME.get(event.tool)
    mark = spec.mark if spec is not None else "•"
    summary = event.summary or event.tool
    if spec is not None and spec.shell and summary.startswith("$ "):
        summary = summary[2:]
    counts = spec.edit_line_counts(event.arguments) if spec is not None else None
    text = f"{mark} {summary}" + (f"  +{counts[0]} −{counts[1]}" if counts else "")
    detail = json.dumps(event.arguments, indent=2, ensure_ascii=False)[:DETAIL_MAX_CHARS]
    return text, detail


def command_output(result: str) -> str:
    """The output part of a command's result (``Exit code: N\nOutput:\n…``, agent/commands.py)."""
    head, sep, body = result.partition("Output:\n")
    if not sep:
        return result
    return "" if body.strip() == "(no output)" else body


class FleetBridge(QObject):
    """Subscribes to a fleet; drives a window's panes; re-emits events as Qt signals."""

    session_created = Signal(object)
    """``SessionSummary``."""
    session_state_changed = Signal(str, object, object, str)
    """(session id, old ``SessionState``, new ``SessionState``, reason)."""
    session_removed = Signal(str)
    session_archived = Signal(str, str)
    """(session id, why): it left the grid for the archive."""
    session_unarchived = Signal(str)
    """It came back from the archive: its pane is new, its history still to load."""
    endpoint_moved = Signal(object)
    """``SessionsMovedEndpoint``: sessions wait until a person says they go on elsewhere."""
    approval_requested = Signal(str, object)
    """(session id, ``ApprovalRequested``)."""
    approval_resolved = Signal(str, object)
    slots_changed = Signal(int, int, int)
    """(generating, waiting, cap)."""
    message = Signal(str)
    """A status line for the user (attach progress, integration results, engine loss)."""
    integrated = Signal(object)
    """``SessionIntegrated``."""
    checkpoints_changed = Signal(str)
    output_appended = Signal(str, str)
    """(session id, command output text), for the focus view when it shows that session."""

    def __init__(self, fleet: Fleet, window: SessionView, parent: QObject | None = None) -> None:
        super().__init__(parent if parent is not None else window if isinstance(window, QObject) else None)
        self.fleet = fleet
        self.window = window
        self.checkpoints: dict[str, list[ev.CheckpointCreated]] = {}
        self.outputs: dict[str, collections.deque[str]] = {}
        self._docs: dict[str, TranscriptDoc] = {}
        """Each session's document (what the window gave back when it made the pane)."""
        self._last_seq: dict[str, int] = {}
        self._tool_lines: dict[tuple[str, str], Line] = {}
        self._streamed: set[tuple[str, str]] = set()
        """Commands whose output streamed live (else it comes from their stored result)."""
        self._loading: dict[str, list[fe.SessionAgentEvent]] = {}
        self._moved: list[fe.SessionsMovedEndpoint] = []
        self._resumed: set[str] = set()
        """Sessions the fleet resumed at its start (their pane says so after their history)."""
        self._held: list[fe.SessionAgentEvent] | None = []
        """Agent events that arrive before :meth:`load_existing` made the panes."""
        self._gui_thread = threading.get_ident()
        self._foreign: collections.deque[tuple[str, object]] = collections.deque()
        self._drain_timer = QTimer(self)
        self._drain_timer.setSingleShot(True)
        self._drain_timer.setInterval(0)
        self._drain_timer.timeout.connect(self._drain)
        self._wake = _Wake()
        self._wake.wake.connect(self._drain_timer.start)
        fleet.changed.connect(self._on_fleet_changed)
        fleet.agent_event.connect(self._on_agent_event)

    def close(self) -> None:
        self.fleet.changed.disconnect(self._on_fleet_changed)
        self.fleet.agent_event.disconnect(self._on_agent_event)

    # ----- what the window reads -----
    def output_of(self, session_id: str) -> str:
        """The command output a session's tools printed (the last chunks)."""
        return "".join(self.outputs.get(session_id, ()))

    def checkpoints_of(self, session_id: str) -> list[ev.CheckpointCreated]:
        return list(self.checkpoints.get(session_id, ()))

    # ----- thread guard -----
    def _on_fleet_changed(self, event: object) -> None:
        if threading.get_ident() != self._gui_thread:
            self._queue("changed", event)
            return
        self.handle_fleet_event(event)

    def _on_agent_event(self, event: fe.SessionAgentEvent) -> None:
        if threading.get_ident() != self._gui_thread:
            self._queue("agent", event)
            return
        self.handle_agent_event(event)

    def _queue(self, kind: str, event: object) -> None:
        first = not self._foreign
        self._foreign.append((kind, event))
        if first:
            self._wake.wake.emit()  # one queued signal per batch, not per event

    def _drain(self) -> None:
        while self._foreign:
            kind, event = self._foreign.popleft()
            if kind == "changed":
                self.handle_fleet_event(event)
            else:
                self.handle_agent_event(event)  # type: ignore[arg-type]

    # ----- the sessions that exist when the window opens -----
    async def load_existing(self) -> None:
        """Panes for the fleet's sessions, each with its stored transcript."""
        shown = [s for s in self.fleet.sessions() if not s.archived]  # the archive stays out of the grid
        for summary in shown:
            self._add(summary)
        for summary in shown:
            await self.load_history(summary.session_id)
            doc = self._docs.get(summary.session_id)
            if summary.session_id in self._resumed and doc is not None:
                doc.add_line("resumed after the restart: the agent goes on from its history", LineStyle.NOTICE)
        held, self._held = self._held or [], None
        for item in held:
            self._apply(item.session_id, item.seq, item.event, live=True)
        for request in self.fleet.pending_approvals():
            self._show_approval_request(request)
        moved, self._moved = self._moved, []
        for event in moved:
            self.endpoint_moved.emit(event)

    async def load_history(self, session_id: str) -> None:
        self._loading[session_id] = []
        try:
            rows = await self.fleet.transcript(session_id)
        except Exception:  # noqa: BLE001 - a broken history must not stop the window
            log.exception("cannot load the history of %s", session_id)
            rows = []
        buffered = self._loading.pop(session_id, [])
        for seq, event in rows:
            self._apply(session_id, seq, event, live=False)
        for item in buffered:
            self._apply(item.session_id, item.seq, item.event, live=True)

    # ----- fleet events -----
    def handle_fleet_event(self, event: object) -> None:
        window = self.window
        if isinstance(event, fe.SessionCreated):
            self._add(event.summary)
            self.session_created.emit(event.summary)
        elif isinstance(event, fe.SessionStateChanged):
            if event.reason == RESUMED_AFTER_RESTART:
                self._resumed.add(event.session_id)
            info = window.session_info(event.session_id)
            if info is not None:
                info = replace(info, state=event.new, detail=event.reason,
                               waiting_for=info.waiting_for if event.new.wants_user else "")
                if not event.new.wants_user:
                    window.clear_approval(event.session_id)
                window.update_session(info, event.reason)
            self.session_state_changed.emit(event.session_id, event.old, event.new, event.reason)
        elif isinstance(event, fe.SessionStatsChanged):
            window.update_stats(event.session_id, event.prompt_tokens + event.completion_tokens, event.tokens_per_s,
                                event.cost_usd)
        elif isinstance(event, fe.SessionWaitChanged):
            info = window.session_info(event.session_id)
            if info is not None and info.state is SessionState.QUEUED:
                window.update_session(replace(info, detail=event.reason))
        elif isinstance(event, fe.FleetCostChanged):
            if event.cost_usd is not None and event.api_model:
                window.set_fleet_cost(f"{money(event.cost_usd)} at {event.api_model.rsplit('/', 1)[-1]} prices")
        elif isinstance(event, fe.SessionSettingsChanged):
            self._update_info(event.summary.session_id, background=event.summary.background)
        elif isinstance(event, fe.SessionMoved):
            info = window.session_info(event.session_id)
            name = info.name if info is not None else event.session_id
            self.message.emit(f"{name} moved from engine {event.from_endpoint} to {event.to_endpoint}")
        elif isinstance(event, fe.SessionRemoved):
            self._drop_pane(event.session_id)
            self.session_removed.emit(event.session_id)
        elif isinstance(event, fe.SessionArchived):
            self._archived(event)
        elif isinstance(event, fe.SessionsMovedEndpoint):
            if self._held is not None:  # before the panes exist: asked once they do
                self._moved.append(event)
            else:
                self.endpoint_moved.emit(event)
        elif isinstance(event, fe.SessionRenamed):
            self._update_info(event.session_id, name=event.name)
        elif isinstance(event, fe.GenerationSlotsChanged):
            self.slots_changed.emit(event.generating, event.waiting, event.cap)
        elif isinstance(event, fe.AttachProgress):
            pct = f" {event.fraction * 100:.0f}%" if event.fraction is not None else ""
            self.message.emit(f"{event.phase}: {event.message}{pct}")
        elif isinstance(event, fe.EndpointAvailabilityChanged):
            word = "is back" if event.available else "stopped answering"
            self.message.emit(f"engine {event.endpoint_name} {word}" + (f": {event.message}" if event.message else ""))
        elif isinstance(event, fe.SessionIntegrated):
            info = window.session_info(event.session_id)
            name = info.name if info is not None else event.session_id
            verdict = "done" if event.ok else "refused"
            extra = f" (conflicts: {', '.join(event.conflicts)})" if event.conflicts else ""
            self.message.emit(f"{event.action} of {name} {verdict}: {event.message}{extra}")
            self.integrated.emit(event)
        elif isinstance(event, (fe.SessionReadyChanged, fe.DevServerChanged)):
            self._worktree_tool_changed(event)
        elif isinstance(event, fe.OrphanWorktreesFound):
            if event.orphans:
                self.message.emit(f"{len(event.orphans)} worktree(s) no session owns; see Sessions → Clean up")

    def _archived(self, event: fe.SessionArchived) -> None:
        """Out of the grid into the archive (its pane goes), or back (a new pane)."""
        if event.note:
            info = self.window.session_info(event.session_id)
            if info is None:
                return
            self._drop_pane(event.session_id)
            self.message.emit(f"{info.name} went to the archive: {event.note}")
            self.session_archived.emit(event.session_id, event.note)
            return
        summary = self.fleet.summary(event.session_id)
        if summary.session_id in self._docs:
            return
        self._last_seq.pop(event.session_id, None)  # its whole history loads into the new pane
        self._add(summary)
        self.message.emit(f"{summary.name} is back in the grid")
        self.session_unarchived.emit(event.session_id)

    def _worktree_tool_changed(self, event: fe.SessionReadyChanged | fe.DevServerChanged) -> None:
        info = self.window.session_info(event.session_id)
        name = info.name if info is not None else event.session_id
        if isinstance(event, fe.SessionReadyChanged):
            self._update_info(event.session_id, ready=event.ready)
            word = "ready to merge" if event.ready else "no longer marked ready"
            self.message.emit(f"{name} {word}" + (f" ({event.message})" if event.message else ""))
        else:
            self._update_info(event.session_id, server_url=event.url if event.running else "")
            self.message.emit(f"{name}: dev server at {event.message}" if event.running
                              else f"{name}: {event.message}")

    def _add(self, summary: fe.SessionSummary) -> None:
        if summary.session_id in self._docs:
            self.window.update_session(info_from_summary(summary))
            return
        doc = self._docs[summary.session_id] = self.window.add_session(info_from_summary(summary))
        if summary.task and not doc.lines:
            doc.add_block(summary.task, LineStyle.USER)

    # ----- agent events -----
    def handle_agent_event(self, item: fe.SessionAgentEvent) -> None:
        if self._held is not None:
            self._held.append(item)
            return
        event = item.event
        if type(event) is ev.TextStreamed:  # the hot path first
            if item.session_id in self._loading:
                self._loading[item.session_id].append(item)
                return
            doc = self._docs.get(item.session_id)
            if doc is not None:
                doc.stream(event.text, event.tokens)
            self._last_seq[item.session_id] = item.seq
            return
        if item.session_id in self._loading:
            self._loading[item.session_id].append(item)
            return
        self._apply(item.session_id, item.seq, event, live=True)

    def _apply(self, session_id: str, seq: int, event: object, *, live: bool) -> None:
        if seq and seq <= self._last_seq.get(session_id, 0):
            return
        if seq:
            self._last_seq[session_id] = seq
        doc = self._docs.get(session_id)
        if doc is None:
            return
        if isinstance(event, ev.TextStreamed):
            doc.stream(event.text, event.tokens)
        elif isinstance(event, ev.ReasoningStreamed):
            doc.stream(event.text, event.tokens, reasoning=True)
        elif isinstance(event, ev.TurnFinished):
            doc.end_stream()
            if event.finish_reason == "length":
                doc.add_line("… the answer was cut at the token limit", LineStyle.NOTICE)
        elif isinstance(event, ev.ToolCallStarted):
            if event.tool in (COMPLETION_TOOL, QUESTION_TOOL):  # shown by TaskCompleted / QuestionAsked
                return
            text, detail = tool_line(event)
            line = doc.add_line(text, LineStyle.TOOL, detail=detail, tool=event.tool)
            self._tool_lines[(session_id, event.call_id)] = line
            spec = SPECS_BY_NAME.get(event.tool)
            if spec is not None and spec.shell:
                self._streamed.discard((session_id, event.call_id))
                self._output(session_id, f"$ {event.arguments.get('command', '')}\n", live)
        elif isinstance(event, ev.ToolCallFinished):
            line = self._tool_lines.pop((session_id, event.call_id), None)
            if line is not None:
                self._finish_tool_line(session_id, line, event, live)
                doc.revision += 1
        elif isinstance(event, ev.CommandOutputStreamed):
            self._streamed.add((session_id, event.call_id))
            self._output(session_id, event.text, live)
        elif isinstance(event, ev.ApprovalRequested):
            if live:
                self._show_approval_request(event)
        elif isinstance(event, ev.ApprovalResolved):
            self.window.clear_approval(session_id)
            if not event.approved:
                doc.add_line("denied" + (f": {event.feedback}" if event.feedback else ""), LineStyle.NOTICE)
            elif event.edited:
                doc.add_line("approved with edits", LineStyle.NOTICE)
            self.approval_resolved.emit(session_id, event)
        elif isinstance(event, ev.UserMessageAdded):
            doc.add_block(event.text, LineStyle.USER)
        elif isinstance(event, ev.QuestionAsked):
            options = f"  [{' / '.join(event.options)}]" if event.options else ""
            doc.add_block(f"? {event.question}{options}", LineStyle.TOOL)
            self._update_info(session_id, waiting_for="question")
        elif isinstance(event, ev.TaskCompleted):
            doc.add_block(f"✓ {event.result}", LineStyle.ADDED)
        elif isinstance(event, ev.CheckpointCreated):
            self.checkpoints.setdefault(session_id, []).append(event)
            self.checkpoints_changed.emit(session_id)
        elif isinstance(event, ev.CheckpointRestored):
            doc.add_line(f"restored checkpoint {event.commit[:8]}", LineStyle.NOTICE)
        elif isinstance(event, ev.ContextCondensed):
            doc.add_line(f"context condensed: {event.messages_before} → {event.messages_after} messages",
                         LineStyle.NOTICE)
        elif isinstance(event, ev.ErrorOccurred):
            doc.add_line(("retrying: " if event.retrying else "") + event.message, LineStyle.ERROR)
        elif isinstance(event, ev.MistakeCounted):
            doc.add_line(f"mistake {event.count}/{event.limit}: {event.message}", LineStyle.NOTICE)
            if event.count >= event.limit:
                self._update_info(session_id, waiting_for="stuck")
        elif isinstance(event, ev.RunFinished):
            if event.status is not ev.RunStatus.COMPLETED and event.message:
                doc.add_line(f"{event.status.value.replace('_', ' ')}: {event.message}", LineStyle.NOTICE)
            else:
                doc.end_stream()
        elif isinstance(event, ev.ModeChanged):
            self.window.set_session_mode(session_id, event.mode.value.capitalize())
        elif isinstance(event, ev.RulesLoaded):
            if event.files or event.left_out or event.skipped:
                self._update_info(session_id, rules=tuple(event.files))
                line = render_line(event)
                doc.add_line(line.removeprefix("· ") if line else "rules", LineStyle.NOTICE,
                             detail="\n".join(event.files))
        elif isinstance(event, ev.McpServerReady):
            line = render_line(event) or event.server
            doc.add_line(line.removeprefix("· ").removeprefix("! "),
                         LineStyle.ERROR if event.error else LineStyle.NOTICE, detail="\n".join(event.tools))
        elif isinstance(event, ev.ImagesAttached):
            doc.add_images(event.paths, event.names)
        elif isinstance(event, ev.ProtocolSelected):
            label = protocol_label(event.protocol)
            info = self.window.session_info(session_id)
            if info is not None and label != info.protocol:
                self._update_info(session_id, protocol=label)
                doc.add_line(f"{label} protocol: {event.reason}", LineStyle.NOTICE)

    def _output(self, session_id: str, text: str, live: bool) -> None:
        out = self.outputs.setdefault(session_id, collections.deque(maxlen=OUTPUT_MAX_CHUNKS))
        out.append(text)
        if live:
            self.output_appended.emit(session_id, text)

    def _finish_tool_line(self, session_id: str, line: Line, event: ev.ToolCallFinished, live: bool) -> None:
        """A tool line's status; a command's exit code (✓ / ✗) and its output, which its line
        expands to and the Output tab shows (from the stored result after a restart)."""
        spec = SPECS_BY_NAME.get(event.tool)
        result = event.result[:DETAIL_MAX_CHARS]
        if spec is not None and spec.shell and event.status in ("ok", "error"):
            code = event.exit_code
            ok = event.status == "ok" and code == 0
            verdict = ("✓ exit 0" if ok else f"✗ exit {code}") if code is not None else (
                "✗ timed out" if "timed out" in event.result[:120] else "✗ failed")
            line.text += f"  {verdict}"
            output = command_output(event.result)
            line.detail = output or "(no output)"
            if not ok:
                line.style = LineStyle.ERROR
            if (session_id, event.call_id) not in self._streamed and output:
                self._output(session_id, output if output.endswith("\n") else output + "\n", live)
            self._streamed.discard((session_id, event.call_id))
            self._output(session_id, f"{verdict}\n\n", live)
            return
        line.text += STATUS_MARK.get(event.status, f" · {event.status}")
        line.detail = f"{line.detail}\n— result —\n{result}" if result else line.detail
        if event.status in ("error", "denied"):
            line.style = LineStyle.ERROR if event.status == "error" else LineStyle.NOTICE

    def _drop_pane(self, session_id: str) -> None:
        """The session's pane goes, with what the bridge kept for it."""
        self._last_seq.pop(session_id, None)
        self._docs.pop(session_id, None)
        self.window.remove_session(session_id)

    def _update_info(self, session_id: str, **fields: Any) -> None:
        """Change what a session's header shows (through the window, never the pane)."""
        info = self.window.session_info(session_id)
        if info is not None:
            self.window.update_session(replace(info, **fields))

    def _show_approval_request(self, event: ApprovalRequest) -> None:
        arguments = json.dumps(event.arguments, indent=2, ensure_ascii=False)
        summary = event.summary or event.tool
        if event.reason:
            summary = f"{summary}  — {event.reason}"
        self._update_info(event.session_id, waiting_for="approval")
        self.window.show_approval(event.session_id, event.tool, summary, arguments, event.preview)
        self.approval_requested.emit(event.session_id, event)


class _Wake(QObject):
    """A signal emitted from a foreign thread: Qt queues it to the GUI thread."""

    wake = Signal()
