"""What every tool of the agent shares: its errors, its result, and how it is run.

A tool's :class:`~workstation.agent.tool_specs.ToolSpec` carries its runner (a
:data:`ToolRunner`); :class:`~workstation.agent.toolbox.Toolbox` is the context it runs in
(the session's jail, its settings and the agents' thread pool).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any


class ToolError(Exception):
    """A tool could not do what was asked; ``str()`` is the message for the model.

    ``mistake`` says whether it counts toward the consecutive-mistakes limit (a wrong path
    or a SEARCH block that does not match does; a user's denial does not).
    """

    def __init__(self, message: str, *, mistake: bool = True) -> None:
        super().__init__(message)
        self.mistake = mistake


class ToolArgumentError(ToolError):
    """A call's tool name or arguments are unusable."""


@dataclass(frozen=True, slots=True)
class ToolRun:
    text: str
    """What the model is told."""
    changed_files: bool
    """The call may have changed files (a checkpoint is due)."""
    exit_code: int | None = None
    """A command's exit status; None for other tools and a command killed at its limit."""


OnOutput = Callable[[str], None]
"""Receives a running command's output as it comes."""


@dataclass(frozen=True, slots=True)
class CallOptions:
    """How one call runs, besides its arguments."""

    on_output: OnOutput | None = None
    attended: bool = False
    """A person approved this very call (an unconfined command needs it)."""


ToolRunner = Callable[[Any, dict[str, Any], CallOptions], Awaitable[ToolRun]]
"""``runner(toolbox, arguments, options)``: one call of one tool; raises :class:`ToolError`."""
