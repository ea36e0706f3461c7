"""Runs one tool call for one session: file tools on a thread pool, commands as subprocesses.

The pool is the agents' own (not asyncio's small default executor), shared by all
sessions of the process; file tools are short and bounded (size caps, result caps).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from workstation.agent import file_tools, search_tools
from workstation.agent.commands import run_command
from workstation.agent.config import AgentConfig
from workstation.agent.jail import PathJail
from workstation.agent.sandbox import register_session_root
from workstation.agent.tool_specs import ToolError

TOOL_THREADS = 4
_executor: ThreadPoolExecutor | None = None


def tool_executor() -> ThreadPoolExecutor:
    global _executor
    if _executor is None:
        _executor = ThreadPoolExecutor(max_workers=TOOL_THREADS, thread_name_prefix="agent-tools")
    return _executor


@dataclass(frozen=True, slots=True)
class ToolRun:
    text: str
    """What the model is told."""
    changed_files: bool
    """The call may have changed files (a checkpoint is due)."""


class Toolbox:
    """The non-interactive tools of one session, bound to its jail and settings."""

    def __init__(self, jail: PathJail, config: AgentConfig) -> None:
        self.jail = jail
        self.config = config
        register_session_root(jail.root)  # hidden from other sessions' commands

    async def _in_thread(self, fn: Callable[..., str], *args: Any, **kwargs: Any) -> str:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(tool_executor(), functools.partial(fn, *args, **kwargs))

    async def run(self, tool: str, args: dict[str, Any], *, on_output: Callable[[str], None] | None = None,
                  attended: bool = False) -> ToolRun:
        """Run ``tool``; raises :class:`ToolError` with the model-facing message on failure.
        ``attended``: a person approved this very call (an unconfined command needs it)."""
        cfg = self.config
        cap = cfg.result_char_cap()
        jail = self.jail
        if tool == "read_file":
            text = await self._in_thread(
                file_tools.read_file, jail, args["path"], args.get("start_line"), args.get("end_line"),
                max_bytes=cfg.read_max_bytes, max_chars=cap,
            )
            return ToolRun(text, False)
        if tool == "write_to_file":
            return ToolRun(await self._in_thread(file_tools.write_to_file, jail, args["path"], args["content"]), True)
        if tool == "replace_in_file":
            return ToolRun(await self._in_thread(file_tools.replace_in_file, jail, args["path"], args["diff"]), True)
        if tool == "list_files":
            text = await self._in_thread(
                search_tools.list_files, jail, args["path"], bool(args.get("recursive", False)),
                max_entries=cfg.list_max_entries,
            )
            return ToolRun(_cap(text, cap), False)
        if tool == "search_files":
            text = await self._in_thread(
                search_tools.search_files, jail, args["path"], args["regex"], args.get("file_pattern"),
                max_results=cfg.search_max_results,
            )
            return ToolRun(_cap(text, cap), False)
        if tool == "list_code_definition_names":
            text = await self._in_thread(search_tools.list_code_definition_names, jail, args["path"], max_chars=cap)
            return ToolRun(text, False)
        if tool == "execute_command":
            command = args["command"]
            if not command.strip():
                raise ToolError("the command is empty")
            result = await run_command(
                command, str(jail.root), timeout_s=cfg.command_timeout_s,
                max_output_chars=min(cfg.command_output_max_chars, cap), on_output=on_output,
                kill_grace_s=cfg.command_kill_grace_s, sandbox=cfg.sandbox, attended=attended,
            )
            return ToolRun(result.for_model(command, cfg.command_timeout_s), True)
        raise ToolError(f"{tool} cannot run here")

    async def environment_listing(self, max_entries: int) -> str:
        try:
            return await self._in_thread(search_tools.list_files, self.jail, ".", True, max_entries=max_entries)
        except ToolError as exc:
            return str(exc)


def _cap(text: str, max_chars: int) -> str:
    if len(text) <= max_chars:
        return text
    return text[:max_chars].rsplit("\n", 1)[0] + f"\n[… cut at {max_chars:,} characters]"
