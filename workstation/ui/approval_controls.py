"""The window's approvals: a pending request shown in its session's tile and in the focus
view, and the answers — approve, approve with edited arguments, deny with feedback, approve
every pending one — sent as the window's commands.

It keeps no session state of its own: the panes are the window's (handed over as a
mapping), the pending requests the fleet's approvals desk's; it only keeps the two views
of one request in step.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping

from workstation.core.session_state import SessionState
from workstation.ui.backend import SessionCommands
from workstation.ui.dialogs.confirm import Confirmations
from workstation.ui.panes.focus_view import FocusView
from workstation.ui.panes.session_pane import SessionPane

Command = Callable[[str, Callable[[SessionCommands], Awaitable[object]]], None]
"""The window's way to run a command (``MainWindow._command``): a name and the call."""


class ApprovalControls:
    def __init__(self, panes: Mapping[str, SessionPane], focus: FocusView, command: Command,
                 confirmations: Confirmations) -> None:
        self._panes = panes
        self._focus = focus
        self._command = command
        self._confirmations = confirmations
        focus.approval.approved.connect(lambda: self.approve(focus.pane))
        focus.approval.denied.connect(lambda text: self.deny(focus.pane, text))
        focus.approval.edited.connect(lambda args: self.approve(focus.pane, args))

    def attach(self, pane: SessionPane) -> None:
        """A new session's tile: its approval bar answers through here."""
        pane.approve.connect(lambda p=pane: self.approve(p))
        pane.deny.connect(lambda text, p=pane: self.deny(p, text))
        pane.edit.connect(lambda args, p=pane: self.approve(p, args))

    def show(self, session_id: str, title: str, summary: str, arguments: str, preview: str = "") -> None:
        pane = self._panes.get(session_id)
        if pane is None:
            return
        pane.show_approval(title, summary, arguments, preview)
        if self._focus.pane is pane:
            self._focus.sync_approval()

    def clear(self, session_id: str) -> None:
        pane = self._panes.get(session_id)
        if pane is not None:
            pane.hide_approval()
            if self._focus.pane is pane:
                self._focus.sync_approval()

    def approve(self, pane: SessionPane | None, edited: str | None = None) -> None:
        """Approve ``pane``'s request (with ``edited`` arguments, a JSON object, if given)."""
        if self._answered(pane):
            assert pane is not None
            sid = pane.info.session_id
            self._command("approve", lambda c: c.approve(sid, edited))

    def deny(self, pane: SessionPane | None, feedback: str) -> None:
        if self._answered(pane):
            assert pane is not None
            sid = pane.info.session_id
            self._command("deny", lambda c: c.deny(sid, feedback))

    def approve_waiting(self, pane: SessionPane | None) -> None:
        """Approve ``pane``'s request if it waits for one (a shortcut on the focused session)."""
        if pane is not None and pane.info.state is SessionState.AWAITING_APPROVAL:
            self.approve(pane)

    def approve_all(self, session_ids: Iterable[str]) -> None:
        """Approve every request of these sessions that waits for one, in a stable order —
        after a confirmation that names each action that would run."""
        panes = [p for p in (self._panes.get(sid) for sid in sorted(session_ids))
                 if p is not None and p.info.state is SessionState.AWAITING_APPROVAL]
        if not panes:
            return
        n = len(panes)
        commands = sum(1 for p in panes if p.approval.summary.text().startswith("$ "))
        edits = sum(1 for p in panes if p.approval.preview_text)
        others = n - commands - edits
        kinds = ", ".join(part for part in (
            _count(commands, "command"), _count(edits, "file edit"), _count(others, "other action")) if part)
        self._confirmations.ask(
            lambda: [self.approve_waiting(p) for p in panes if p.info.session_id in self._panes],
            title="Approve all", confirm=f"Approve {n}",
            headline=f"Approve {_count(n, 'waiting action')} in {_count(n, 'session')}?",
            items=[f"{p.info.name}: {p.approval.summary.text().split('  — ')[0]}" for p in panes],
            note=f"They run as shown: {kinds}. Each pane shows its action in full.")

    def _answered(self, pane: SessionPane | None) -> bool:
        """Hide the request in both views as soon as it is answered (the fleet confirms)."""
        if pane is None:
            return False
        pane.hide_approval()
        if self._focus.pane is pane:
            self._focus.approval.hide()
        return True


def _count(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}" if n else ""
