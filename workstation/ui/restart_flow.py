"""The window after a restart: the stored sessions are in the grid at once, read from the
store while the engine still starts (each with its task and its state; their histories load
when the fleet is up), and when sessions that were working ran on an endpoint that is gone
(another model or engine now), a confirmation asks whether they go on with the current one
(they wait paused until then)."""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path
from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol

from workstation.core.fleet_events import SessionsMovedEndpoint
from workstation.core.session_state import RESUMABLE_AFTER_RESTART
from workstation.fleet.store import Store
from workstation.ui.bridge import info_from_summary
from workstation.ui.panes.transcript_doc import LineStyle

if TYPE_CHECKING:
    from workstation.ui.approval_controls import Command
    from workstation.ui.dialogs.confirm import ConfirmDialog, Confirmations
    from workstation.ui.panes.session_pane import PaneInfo, SessionPane
    from workstation.ui.panes.transcript_doc import TranscriptDoc

log = logging.getLogger(__name__)

class RestartWindow(Protocol):
    """What the restart asks of the window (:class:`~workstation.ui.main_window.MainWindow`)."""

    @property
    def panes(self) -> Mapping[str, SessionPane]: ...
    @property
    def confirmations(self) -> Confirmations: ...
    def add_session(self, info: PaneInfo) -> TranscriptDoc: ...


WAITING_FOR_ENGINE = "waiting for the engine to start; it goes on by itself then"


async def show_stored_sessions(window: RestartWindow, store_path: Path) -> int:
    """Panes for the stored sessions (not the archived ones), before the fleet exists;
    returns how many. A store that cannot be read shows nothing here (the fleet reports it)."""
    if not store_path.exists():
        return 0
    store = Store(store_path)
    try:
        await store.start()
        records = await store.load_sessions()
    except Exception:  # noqa: BLE001 - the fleet's own start says what is wrong with the store
        log.exception("cannot read the stored sessions from %s", store_path)
        return 0
    finally:
        await store.aclose()
    shown = 0
    for rec in records:
        if rec.archived:
            continue
        info = info_from_summary(rec.summary(0.0))
        if rec.state in RESUMABLE_AFTER_RESTART:
            info = replace(info, detail=WAITING_FOR_ENGINE)
        doc = window.add_session(info)
        if rec.spec.task and not doc.lines:
            doc.add_block(rec.spec.task, LineStyle.USER)
        shown += 1
    return shown


class RestartFlow:
    def __init__(self, window: RestartWindow, command: Command) -> None:
        self.window = window
        self._command = command
        self._asking: tuple[ConfirmDialog, set[str]] | None = None
        """The open question about moved sessions, and which of them are still there."""

    def forget(self, session_id: str) -> None:
        """A session was removed (a demo run replaces the sessions an earlier one made, and
        it starts after this question was asked): the question no longer covers it, and
        closes once it covers none."""
        if self._asking is None:
            return
        dialog, left = self._asking
        left.discard(session_id)
        if not left:
            self._asking = None
            if self.window.confirmations.dialog is dialog:  # still open (Confirmations knows)
                dialog.reject()

    def ask_moved(self, event: SessionsMovedEndpoint) -> None:
        """Name the sessions whose endpoint is gone; yes resumes them on the current one."""
        names = [self.window.panes[sid].info.name for sid in event.session_ids if sid in self.window.panes]
        n = len(event.session_ids)
        left = set(event.session_ids)

        def resume() -> None:
            for sid in event.session_ids:
                if sid in left:  # not one removed meanwhile
                    self._command("resume-moved", lambda c, s=sid: c.toggle_pause(s))

        dialog = self.window.confirmations.ask(
            resume, title="Sessions moved to another endpoint", confirm=f"Resume on {event.current}",
            destructive=False,
            headline=f"{n} session{'s' if n != 1 else ''} ran on {event.previous}, which is gone. "
                     f"Go on with {event.current}?",
            items=names,
            note="They were working when the app stopped. Another model answers differently; they wait "
                 "paused until you say so (each can also be resumed from its pane, Ctrl+P).")
        self._asking = (dialog, left)
