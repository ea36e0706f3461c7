"""How a session's conversation opens: the protocol it starts on, the system prompt before
the repository's rules, and the rules it follows. Plain functions of the session's config,
root and tools, so the agent loop (``loop.py``) keeps only the turn-by-turn work."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from workstation.agent.config import AgentConfig
from workstation.agent.images import ImageAttachment
from workstation.agent.protocols import choose_protocol, system_prompt
from workstation.agent.rules import Rules, load_rules, rules_cap
from workstation.agent.tool_set import ToolSet
from workstation.core.agent_events import ToolProtocol
from workstation.core.endpoints import Endpoint


def first_protocol(config: AgentConfig, endpoint: Endpoint,
                   task_images: Sequence[ImageAttachment]) -> tuple[ToolProtocol, str]:
    """The protocol a new session starts on, and why: the chosen one, except that a session
    that cannot be guided (:func:`why_not_guided`) gets tool-only turns over the full list."""
    protocol, why = choose_protocol(config, endpoint)
    blocker = why_not_guided(config, task_images)
    if protocol is ToolProtocol.GUIDED and blocker:
        return ToolProtocol.TOOL_ONLY, f"{why}; but {blocker}, so every turn is a tool call of the full list"
    return protocol, why


def why_not_guided(config: AgentConfig, task_images: Sequence[ImageAttachment]) -> str:
    """Why this session cannot be guided (empty when it can): the guided protocol offers its
    own few calls and a bounded view of the history, so MCP tools and images would be lost."""
    if config.mcp_servers:
        return "the session has MCP tools"
    if task_images:
        return "the task has images"
    return ""


def system_base(protocol: ToolProtocol, tools: ToolSet) -> str:
    """The system prompt before the rules: constant, plus the MCP tools' section where the
    protocol has no ``tools`` field (text)."""
    base = system_prompt(protocol)
    section = tools.text_section() if protocol is ToolProtocol.TEXT else ""
    return f"{base}\n\n{section}" if section else base


def session_rules(config: AgentConfig, root: Path) -> Rules:
    """The rules files the session follows (``rules.py``), within the config's cap."""
    if not config.rules and not config.rules_files:
        return Rules()
    top = Path(config.rules_root) if config.rules_root else root
    return load_rules(top, root, max_chars=rules_cap(config.rules_max_chars, config.context_window_tokens),
                      extra=config.rules_files, repository=config.rules)
