"""Asks before the two stops that cut work off: stopping the engine while requests are in
flight, and quitting while sessions work or wait for a person. Each confirmation names the
sessions it affects; with nothing in flight nothing is asked. The action a session waits to
have approved is the one the fleet's approvals desk holds (``SessionCommands.waiting_actions``),
not the text a pane happens to show.

It owns whether the user already said yes to quitting (the next close goes through)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Protocol

from workstation.core.session_state import SessionState
from workstation.ui.backend import EngineControl, SessionCommands
from workstation.ui.dialogs.confirm import Confirmations
from workstation.ui.panes.session_pane import SessionPane


class GuardedWindow(Protocol):
    """What the guard asks of the window (:class:`~workstation.ui.main_window.MainWindow`)."""

    @property
    def panes(self) -> Mapping[str, SessionPane]: ...
    @property
    def confirmations(self) -> Confirmations: ...
    @property
    def commands(self) -> SessionCommands | None:
        """The sessions' commands (None before the fleet is up and once shutdown began)."""
        ...
    @property
    def generating(self) -> int:
        """Requests the engine is generating now (the fleet's slots in use)."""
        ...
    def engine_verb(self, verb: str, call: Callable[[EngineControl], Awaitable[None]]) -> None: ...
    def close(self) -> bool: ...


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


class StopGuard:
    def __init__(self, window: GuardedWindow) -> None:
        """``window``: the :class:`~workstation.ui.main_window.MainWindow` (its panes,
        confirmations, engine verb and generation count)."""
        self.window = window
        self.quit_confirmed = False

    def _working(self) -> list[str]:
        return [p.info.name for p in self.window.panes.values() if p.info.state.is_working]

    def _waiting(self) -> list[str]:
        commands = self.window.commands
        actions = commands.waiting_actions() if commands is not None else {}
        out = []
        for p in self.window.panes.values():
            if p.info.state is SessionState.AWAITING_APPROVAL:
                action = actions.get(p.info.session_id) or "an action"
                out.append(f"{p.info.name}: waits for approval of {action}")
            elif p.info.state is SessionState.NEEDS_INPUT:
                out.append(f"{p.info.name}: waits for your answer")
        return out

    def stop_engine(self) -> None:
        """Stop the engine; with requests in flight only after a confirmation naming them."""
        window = self.window
        busy = [p.info.name for p in window.panes.values()
                if p.info.state in (SessionState.RUNNING, SessionState.QUEUED)]
        stop = lambda: window.engine_verb("stop", lambda e: e.stop())  # noqa: E731
        if not window.generating and not busy:
            stop()
            return
        n = max(window.generating, len(busy))
        window.confirmations.ask(
            stop, title="Stop the engine", confirm="Stop the engine",
            headline=f"Stop the engine while {_plural(n, 'request')} {'is' if n == 1 else 'are'} in flight?",
            items=busy, note="Their answers are cut off; the sessions wait for the engine and go on by "
                             "themselves when it is started again.")

    def close_may_go_on(self) -> bool:
        """True when the window may start shutting down now; else a confirmation is open
        (yes closes the window again, and then it goes through)."""
        if self.quit_confirmed:
            return True
        working, waiting = self._working(), self._waiting()
        if not working and not waiting:
            return True
        parts = [f"{_plural(len(working), 'session')} working" if working else "",
                 f"{len(waiting)} waiting for you" if waiting else ""]
        self.window.confirmations.ask(
            self._quit, title="Quit workstation", confirm="Quit",
            headline=f"Quit with {' and '.join(p for p in parts if p)}?",
            items=[*(f"{name}: generating" for name in working), *waiting],
            note="Their agents stop now. Nothing is lost: the next start resumes the working sessions "
                 "and asks again for what waits for approval; the worktrees and branches stay.")
        return False

    def _quit(self) -> None:
        self.quit_confirmed = True
        self.window.close()
