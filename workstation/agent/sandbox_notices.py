"""What the command sandbox tells the user: each notice once per process, and the words.

Qt-free: the UI connects to :data:`notices` (``noticed``) and reads ``notices.said``.
"""

from __future__ import annotations

import logging
import shutil
from dataclasses import dataclass

from psygnal import Signal

log = logging.getLogger("workstation.agent.sandbox")


@dataclass(frozen=True, slots=True)
class SandboxNotice:
    key: str
    """``fallback`` (a person approved an unconfined command), ``unattended`` (one was refused:
    nobody could approve it), ``required``, ``off`` or ``processes``: what it is about."""
    message: str


class SandboxNotices:
    """What the sandbox has to tell the user, each said once per process."""

    noticed = Signal(object)
    """A :class:`SandboxNotice` (emitted on the thread that ran the command: the loop's)."""

    def __init__(self) -> None:
        self.said: list[SandboxNotice] = []

    def say(self, key: str, message: str) -> None:
        if any(n.key == key for n in self.said):
            return
        notice = SandboxNotice(key, message)
        self.said.append(notice)
        log.warning("%s", message)
        self.noticed.emit(notice)


notices = SandboxNotices()
"""The process's notices; the UI connects to ``notices.noticed`` and reads ``notices.said``."""


def install_hint() -> str:
    """The command that installs bubblewrap on this system."""
    for tool, command in (("apt-get", "sudo apt-get install bubblewrap"), ("dnf", "sudo dnf install bubblewrap"),
                          ("zypper", "sudo zypper install bubblewrap"), ("pacman", "sudo pacman -S bubblewrap")):
        if shutil.which(tool):
            return command
    return "install the 'bubblewrap' package"


def fix_hint(reason: str) -> str:
    """What makes bubblewrap work here, for a probe's ``reason``."""
    if "turned off in settings" in reason:
        return "set sandbox.mode = auto in settings"
    if "refused to run" in reason:
        return "allow unprivileged user namespaces for bubblewrap (sysctl kernel.unprivileged_userns_clone=1)"
    if "not installed" in reason:
        return install_hint()
    return f"point sandbox.bwrap at a working bubblewrap, or clear it ({install_hint()})"


def fallback_message(reason: str, why: str) -> str:
    return (
        f"Agent commands run WITHOUT the bubblewrap sandbox: {reason}; {why}. They still run in "
        "their own process group with a scrubbed environment and resource limits (CPU time, "
        "memory, processes, file size), but they can read and write whatever your user can, and "
        f"reach the network. To confine them: {fix_hint(reason)}."
    )


def unattended_message(reason: str) -> str:
    """Why an unconfined command was refused, and the two ways out."""
    return (
        f"Agent commands are refused: they cannot be confined here ({reason}) and nobody is "
        f"present to approve each one. To confine them: {fix_hint(reason)}. To run them unconfined "
        "anyway (they could then read and write whatever your user can), set sandbox.mode = off "
        "in settings (WORKSTATION_SANDBOX__MODE=off)."
    )
