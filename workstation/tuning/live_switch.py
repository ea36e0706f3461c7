"""The safe switch of the live engine, as a service: what the window's Tuning dock runs.

It switches whatever :class:`~workstation.engine.host.EngineHost` serves now to another
profile with :class:`~workstation.tuning.switch.SafeSwitch`: the new engine comes from the
host (same install and model, a free port), sessions and meters move with the host's
``endpoint_changed`` (its :meth:`~EngineHost.retarget`), and the engine that serves after the
switch (the new one, or the old one on a roll-back) is adopted by the host. Nothing here
holds an engine of its own.

A safe switch replaces one engine beside the others, so where engines share a GPU (a
profile's ``engines_per_gpu``, now or under the new profile) it cannot apply: the engines
are placed anew (their count, their memory shares), and no new engine fits beside them on
the GPU. Then every engine restarts with the new profile (the host's restart), as the engine
dock's Restart does, and the user is told so first; if the new profile does not start, the
old one is started again.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable, Sequence

import httpx
from psygnal import Signal

from workstation.core.profiles import Profile, engines_label
from workstation.core.replicas import ReplicaPlan
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
        self.restarting = False
        """A switch done as a restart of every engine is running."""

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
        if self.running is not None or self.restarting:
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
        plans = await self.host.plans_for(profile)  # a placement that cannot work: UserError, nothing stops
        if plans != self.host.plans or self.host.shares_devices:
            return await self._restart_every_engine(profile, plans, say)
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

    async def _restart_every_engine(self, profile: Profile, plans: Sequence[ReplicaPlan],
                                    say: Callable[[str], None]) -> SwitchReport:
        old = self.host.launcher
        assert old is not None
        old_profile, old_endpoint = old.profile, old.endpoint.base_url
        before, after = _engines_each(self.host.plans), _engines_each(plans)
        how = (f"'{profile.name}' runs {engines_label(after)}, the engines now {engines_label(before)}"
               if before != after else f"the engines share their GPU ({engines_label(after)})")
        placement = f"every engine restarted: {engines_label(before)} -> {engines_label(after)}"
        say(f"{how}: no new engine can start beside them, so every engine restarts with '{profile.name}' "
            "instead of a safe switch. Sessions wait until the first engine serves again; requests cut "
            "by the stop are retried.")
        self.restarting = True
        t0 = time.monotonic()
        try:
            self.state_changed.emit(SwitchPhase.STOPPING_OLD, placement)
            try:
                endpoint = await self.host.restart(profile, say)
            except Exception as exc:  # noqa: BLE001 - start the old profile again
                self.state_changed.emit(SwitchPhase.ROLLING_BACK, str(exc).splitlines()[0])
                try:
                    back = await self.host.restart(old_profile, say)
                except Exception as exc2:  # noqa: BLE001 - nothing serves now: say so
                    why = f"new profile failed ({exc}); the old one did not start again either: {exc2}"
                    self.state_changed.emit(SwitchPhase.FAILED, why)
                    return _restart_report(False, False, why, old_profile, profile, placement, old_endpoint, None, t0)
                self.state_changed.emit(SwitchPhase.ROLLED_BACK, str(exc).splitlines()[0])
                return _restart_report(False, True, f"new profile failed: {exc}", old_profile, profile, placement,
                                       old_endpoint, back.base_url, t0)
            self.state_changed.emit(SwitchPhase.DONE, endpoint.base_url)
            say(f"switched to '{profile.name}' by restarting every engine")
            return _restart_report(True, False, "switched by restarting every engine", old_profile, profile,
                                   placement, old_endpoint, endpoint.base_url, t0)
        finally:
            self.restarting = False


def _engines_each(plans: Sequence[ReplicaPlan]) -> int:
    return max((plan.engines_on_device for plan in plans), default=1)


def _restart_report(ok: bool, rolled_back: bool, reason: str, old: Profile, new: Profile, placement: str,
                    old_endpoint: str, new_endpoint: str | None, t0: float) -> SwitchReport:
    """A switch done as a restart: no drain, no side-by-side pause measured."""
    total = time.monotonic() - t0
    return SwitchReport(ok=ok, rolled_back=rolled_back, reason=reason, from_profile=old.name, to_profile=new.name,
                        placement=placement, old_endpoint=old_endpoint, new_endpoint=new_endpoint,
                        start_new_s=total if new_endpoint else None, drain_s=None, total_s=total,
                        in_flight_at_switch=None, left_on_old=None, requests_during=0, failed_during=0,
                        largest_gap_s=None, gap_session=None, baseline_gap_s=None)


def plan_beside(platform: str, live_env: dict[str, str]) -> Placement:
    """Where a second engine runs beside the live one on this machine (blocking: NVML)."""
    return plan_placement(platform, live_env={**os.environ, **live_env}, cpu_count=os.cpu_count() or 1,
                          gpus=gpu_inventory() if platform == "cuda" else ())
