"""Safe switch: apply a profile to the live engine without losing work.

Side by side (a spare GPU, or apart on the CPU):

1. start the new engine (its own port, placement from :mod:`~workstation.tuning.placement`)
   and wait for ``/health``;
2. probe it with one short completion — it must really serve (a 5xx is asked again twice,
   2 s apart, before it counts);
3. point every client at it (``ChatClient.endpoint`` is reassigned; streams in flight finish
   on the old engine, new requests go to the new one) and call the ``retarget`` callbacks
   (the fleet's router);
4. drain: wait until nothing is open to the old engine, at most ``drain_timeout_s``, and
   for ``settle_s`` on end; streams cut after that are retried by their clients. "Nothing
   open" is the engine's ``/metrics`` (running + waiting) *and* the clients' own count of
   requests open to it (``open_requests``, or the clients'): the gauges miss a request the
   API server has not handed to its scheduler yet and one whose last chunks are still on the
   wire — on a busy 2-core machine, one of 1,108 requests was cut that way;
5. stop the old engine.

Roll back when the new engine does not start, fails the probe, or dies while the old one
drains: clients go back to the old endpoint and the new engine is stopped.

Without a spare device (``side_by_side=False``, one GPU) the old engine is drained and
stopped first, then the new one starts; if it fails, the old profile is started again.

The pause sessions see is measured, not estimated: the switch observes every client's
finished requests and reports the largest gap between tokens (including the wait for a
first token) among requests that overlapped the switch, next to the same measure in an
equal window before it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any, Protocol

import httpx
from psygnal import Signal

from workstation.core.endpoints import Endpoint
from workstation.core.profiles import Profile
from workstation.core.requests import RequestRecord
from workstation.core.traffic import largest_token_gap
from workstation.engine.sse import status_error
from workstation.tuning.loadgen import read_metrics

log = logging.getLogger(__name__)


class SwitchPhase(str, Enum):
    IDLE = "idle"
    STARTING_NEW = "starting_new"
    PROBING = "probing"
    RETARGETING = "retargeting"
    DRAINING = "draining"
    STOPPING_OLD = "stopping_old"
    DONE = "done"
    ROLLING_BACK = "rolling_back"
    ROLLED_BACK = "rolled_back"
    FAILED = "failed"


class EngineLike(Protocol):
    profile: Profile

    @property
    def endpoint(self) -> Endpoint: ...

    def alive(self) -> bool: ...

    async def start(self, progress: Callable[[str], None] | None = None) -> Endpoint: ...

    async def stop(self) -> None: ...


LauncherFactory = Callable[[Profile, dict[str, str]], EngineLike]
Retarget = Callable[[Endpoint], Any]


@dataclass(frozen=True, slots=True)
class SwitchReport:
    ok: bool
    rolled_back: bool
    reason: str
    from_profile: str
    to_profile: str
    placement: str
    old_endpoint: str
    new_endpoint: str | None
    start_new_s: float | None
    drain_s: float | None
    total_s: float
    in_flight_at_switch: int | None
    """Requests running or waiting on the old engine when clients were pointed away."""
    left_on_old: int | None
    """Still running on the old engine when it was stopped (their clients retry them)."""
    requests_during: int
    failed_during: int
    largest_gap_s: float | None
    """The largest gap between tokens a running session saw from the start of the switch
    (the new engine's start-up competes for the machine too) to its end."""
    gap_session: str | None
    baseline_gap_s: float | None
    """The same measure over the ``baseline_s`` watched before the switch (None: not watched)."""

    def lines(self) -> list[str]:
        def s(x: float | None) -> str:
            return "n/a" if x is None else f"{x:.2f} s"

        verdict = "switched" if self.ok else ("rolled back" if self.rolled_back else "failed")
        return [
            f"{verdict}: {self.from_profile} -> {self.to_profile} ({self.reason})",
            f"  placement: {self.placement}",
            f"  new engine up in {s(self.start_new_s)}, drain {s(self.drain_s)}, total {s(self.total_s)}",
            f"  in flight at the switch: {self.in_flight_at_switch}, left on the old engine: {self.left_on_old}",
            f"  requests during the switch: {self.requests_during}, failed: {self.failed_during}",
            f"  largest gap between tokens a session saw: {s(self.largest_gap_s)} "
            f"(session {self.gap_session}); before the switch: {s(self.baseline_gap_s)}",
        ]

    def to_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__slots__}  # type: ignore[attr-defined]


PROBE_TRIES = 3
"""How often the probe asks a new engine that answers 5xx before the switch rolls back."""
PROBE_RETRY_S = 2.0


class SafeSwitch:
    """Switch the live engine to another profile. ``state_changed(SwitchPhase, detail)``."""

    state_changed = Signal(object, str)

    def __init__(
        self,
        http: httpx.AsyncClient,
        old: EngineLike,
        factory: LauncherFactory,
        *,
        clients: Sequence[Any] = (),
        retarget: Sequence[Retarget] = (),
        side_by_side: bool = True,
        placement_env: dict[str, str] | None = None,
        placement_reason: str = "",
        drain_timeout_s: float = 120.0,
        drain_poll_s: float = 0.25,
        settle_s: float = 1.0,
        open_requests: Callable[[str], int] | None = None,
        probe: bool = True,
        baseline_s: float = 0.0,
    ) -> None:
        """``open_requests``: requests the app's clients have open to a base URL (default: the
        sum over ``clients``' own counts); ``settle_s``: how long the old engine must stay
        idle before it is stopped (a request sent just before the retarget arrives late)."""
        self.http = http
        self.old = old
        self.factory = factory
        self.clients = list(clients)
        self.retarget = list(retarget)
        self.side_by_side = side_by_side
        self.placement_env = dict(placement_env or {})
        self.placement_reason = placement_reason or ("side by side" if side_by_side else "drain, then restart")
        self.drain_timeout_s = drain_timeout_s
        self.drain_poll_s = drain_poll_s
        self.settle_s = settle_s
        self._open_requests = open_requests or self._clients_open
        self.probe = probe
        self.baseline_s = baseline_s
        self._baseline_from: float | None = None
        self.phase = SwitchPhase.IDLE
        self.records: list[RequestRecord] = []

    # ----- observation -----
    def _observe(self, record: RequestRecord) -> None:
        self.records.append(record)

    def _attach(self) -> None:
        for c in self.clients:
            c.observers.append(self._observe)

    def _detach(self) -> None:
        for c in self.clients:
            with contextlib.suppress(ValueError):
                c.observers.remove(self._observe)

    def _set(self, phase: SwitchPhase, detail: str = "") -> None:
        self.phase = phase
        log.info("switch %s %s", phase.value, detail)
        self.state_changed.emit(phase, detail)

    async def _point_at(self, endpoint: Endpoint) -> None:
        for c in self.clients:
            c.endpoint = endpoint
        for fn in self.retarget:
            out = fn(endpoint)
            if isinstance(out, Awaitable):
                await out

    async def _probe(self, endpoint: Endpoint) -> None:
        """One short completion, tried up to :data:`PROBE_TRIES` times :data:`PROBE_RETRY_S`
        apart while the engine answers 5xx (an engine just past ``/health`` once answered its
        first request 500 on a loaded 2-core machine, then served); a 4xx (the engine refuses
        the request as sent: a wrong model name, a bad key) fails at once. The engine's own
        message goes into the error, so the roll-back says why."""
        headers = endpoint.auth_headers()
        body = {"model": endpoint.model, "prompt": "ok", "max_tokens": 1}
        for attempt in range(1, PROBE_TRIES + 1):
            response = await self.http.post(endpoint.v1 + "/completions", json=body, headers=headers, timeout=60.0)
            if response.status_code == 200:
                if attempt > 1:
                    log.info("switch probe answered on try %d", attempt)
                return
            why = status_error(response.status_code, response.content)
            if response.status_code < 500 or attempt == PROBE_TRIES:
                tries = f" ({attempt} tries, {PROBE_RETRY_S:g} s apart)" if attempt > 1 else ""
                raise RuntimeError(f"a probe of the new engine: {why}{tries}")
            log.warning("switch probe try %d: %s; trying again in %g s", attempt, why, PROBE_RETRY_S)
            await asyncio.sleep(PROBE_RETRY_S)

    async def _in_flight(self, endpoint: Endpoint) -> int | None:
        """What the old engine's scheduler holds (running + waiting; None: unreadable)."""
        reading = await read_metrics(self.http, endpoint)
        if reading is None:
            return None
        return int((reading.gauges.get("running") or 0) + (reading.gauges.get("waiting") or 0))

    def _clients_open(self, base_url: str) -> int:
        counts = {id(c.open_requests): c.open_requests for c in self.clients if hasattr(c, "open_requests")}
        return sum(count.on(base_url) for count in counts.values())

    async def _left(self, endpoint: Endpoint) -> int:
        """Requests still open to ``endpoint``: the larger of the engine's and the clients'
        counts (the engine's alone when its gauges are unreadable counts as 0)."""
        engine = await self._in_flight(endpoint)
        return max(engine or 0, self._open_requests(endpoint.base_url))

    async def _drain(self, endpoint: Endpoint, new: EngineLike | None) -> tuple[float, int]:
        """Wait until nothing is open to the old engine for ``settle_s``; returns (seconds,
        requests left at the end)."""
        t0 = time.monotonic()
        idle_since: float | None = None
        while True:
            left = await self._left(endpoint)
            now = time.monotonic()
            if left:
                idle_since = None
            else:
                idle_since = now if idle_since is None else idle_since
                if now - idle_since >= self.settle_s:
                    break
            if now - t0 >= self.drain_timeout_s:
                break
            if new is not None and not new.alive():
                raise RuntimeError("the new engine died while the old one drained")
            await asyncio.sleep(self.drain_poll_s)
        return time.monotonic() - t0, left

    # ----- the switch -----
    async def run(self, profile: Profile, *, say: Callable[[str], None] | None = None) -> tuple[SwitchReport, EngineLike]:
        """Switch to ``profile`` (flattened). Returns the report and the engine now serving."""
        say = say or (lambda _m: None)
        old_ep = self.old.endpoint
        self._attach()
        try:
            if self.baseline_s > 0:
                say(f"watching the sessions for {self.baseline_s:.0f} s before switching (baseline)")
                self._baseline_from = time.monotonic()
                await asyncio.sleep(self.baseline_s)
            t0 = time.monotonic()
            if self.side_by_side:
                return await self._side_by_side(profile, old_ep, t0, say)
            return await self._restart(profile, old_ep, t0, say)
        finally:
            self._detach()

    def _report(self, *, ok: bool, rolled_back: bool, reason: str, profile: Profile, old_ep: Endpoint,
                new_ep: Endpoint | None, t0: float, start_new_s: float | None,
                drain_s: float | None, in_flight: int | None, left: int | None) -> SwitchReport:
        t_end = time.monotonic()
        during = [r for r in self.records if r.started_s + r.duration_s >= t0]
        gap, who = largest_token_gap(during, t0, t_end)
        before: float | None = None
        if self._baseline_from is not None:
            before, _ = largest_token_gap(
                [r for r in self.records if r.started_s >= self._baseline_from and r.started_s + r.duration_s < t0],
                self._baseline_from, t0,
            )
        return SwitchReport(
            ok=ok, rolled_back=rolled_back, reason=reason, from_profile=self.old.profile.name,
            to_profile=profile.name, placement=self.placement_reason, old_endpoint=old_ep.base_url,
            new_endpoint=new_ep.base_url if new_ep else None, start_new_s=start_new_s, drain_s=drain_s,
            total_s=t_end - t0, in_flight_at_switch=in_flight, left_on_old=left,
            requests_during=len(during), failed_during=sum(1 for r in during if not r.ok),
            largest_gap_s=gap, gap_session=who, baseline_gap_s=before,
        )

    async def _side_by_side(self, profile: Profile, old_ep: Endpoint, t0: float,
                            say: Callable[[str], None]) -> tuple[SwitchReport, EngineLike]:
        new = self.factory(profile, dict(self.placement_env))
        self._set(SwitchPhase.STARTING_NEW, f"{profile.name}: {self.placement_reason}")
        say(f"starting the new engine with profile '{profile.name}' ({self.placement_reason})")
        try:
            new_ep = await new.start(say)
            start_new_s = time.monotonic() - t0
            if self.probe:
                self._set(SwitchPhase.PROBING)
                await self._probe(new_ep)
        except (Exception, asyncio.CancelledError) as exc:  # anything: the old engine keeps serving
            await new.stop()
            self._set(SwitchPhase.ROLLED_BACK, str(exc))
            say(f"the new engine failed ({exc}); the old one keeps serving")
            if isinstance(exc, asyncio.CancelledError):
                raise
            return self._report(ok=False, rolled_back=True, reason=f"new engine failed: {exc}", profile=profile,
                                old_ep=old_ep, new_ep=None, t0=t0, start_new_s=None,
                                drain_s=None, in_flight=None, left=None), self.old
        self._set(SwitchPhase.RETARGETING, new_ep.base_url)
        in_flight = await self._left(old_ep)
        await self._point_at(new_ep)
        say(f"clients now use {new_ep.base_url}; {in_flight} request(s) finishing on the old engine")
        self._set(SwitchPhase.DRAINING)
        try:
            drain_s, left = await self._drain(old_ep, new)
        except RuntimeError as exc:
            self._set(SwitchPhase.ROLLING_BACK, str(exc))
            await self._point_at(old_ep)
            await new.stop()
            self._set(SwitchPhase.ROLLED_BACK, str(exc))
            return self._report(ok=False, rolled_back=True, reason=str(exc), profile=profile, old_ep=old_ep,
                                new_ep=new_ep, t0=t0, start_new_s=start_new_s, drain_s=None,
                                in_flight=in_flight, left=None), self.old
        self._set(SwitchPhase.STOPPING_OLD, f"{left or 0} request(s) left")
        await self.old.stop()
        self._set(SwitchPhase.DONE, new_ep.base_url)
        say(f"switched to '{profile.name}'")
        return self._report(ok=True, rolled_back=False, reason="switched side by side", profile=profile,
                            old_ep=old_ep, new_ep=new_ep, t0=t0, start_new_s=start_new_s,
                            drain_s=drain_s, in_flight=in_flight, left=left), new

    async def _restart(self, profile: Profile, old_ep: Endpoint, t0: float,
                       say: Callable[[str], None]) -> tuple[SwitchReport, EngineLike]:
        in_flight = await self._left(old_ep)
        self._set(SwitchPhase.DRAINING, "no spare device: draining the live engine first")
        drain_s, left = await self._drain(old_ep, None)
        self._set(SwitchPhase.STOPPING_OLD)
        old_profile = self.old.profile
        await self.old.stop()
        new = self.factory(profile, dict(self.placement_env))
        self._set(SwitchPhase.STARTING_NEW, profile.name)
        try:
            new_ep = await new.start(say)
            start_new_s = time.monotonic() - t0
            if self.probe:
                await self._probe(new_ep)
        except Exception as exc:  # noqa: BLE001 - roll back to the old profile
            await new.stop()
            self._set(SwitchPhase.ROLLING_BACK, str(exc))
            back = self.factory(old_profile, {})
            try:
                back_ep = await back.start(say)
            except Exception as exc2:  # noqa: BLE001 - nothing serves now: say so
                await back.stop()
                self._set(SwitchPhase.FAILED, f"{exc}; the old profile did not start again either: {exc2}")
                return self._report(ok=False, rolled_back=False, reason=f"new engine failed ({exc}) and the old "
                                    f"profile did not come back ({exc2})", profile=profile, old_ep=old_ep,
                                    new_ep=None, t0=t0, start_new_s=None, drain_s=drain_s,
                                    in_flight=in_flight, left=left), back
            await self._point_at(back_ep)
            self._set(SwitchPhase.ROLLED_BACK, str(exc))
            return self._report(ok=False, rolled_back=True, reason=f"new engine failed: {exc}", profile=profile,
                                old_ep=old_ep, new_ep=back_ep, t0=t0, start_new_s=None,
                                drain_s=drain_s, in_flight=in_flight, left=left), back
        await self._point_at(new_ep)
        self._set(SwitchPhase.DONE, new_ep.base_url)
        return self._report(ok=True, rolled_back=False, reason="switched by restart (no spare device)",
                            profile=profile, old_ep=old_ep, new_ep=new_ep, t0=t0,
                            start_new_s=start_new_s, drain_s=drain_s, in_flight=in_flight, left=left), new
