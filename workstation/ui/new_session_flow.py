"""Creating sessions from the New-session form: the form opens at once, also while the
engine still starts (what it submits waits until the sessions service is up, and says so);
it stays open while the sessions are made (a clone or many worktrees take a while, and
Cancel stops them: the fleet removes what it made so far and kills the git process); a
refusal (a name that is taken, a branch that does not exist …) is shown in the form, with
everything typed kept, instead of in the status bar after the form has gone.

It owns the open form and the task creating from it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from workstation.core.errors import UserError
from workstation.ui.backend import NewSessionRequest, SessionCommands
from workstation.ui.dialogs.new_session import NewSessionDialog
from workstation.ui.tasks import user_message

COMMANDS_POLL_S = 0.2


class NewSessionFlow:
    def __init__(self, window: Any, commands: Callable[[], SessionCommands | None]) -> None:
        """``window``: the :class:`~workstation.ui.main_window.MainWindow` (parent, tasks,
        status line); ``commands``: the sessions service once it is up (None before)."""
        self.window = window
        self._commands = commands
        self.dialog: NewSessionDialog | None = None
        self._task: asyncio.Task[Any] | None = None
        self._cancelled = False

    def open(self, repo_path: str = "") -> NewSessionDialog:
        commands = self._commands()
        dialog = NewSessionDialog(self.window, commands, repo_path=repo_path)
        if commands is None:
            dialog.set_note("The engine is still starting: fill in the form; the sessions are created as "
                            "soon as it is ready.")
        dialog.submitted.connect(lambda request, d=dialog: self._create(d, request))
        dialog.cancel_requested.connect(self.cancel)
        dialog.finished.connect(dialog.deleteLater)
        self.dialog = dialog
        dialog.open()
        return dialog

    def cancel(self) -> None:
        """Stop creating (the form stays, with what was typed)."""
        task = self._task
        if task is not None and not task.done():
            self._cancelled = True
            task.cancel()

    def _create(self, dialog: NewSessionDialog, request: NewSessionRequest) -> None:
        if self._task is not None and not self._task.done():
            return
        self._cancelled = False
        dialog.set_busy("Creating…" if self._commands() is not None else "Waiting for the engine…")
        self._task = self.window.tasks.spawn(self._run(dialog, request), "create-sessions")

    async def _run(self, dialog: NewSessionDialog, request: NewSessionRequest) -> None:
        try:
            commands = self._commands()
            while commands is None:  # the form was filled while the engine starts
                await asyncio.sleep(COMMANDS_POLL_S)
                commands = self._commands()
            dialog.set_busy("Creating…")
            await commands.create_sessions(request)
        except UserError as exc:
            dialog.show_problem(user_message(exc))
            return
        except asyncio.CancelledError:
            if not self._cancelled:
                raise  # the window closes
            dialog.show_problem("Cancelled: nothing was created.")
            return  # the user's cancel, from the form: it ends here
        dialog.accept()
        count = max(1, request.copies)
        self.window.show_status(f"created {count} session{'s' if count != 1 else ''}", 8000)
