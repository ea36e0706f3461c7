"""Runs one tool call for one session: file tools on a thread pool, commands as subprocesses.

The pool is the agents' own (not asyncio's small default executor), shared by all
sessions of the process; file tools are short and bounded (size caps, result caps).
:class:`Toolbox` is the context a tool's runner (``ToolSpec.run``, ``tool_runners.py``) gets:
the session's jail, its settings and the pool.
"""

from __future__ import annotations

import asyncio
import errno
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from workstation.agent import search_tools
from workstation.agent.config import AgentConfig
from workstation.agent.jail import PathJail
from workstation.agent.sandbox import register_session_root
from workstation.agent.tool_api import CallOptions, OnOutput, ToolError, ToolRun, ToolRunner
from workstation.agent.tool_specs import SPECS_BY_NAME

TOOL_THREADS = 4
_executor: ThreadPoolExecutor | None = None


def tool_executor() -> ThreadPoolExecutor:
    global _executor
    if _executor is None:
        _executor = ThreadPoolExecutor(max_workers=TOOL_THREADS, thread_name_prefix="agent-tools")
    return _executor


def os_error_message(exc: OSError, args: dict[str, Any]) -> str:
    """An error of the operating system as the model reads it: what failed, for which path,
    and what to do, never a traceback (a tool's own checks name the common cases first)."""
    why = exc.strerror or str(exc) or type(exc).__name__
    path = args.get("path")
    if isinstance(path, str) and path:
        shown = path if len(path) <= 80 else f"{path[:60]}…({len(path)} characters)"
        what = f"the system refused '{shown}': {why}"
    else:
        what = f"the system refused this call: {why}"
    if exc.errno == errno.ENAMETOOLONG:
        what += "; use a shorter path (each name at most 255 bytes)"
    return what


class Toolbox:
    """The non-interactive tools of one session, bound to its jail and settings."""

    def __init__(self, jail: PathJail, config: AgentConfig) -> None:
        self.jail = jail
        self.config = config
        register_session_root(jail.root)  # hidden from other sessions' commands

    async def in_thread(self, fn: Callable[..., str], *args: Any, **kwargs: Any) -> str:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(tool_executor(), functools.partial(fn, *args, **kwargs))

    async def run(self, tool: str | ToolRunner, args: dict[str, Any], *,
                  on_output: OnOutput | None = None, attended: bool = False) -> ToolRun:
        """Run one call with a tool's runner (or the runner of the tool of that name); raises
        :class:`ToolError` with the model-facing message on failure.
        ``attended``: a person approved this very call (an unconfined command needs it)."""
        runner = tool
        if isinstance(tool, str):
            spec = SPECS_BY_NAME.get(tool)
            runner = spec.run if spec is not None else None
            if runner is None:
                raise ToolError(f"{tool} cannot run here")
        try:
            return await runner(self, args, CallOptions(on_output, attended))
        except OSError as exc:  # the system refused (a name too long, no space, permissions…)
            raise ToolError(os_error_message(exc, args)) from None

    async def environment_listing(self, max_entries: int) -> str:
        try:
            return await self.in_thread(search_tools.list_files, self.jail, ".", True, max_entries=max_entries)
        except ToolError as exc:
            return str(exc)
