"""Check ``vllm serve`` arguments against the installed engine's own ``--help=all``.

Flags differ between versions and platforms; an unknown flag is refused with a clear
message before anything is launched.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from pathlib import Path

from workstation.core.errors import UserError
from workstation.engine.environment import EngineInstall, engine_help_text

_FLAG = re.compile(r"(?<![\w-])(--[a-zA-Z0-9][a-zA-Z0-9-]*)")


class UnknownFlagError(UserError):
    """A profile or setting names flags this engine does not have."""


def known_flags(help_text: str) -> set[str]:
    return set(_FLAG.findall(help_text))


def validate_args(engine: EngineInstall, args: list[str], cache_dir: Path) -> None:
    known = known_flags(engine_help_text(engine, cache_dir))
    check_flags(args, known, engine.version)


def unknown_flags(args: Iterable[str], known: set[str]) -> list[str]:
    """The flags among ``args`` (``--flag`` or ``--flag=value``; values are skipped) that the
    engine does not know, each as ``--flag`` or ``--flag (did you mean --other?)``: the one
    rule the launcher refuses by and the tuning checks report."""
    out: list[str] = []
    for token in args:
        if not token.startswith("--"):
            continue
        flag = token.split("=", 1)[0]
        if flag not in known:
            close = difflib.get_close_matches(flag, known, n=1)
            out.append(f"{flag} (did you mean {close[0]}?)" if close else flag)
    return out


def check_flags(args: list[str], known: set[str], version: str = "?") -> None:
    parts = unknown_flags(args, known)
    if parts:
        raise UnknownFlagError(
            f"the installed vLLM ({version}) does not know: {', '.join(parts)}",
            hint="remove them from the profile or engine.extra_args, or install a vLLM that has them",
        )
