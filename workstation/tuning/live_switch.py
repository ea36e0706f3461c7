"""The safe switch of the live engine, as a service: what the window's Tuning dock runs.

It switches whatever :class:`~workstation.engine.host.EngineHost` serves now to another
profile with :class:`~workstation.tuning.switch.SafeSwitch`: the new engine comes from the
host (same install and model, a free port), sessions and meters move with the host's
``endpoint_changed`` (its :meth:`~EngineHost.retarget`), and the engine that serves after the
switch (the new one, or the old one on a roll-back) is adopted by the host. Nothing here
holds an engine of its own.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable

import httpx
from psygnal import Signal

from workstation.core.profiles import Profile
from workstation.engine.host import EngineHost
from workstation.tuning.placement import Placement, gpu_inventory, plan_placement
from workstation.tuning.switch import SafeSwitch, SwitchPhase, SwitchReport

Planner = Callable[[], Placement]
"""Where the new engine runs; blocking (reads NVML on CUDA), called in a worker thread."""


class LiveSwitch:
    state_changed = Signal(object, str)
    """``(SwitchPhase, detail)`` of the switch running now."""

    def __init__(self, host: EngineHost, http: httpx.AsyncClient, *, plan: Planner,
                 open_requests: Callable[[str], int] | None = None) -> None:
        """``open_requests``: how many of the app's model requests are open to a base URL
        (the switch drains the old engine until none is)."""
        self.host = host
        self.http = http
        self._plan = plan
        self._open_requests = open_requests
        self.running: SafeSwitch | None = None

    @property
    def live_profile(self) -> str | None:
        launcher = self.host.launcher
        return None if launcher is None else launcher.profile.name

    @property
    def platform(self) -> str | None:
        """The live engine's platform (``cpu`` / ``cuda``): what a profile is folded for."""
        launcher = self.host.launcher
        return None if launcher is None else launcher.engine.platform

    def blocker(self) -> str | None:
        """Why no switch can start now (None: it can)."""
        if not self.host.managed:
            external = self.host.external
            where = f" ({external.base_url})" if external is not None else ""
            return f"this window uses an external endpoint{where}; only an engine the app started can be switched"
        if self.running is not None:
            return "a switch is running"
        return None

    @property
    def phase(self) -> SwitchPhase | None:
        return self.running.phase if self.running is not None else None

    @property
    def side_by_side(self) -> bool:
        return self.running is not None and self.running.side_by_side

    async def run(self, profile: Profile, *, say: Callable[[str], None] | None = None) -> SwitchReport | None:
        """Switch the live engine to ``profile`` (flattened). None when the engine is not running."""
        say = say or (lambda _m: None)
        old = self.host.launcher
        if old is None or not old.alive():
            return None
        placement = await asyncio.to_thread(self._plan)
        say(f"Placement: {placement.reason}")
        switch = SafeSwitch(self.http, old, self.host.new_launcher, retarget=[self.host.retarget],
                            side_by_side=placement.side_by_side, placement_env=dict(placement.env),
                            placement_reason=placement.reason, open_requests=self._open_requests)
        switch.state_changed.connect(self._on_phase)
        self.running = switch
        try:
            report, serving = await switch.run(profile, say=say)
        finally:
            switch.state_changed.disconnect(self._on_phase)
            self.running = None
        if serving is not old:
            self.host.adopt(serving)  # type: ignore[arg-type]
        return report

    def _on_phase(self, phase: SwitchPhase, detail: str) -> None:
        self.state_changed.emit(phase, detail)


def plan_beside(platform: str, live_env: dict[str, str]) -> Placement:
    """Where a second engine runs beside the live one on this machine (blocking: NVML)."""
    return plan_placement(platform, live_env={**os.environ, **live_env}, cpu_count=os.cpu_count() or 1,
                          gpus=gpu_inventory() if platform == "cuda" else ())
