"""Whether agents' commands are confined here, and what follows from it: fail closed.

Every agent asks :func:`sandbox_status` before an ``execute_command`` (``agent/calls.py``),
so the window, ``run``, ``demo``, ``agent`` and the tuner's traffic capture all get the
same rule, however their services were composed:

========================  =====================================================
bubblewrap works          commands follow the approval policy (auto-approve …)
no bubblewrap, ``auto``   every command asks a person, whatever the policy says;
                          where nobody can approve (headless) it is refused
no bubblewrap, ``required``  no command runs
``off`` in settings       the user's explicit choice: unconfined, policy as set
========================  =====================================================

The command runner holds the same line on its own (``sandbox.prepare`` refuses an
unconfined command that nobody approved), so nothing reaches a shell by another path.
``workstation doctor`` and the window's banner read the same status.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any

from workstation.agent.sandbox import NetworkAccess, SandboxMode, SandboxPolicy, probe_bwrap
from workstation.agent.sandbox_notices import fix_hint


class Confinement(str, Enum):
    CONFINED = "confined"
    """bubblewrap works: commands follow the approval policy."""
    ATTENDED = "attended"
    """No bubblewrap (``auto``): a person approves every command; unattended ones are refused."""
    REFUSED = "refused"
    """No bubblewrap and the sandbox is required: no command runs."""
    UNCONFINED = "unconfined"
    """The sandbox is off in settings (the user's choice): unconfined, policy as set."""


@dataclass(frozen=True, slots=True)
class SandboxStatus:
    mode: SandboxMode
    confinement: Confinement
    network: NetworkAccess
    program: str
    """The bubblewrap program found (empty when none)."""
    reason: str
    """Why commands are not confined (empty when they are)."""

    @property
    def confined(self) -> bool:
        return self.confinement is Confinement.CONFINED

    @property
    def needs_person(self) -> bool:
        """Every command needs a person's approval, whatever the approval policy says."""
        return self.confinement is Confinement.ATTENDED

    @property
    def approval_reason(self) -> str:
        """Why a command asks (empty when the sandbox does not make it ask)."""
        if not self.needs_person:
            return ""
        return f"commands are not confined here ({self.reason}), so each one needs a person's approval"

    @property
    def refusal(self) -> str:
        """What the model is told when no command may run (``REFUSED``)."""
        return (f"commands cannot run here: the sandbox is required (sandbox.mode = required) but "
                f"{self.reason}")

    @property
    def fix(self) -> str:
        """What to do so that commands are confined (empty when they are)."""
        return "" if self.confined else fix_hint(self.reason)

    def summary(self) -> str:
        """One line for ``doctor`` and logs."""
        if self.confinement is Confinement.CONFINED:
            net = "no network" if self.network is NetworkAccess.NONE else "host network"
            return f"commands are sandboxed: bubblewrap ({self.program}), {net}"
        if self.confinement is Confinement.UNCONFINED:
            return ("commands are NOT sandboxed: the sandbox is off in settings (your choice); they can "
                    "read and write whatever your user can")
        if self.confinement is Confinement.REFUSED:
            return f"commands are NOT sandboxed ({self.reason}) and the sandbox is required: no command runs"
        return (f"commands are NOT sandboxed ({self.reason}): each one asks for approval; runs that "
                f"nobody watches refuse them")

    def banner(self) -> str:
        """The window's warning; empty when commands are confined."""
        if self.confinement is Confinement.CONFINED:
            return ""
        if self.confinement is Confinement.UNCONFINED:
            return ("Agents' commands are not confined: the sandbox is off in settings. They can read "
                    "and write whatever your user can (~/.ssh included) and reach the network.")
        if self.confinement is Confinement.REFUSED:
            return f"Agents cannot run commands: the sandbox is required but {self.reason}. Fix: {self.fix}."
        return (f"Agents' commands are not confined ({self.reason}): each one waits for your approval. "
                f"Fix: {self.fix}.")

    def as_dict(self) -> dict[str, Any]:
        return {"sandboxed": self.confined, "mode": self.mode.value, "commands": self.confinement.value,
                "program": self.program or None, "network": self.network.value, "reason": self.reason,
                "fix": self.fix, "summary": self.summary()}


async def sandbox_status(policy: SandboxPolicy) -> SandboxStatus:
    """How ``policy``'s commands are confined on this machine (the probe is cached)."""
    if policy.mode is SandboxMode.OFF:
        return SandboxStatus(policy.mode, Confinement.UNCONFINED, policy.network, "",
                             "it is turned off in settings (sandbox.mode = off)")
    probe = await probe_bwrap(policy.network, bwrap=policy.bwrap or None)
    if probe.usable:
        return SandboxStatus(policy.mode, Confinement.CONFINED, policy.network, probe.path, "")
    confinement = Confinement.REFUSED if policy.mode is SandboxMode.REQUIRED else Confinement.ATTENDED
    return SandboxStatus(policy.mode, confinement, policy.network, probe.path, probe.reason)
