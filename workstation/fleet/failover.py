"""When an engine stops answering and another serves: drain it and move its sessions.

An endpoint counts as down when a session's run failed on it and it does not answer its
model list, or when its ``/metrics`` failed ``DOWN_AFTER_SCRAPES`` scrapes in a row. If
another endpoint serves, the down one is *drained* (no new sessions) and each of its
sessions is moved to the least loaded healthy endpoint, at a point where nothing is lost:

- a session waiting for a generation slot, or one whose engine-wait ended, is restarted
  there at once (its agent rebuilds from the stored history);
- a session running a tool finishes it; its next model turn is refused with
  :class:`~workstation.core.admission.SlotRefused` (the turn never started, so nothing of
  it is in the history) and it is restarted there;
- a session whose stream broke mid-turn retries; the retry's slot is refused the same way.
  The broken turn was never appended, so it is generated once, on the new engine.

Without a healthy endpoint the sessions wait for theirs (``ENGINE_WAIT``), as with one
engine. When the drained endpoint answers again it takes new sessions; moved sessions stay
where they are (their prefix now lives there).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from workstation.core.admission import SlotRefused
from workstation.core.endpoints import Endpoint
from workstation.core.fleet_events import EndpointAvailabilityChanged, SessionMoved
from workstation.core.session_state import SessionState as S
from workstation.fleet.book import SessionBook
from workstation.fleet.gate import GenerationGate
from workstation.fleet.routing import Router
from workstation.fleet.store import Store
from workstation.telemetry.vllm_metrics import EngineMetricsSample

log = logging.getLogger(__name__)

DOWN_AFTER_SCRAPES = 2


class Failover:
    def __init__(self, *, book: SessionBook, store: Store, router: Router, gate: GenerationGate,
                 running_on: Callable[[str], str | None], relaunch: Callable[[str], None],
                 watch: Callable[[str], None], emit: Callable[[object], None],
                 closing: Callable[[], bool], restarted: Callable[[str], None]) -> None:
        """``running_on(session_id)``: the endpoint its live agent was built on (None when no
        agent runs); ``relaunch(session_id)`` starts it again; ``watch(name)`` polls a down
        endpoint until it answers; ``restarted(name)``: the endpoint came back with empty
        caches (the agent factory primes it again)."""
        self._book = book
        self._store = store
        self._router = router
        self._gate = gate
        self._running_on = running_on
        self._relaunch = relaunch
        self._watch = watch
        self._emit = emit
        self._closing = closing
        self._restarted = restarted
        self._failed_scrapes: dict[str, int] = {}

    # ----- detection -----
    def observe(self, sample: EngineMetricsSample) -> None:
        """A scrape of an endpoint: two failures in a row mark it down; one success, up."""
        name = sample.endpoint
        if name not in self._router.names():
            return
        if sample.up:
            self._failed_scrapes.pop(name, None)
            return
        count = self._failed_scrapes[name] = self._failed_scrapes.get(name, 0) + 1
        if count == DOWN_AFTER_SCRAPES and self._others_serve(name):
            self.endpoint_down(name)

    def _others_serve(self, name: str) -> bool:
        return any(n != name for n in self._router.healthy())

    def endpoint_down(self, name: str) -> bool:
        """Drain ``name`` and move its sessions; False when no other endpoint serves (nothing
        moved: its sessions wait for it)."""
        if self._closing() or not self._others_serve(name):
            return False
        if self._router.drain(name):
            log.warning("engine %s stopped answering: drained, its sessions move", name)
            self._emit(EndpointAvailabilityChanged(name, False, "not answering; its sessions move to the other engines"))
            self._watch(name)
        for sid in self._router.sessions_on(name):
            self.move(sid)
        return True

    # ----- the endpoint watcher's news -----
    def on_down(self, endpoint: Endpoint) -> None:
        """The only engine of the sessions stopped answering: they wait for it."""
        self._emit(EndpointAvailabilityChanged(endpoint.name, False, f"{endpoint.base_url} is not answering"))

    def on_back(self, endpoint: Endpoint) -> None:
        """An endpoint answers again: it takes new sessions, the sessions waiting for it
        continue, and so do those waiting for another engine that is still down."""
        self._emit(EndpointAvailabilityChanged(endpoint.name, True, "answering again"))
        self._restarted(endpoint.name)
        self._failed_scrapes.pop(endpoint.name, None)
        self._router.undrain(endpoint.name)
        if self._closing():
            return
        waiting = [r for r in self._book.records() if r.state is S.ENGINE_WAIT]
        for name in {r.endpoint_name for r in waiting} - {endpoint.name}:
            self.endpoint_down(name)  # moves them here
        for rec in waiting:
            if rec.state is S.ENGINE_WAIT and rec.endpoint_name == endpoint.name:
                self._relaunch(rec.session_id)

    # ----- moving -----
    def move(self, session_id: str) -> bool:
        """Move one session off its drained endpoint (see the module docstring)."""
        rec = self._book.get(session_id)
        if rec is None or rec.state.is_finished or not self._router.is_drained(rec.endpoint_name):
            return False
        old = rec.endpoint_name
        new = self._router.move(session_id)
        if new is None:
            return False
        rec.endpoint_name = new.name
        self._store.queue_update(session_id, endpoint_name=new.name)
        self._emit(SessionMoved(session_id, old, new.name))
        log.info("session %s moves from %s to %s", rec.name, old, new.name)
        if self._gate.refuse(session_id, self.refusal(old, new.name)):
            return True  # its run ends now; the runner restarts it on the new engine
        if rec.state is S.ENGINE_WAIT:
            self._relaunch(session_id)
        return True  # a running tool finishes; its next turn is refused by check()

    def refusal(self, old: str, new: str) -> SlotRefused:
        return SlotRefused(f"engine {old} stopped answering; continuing on {new}")

    def check(self, session_id: str) -> None:
        """Refuse the next turn of an agent built on an endpoint its session left."""
        built_on = self._running_on(session_id)
        if built_on is not None and self.moved(session_id, built_on):
            raise self.refusal(built_on, self._book.rec(session_id).endpoint_name)

    def moved(self, session_id: str, built_on: str) -> bool:
        """The session left ``built_on`` while its agent ran there."""
        rec = self._book.get(session_id)
        return rec is not None and rec.endpoint_name != built_on
