"""Coroutines started from the GUI: named, owned, referenced, and their errors shown.

Slots are synchronous; a button that triggers async work calls ``tasks.spawn(coro, name)``.
Nothing is fired and forgotten: the owner keeps every task until it ends, logs what
failed and passes a plain message to ``on_error`` (the status bar / a notification).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from workstation.core.errors import UserError

log = logging.getLogger(__name__)


def user_message(exc: UserError) -> str:
    """The window's one line for a refusal: what, then what to do, ``budget reached (raise or
    clear its budget to continue)``; the status bar and the forms alike."""
    return str(exc) + (f" ({exc.hint})" if exc.hint else "")


class TaskOwner:
    def __init__(self, owner: str, on_error: Callable[[str], None] | None = None) -> None:
        self.owner = owner
        self.on_error = on_error
        self._tasks: set[asyncio.Task[Any]] = set()

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]:
        task = asyncio.get_event_loop().create_task(coro, name=f"{self.owner}:{name}")
        self._tasks.add(task)
        task.add_done_callback(self._finished)
        return task

    def _finished(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if task.cancelled():
            return
        exc = task.exception()
        if exc is None:
            return
        if isinstance(exc, UserError):
            message = user_message(exc)
            log.warning("%s failed: %s", task.get_name(), message)
        else:
            message = f"{task.get_name()} failed: {exc!r}"
            log.error("%s failed", task.get_name(), exc_info=exc)
        if self.on_error is not None:
            self.on_error(message)

    @property
    def running(self) -> int:
        return len(self._tasks)

    async def aclose(self, timeout_s: float = 5.0) -> None:
        """Cancel every task and wait (bounded) for them to end."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait(tasks, timeout=timeout_s)
