"""Which session generates next, and why the others wait: the fleet's admission.

It owns the :class:`~workstation.fleet.gate.GenerationGate` and everything that decides who
passes it:

- **adaptive limits**, one :class:`~workstation.core.admission_limit.AdaptiveLimit` per
  engine, fed by the engine's ``/metrics`` as the shared scrapers read them (:meth:`observe`;
  the service factory connects them), under the fleet's fixed cap as the ceiling. Without
  readings — a fleet built by hand, an endpoint with no ``/metrics`` — the cap alone applies;
- **priorities** from the session's state: the session the user just answered (its next
  turn) or watches in the focus view goes first, one marked background lets others go first;
- **the reason a session waits**, in the words the window shows ("engine full: KV 97 %"),
  announced as :class:`~workstation.core.fleet_events.SessionWaitChanged`, and each engine's
  limit as :class:`~workstation.core.fleet_events.AdmissionChanged`.

Slots are held per model turn only: a session running a tool, however long, holds none.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from workstation.core.admission import Priority
from workstation.core.admission_limit import AdaptiveLimit, AdmissionTarget, EngineLoad, LimitDecision, Verdict
from workstation.core.fleet_events import AdmissionChanged, GenerationSlotsChanged, SessionWaitChanged
from workstation.core.session_state import SessionState as S
from workstation.fleet.book import SessionBook
from workstation.fleet.gate import GenerationGate
from workstation.fleet.routing import Router
from workstation.telemetry.vllm_metrics import EngineMetricsSample

log = logging.getLogger(__name__)


def load_from_sample(sample: EngineMetricsSample) -> EngineLoad:
    """An engine's load from a scrape."""
    recent = sample.ttft_recent_s
    return EngineLoad(
        t_s=sample.t_mono, up=sample.up, waiting=sample.waiting, running=sample.running,
        kv_usage_pct=sample.kv_cache_usage_pct,
        ttft_p95_s=recent.p95 if recent is not None else None,
        ttft_count=recent.count if recent is not None else 0,
        preemptions_total=sample.preemptions_total, has_metrics=sample.has_metrics,
    )


class Admission:
    def __init__(
        self,
        *,
        cap: int,
        book: SessionBook,
        router: Router,
        emit: Callable[[object], None],
        adaptive: bool = True,
        target: AdmissionTarget | None = None,
        check: Callable[[str], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``check(session_id)`` may raise ``SlotRefused`` before a session queues (its
        budget, its drained engine)."""
        self._book = book
        self._router = router
        self._emit = emit
        self._clock = clock
        self.adaptive = adaptive
        self.target = target or AdmissionTarget()
        self._limits: dict[str, AdaptiveLimit] = {}
        self._decisions: dict[str, LimitDecision] = {}
        self._focus: str | None = None
        self._boosted: set[str] = set()
        self._shown: dict[str, str] = {}
        self.gate = GenerationGate(
            cap, on_change=self._on_slots, on_wait=self._on_wait, on_admit=self._on_admit,
            group_of=self._group_of, priority_of=self.priority_of, check=check,
        )

    # ----- reading -----
    @property
    def cap(self) -> int:
        return self.gate.cap

    def limit_of(self, endpoint: str) -> int:
        """How many sessions may generate on the engine now (the cap where nothing else holds)."""
        limit = self.gate.queue.limit(endpoint)
        return self.cap if limit is None else min(limit, self.cap)

    def priority_of(self, session_id: str) -> Priority:
        if session_id == self._focus or session_id in self._boosted:
            return Priority.FOREGROUND
        rec = self._book.get(session_id)
        if rec is not None and rec.spec.background:
            return Priority.BACKGROUND
        return Priority.NORMAL

    def why_waiting(self, session_id: str) -> str:
        """Plain words: why the session does not generate now ('' when it does not wait)."""
        queue = self.gate.queue
        blocked = queue.blocked_by(session_id)
        if blocked is None:
            return ""
        if blocked == "cap":
            return f"fleet cap: {queue.cap} generating"
        group = queue.group_of(session_id) or ""
        if blocked == "group":
            decision = self._decisions.get(group)
            if decision is not None and decision.reason and decision.verdict is not Verdict.BLIND:
                return decision.reason
            return f"engine limit: {self.limit_of(group)} generating"
        ahead = queue.ahead_of(session_id)
        return f"{ahead} ahead in line" if ahead else "next in line"

    # ----- priorities -----
    def focus(self, session_id: str | None) -> None:
        """The session the user watches in the focus view (None: back to the grid)."""
        old, self._focus = self._focus, session_id
        for sid in (old, session_id):
            if sid is not None:
                self.gate.reprioritize(sid)

    def answered(self, session_id: str) -> None:
        """The user just answered the session (a reply, an approval): its next turn goes first."""
        self._boosted.add(session_id)
        self.gate.reprioritize(session_id)

    def background_changed(self, session_id: str) -> None:
        self.gate.reprioritize(session_id)

    def forget(self, session_id: str) -> None:
        self._boosted.discard(session_id)
        self._shown.pop(session_id, None)
        if self._focus == session_id:
            self._focus = None

    # ----- limits -----
    def set_cap(self, cap: int) -> None:
        self.gate.set_cap(cap)
        for name, limit in self._limits.items():
            limit.set_ceiling(cap)
            self._apply(name)

    def observe(self, sample: EngineMetricsSample) -> None:
        """A scrape of an engine: steer its limit."""
        name = sample.endpoint
        if name not in self._router.names():
            return
        load = load_from_sample(sample)
        self._router.set_kv(name, load.kv_usage_pct if load.up else None)
        if not self.adaptive:
            return
        limit = self._limits.get(name)
        if limit is None:
            limit = self._limits[name] = AdaptiveLimit(self.target, self.cap)
        queue = self.gate.queue
        decision = limit.observe(load, now_s=self._clock(), in_flight=queue.holding_in(name),
                                 queued=queue.waiting_in(name))
        old = self._decisions.get(name)
        self._decisions[name] = decision
        self._apply(name)
        if old is None or (old.limit, old.verdict, old.reason) != (decision.limit, decision.verdict, decision.reason):
            self._emit(AdmissionChanged(
                name, decision.limit, decision.verdict.value, decision.reason, load.kv_usage_pct,
                load.waiting, load.ttft_p95_s, queue.holding_in(name), queue.waiting_in(name)))
        self._update_waiters()

    def _apply(self, name: str) -> None:
        decision = self._decisions.get(name)
        if decision is not None:
            self.gate.set_limit(name, min(decision.limit, self.cap))

    # ----- gate callbacks -----
    def _group_of(self, session_id: str) -> str:
        rec = self._book.get(session_id)
        return rec.endpoint_name if rec is not None else ""

    def _on_slots(self, generating: int, waiting: int, cap: int) -> None:
        self._emit(GenerationSlotsChanged(generating, waiting, cap))

    def _on_wait(self, session_id: str) -> None:
        reason = self.why_waiting(session_id) or "waiting for a generation slot"
        self._shown[session_id] = reason
        self._book.set_state(session_id, S.QUEUED, reason)

    def _on_admit(self, session_id: str, waited: bool) -> None:
        self._boosted.discard(session_id)
        self._shown.pop(session_id, None)
        self._book.set_state(session_id, S.RUNNING, "generating")

    def _update_waiters(self) -> None:
        for sid in self.gate.waiting_ids():
            reason = self.why_waiting(sid)
            if reason and self._shown.get(sid) != reason:
                self._shown[sid] = reason
                self._emit(SessionWaitChanged(sid, reason))
