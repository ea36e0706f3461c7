"""The runners of the agent's non-interactive tools: what each tool's spec carries
(``ToolSpec.run``). Each gets the session's toolbox (jail, settings, thread pool), the
call's clean arguments and its :class:`~workstation.agent.tool_api.CallOptions`; it returns a
:class:`~workstation.agent.tool_api.ToolRun` or raises a ``ToolError`` for the model."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from workstation.agent import file_tools, search_tools
from workstation.agent.commands import run_command, scrubbed_environment
from workstation.agent.config import AgentConfig
from workstation.agent.jail import PathJail
from workstation.agent.tool_api import CallOptions, ToolError, ToolRun


class ToolContext(Protocol):
    """What a runner needs of the session (:class:`workstation.agent.toolbox.Toolbox`)."""

    jail: PathJail
    config: AgentConfig

    async def in_thread(self, fn: Callable[..., str], *args: Any, **kwargs: Any) -> str: ...


async def read_file(box: ToolContext, args: dict[str, Any], call: CallOptions) -> ToolRun:
    cfg = box.config
    text = await box.in_thread(
        file_tools.read_file, box.jail, args["path"], args.get("start_line"), args.get("end_line"),
        max_bytes=cfg.read_max_bytes, max_chars=cfg.result_char_cap(),
    )
    return ToolRun(text, False)


async def write_to_file(box: ToolContext, args: dict[str, Any], call: CallOptions) -> ToolRun:
    return ToolRun(await box.in_thread(file_tools.write_to_file, box.jail, args["path"], args["content"]), True)


async def replace_in_file(box: ToolContext, args: dict[str, Any], call: CallOptions) -> ToolRun:
    return ToolRun(await box.in_thread(file_tools.replace_in_file, box.jail, args["path"], args["diff"]), True)


async def list_files(box: ToolContext, args: dict[str, Any], call: CallOptions) -> ToolRun:
    text = await box.in_thread(search_tools.list_files, box.jail, args["path"], bool(args.get("recursive", False)),
                               max_entries=box.config.list_max_entries)
    return ToolRun(_cap(text, box.config.result_char_cap()), False)


async def search_files(box: ToolContext, args: dict[str, Any], call: CallOptions) -> ToolRun:
    text = await box.in_thread(search_tools.search_files, box.jail, args["path"], args["regex"],
                               args.get("file_pattern"), max_results=box.config.search_max_results)
    return ToolRun(_cap(text, box.config.result_char_cap()), False)


async def list_code_definition_names(box: ToolContext, args: dict[str, Any], call: CallOptions) -> ToolRun:
    text = await box.in_thread(search_tools.list_code_definition_names, box.jail, args["path"],
                               max_chars=box.config.result_char_cap())
    return ToolRun(text, False)


async def execute_command(box: ToolContext, args: dict[str, Any], call: CallOptions) -> ToolRun:
    cfg = box.config
    command = args["command"]
    if not command.strip():
        raise ToolError("the command is empty")
    result = await run_command(
        command, str(box.jail.root), timeout_s=cfg.command_timeout_s,
        max_output_chars=min(cfg.command_output_max_chars, cfg.result_char_cap()), on_output=call.on_output,
        kill_grace_s=cfg.command_kill_grace_s, sandbox=cfg.sandbox, attended=call.attended,
        env={**scrubbed_environment(), **dict(cfg.command_env)} if cfg.command_env else None,
    )
    return ToolRun(result.for_model(command, cfg.command_timeout_s), True,
                   None if result.timed_out else result.exit_code)


def _cap(text: str, max_chars: int) -> str:
    if len(text) <= max_chars:
        return text
    return text[:max_chars].rsplit("\n", 1)[0] + f"\n[… cut at {max_chars:,} characters]"
