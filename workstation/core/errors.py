"""The one exception family the user sees as a plain message (never a traceback)."""

from __future__ import annotations


class UserError(Exception):
    """Something the user can fix; ``str(exc)`` says what and how, in plain words."""

    hint: str | None = None

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        if hint is not None:
            self.hint = hint

    def describe(self) -> str:
        return f"{self}\n  hint: {self.hint}" if self.hint else str(self)
