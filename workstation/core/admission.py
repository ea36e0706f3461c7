"""Who generates next: fair admission to generation slots, with priorities and per-engine
limits, and least-loaded routing. Pure rules.

A session asks for a slot before each model turn and gives it back after the turn, so a
slot is held only while the engine generates for that session (tools — however long —
run without one). Two limits apply at once: the fleet's cap on sessions generating at
all (``fleet.max_generating``, the ceiling) and, per engine (a *group*), the limit that
adaptive admission sets from what that engine reports (``core/admission_limit.py``).

Order: every request draws a ticket, its arrival number shifted by its priority —
:data:`LEAD` places a foreground request (the session the user just answered, or watches
in the focus view) ahead of up to ``LEAD`` waiting ones, and a background request behind
up to ``LAG`` later ones. Waiters are admitted in ticket order, skipping those whose
engine is at its limit. A session that just gave its slot back and asks again draws a new
ticket (round-robin between sessions, so none can monopolise the slots however fast it
asks). **Nothing starves**: a waiting request is passed by at most ``LEAD + LAG`` requests
that came after it (a later request's ticket is at least its arrival number minus
``LEAD``). Lowering a limit never takes a slot away from a session that holds one; it
only admits fewer until the count is under the limit.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass
from enum import IntEnum
from typing import Generic, TypeVar

from workstation.core.agent_events import SlotRefused

__all__ = ["LAG", "LEAD", "AdmissionQueue", "Priority", "SlotRefused", "least_loaded"]

K = TypeVar("K", bound=Hashable)


class Priority(IntEnum):
    FOREGROUND = 0
    """The user just answered it, or watches it in the focus view: it goes first."""
    NORMAL = 1
    BACKGROUND = 2
    """Marked background by the user: it lets others go first (but never starves)."""


LEAD = 256
"""A foreground request goes ahead of up to this many waiting requests."""
LAG = 64
"""A background request lets up to this many later requests go first."""
_SHIFT = {Priority.FOREGROUND: -LEAD, Priority.NORMAL: 0, Priority.BACKGROUND: LAG}


@dataclass(frozen=True, slots=True)
class _Wait:
    ticket: int
    arrival: int
    group: str
    priority: Priority


class AdmissionQueue(Generic[K]):
    """Who generates now (at most ``cap``, and at most a group's limit per group), who
    waits, in which order."""

    def __init__(self, cap: int) -> None:
        self._cap = _valid_cap(cap)
        self._holding: dict[K, str] = {}
        self._waiting: dict[K, _Wait] = {}
        self._limits: dict[str, int] = {}
        self._arrivals = 0

    # ----- reading -----
    @property
    def cap(self) -> int:
        return self._cap

    @property
    def holding(self) -> frozenset[K]:
        return frozenset(self._holding)

    @property
    def waiting(self) -> tuple[K, ...]:
        """Waiters in the order they would be admitted if every group had room."""
        return tuple(k for k, _ in self._ordered())

    def holds(self, key: K) -> bool:
        return key in self._holding

    def is_waiting(self, key: K) -> bool:
        return key in self._waiting

    def limit(self, group: str) -> int | None:
        """The group's own limit; None: only the cap applies."""
        return self._limits.get(group)

    def holding_in(self, group: str) -> int:
        return sum(1 for g in self._holding.values() if g == group)

    def waiting_in(self, group: str) -> int:
        return sum(1 for w in self._waiting.values() if w.group == group)

    def group_of(self, key: K) -> str | None:
        if key in self._holding:
            return self._holding[key]
        wait = self._waiting.get(key)
        return wait.group if wait is not None else None

    def ahead_of(self, key: K) -> int:
        """Waiters of the same group that go before ``key`` (0 when it is next or not waiting)."""
        wait = self._waiting.get(key)
        if wait is None:
            return 0
        mine = (wait.ticket, wait.arrival)
        return sum(1 for w in self._waiting.values() if w.group == wait.group and (w.ticket, w.arrival) < mine)

    def blocked_by(self, key: K) -> str | None:
        """Why a waiter is not admitted now: ``"cap"`` (the fleet's cap is reached),
        ``"group"`` (its engine's limit is), ``"queue"`` (others go first); None when it
        does not wait."""
        wait = self._waiting.get(key)
        if wait is None:
            return None
        if len(self._holding) >= self._cap:
            return "cap"
        if not self._group_has_room(wait.group):
            return "group"
        return "queue"

    # ----- changing -----
    def request(self, key: K, *, group: str = "", priority: Priority = Priority.NORMAL) -> bool:
        """Ask for a slot on ``group``'s engine. True: admitted now. False: waits (see
        :meth:`release`)."""
        if key in self._holding:
            return True
        if key in self._waiting:
            return False
        self._arrivals += 1
        self._waiting[key] = _Wait(self._arrivals + _SHIFT[priority], self._arrivals, group, priority)
        self._admit()
        return key in self._holding

    def reprioritize(self, key: K, priority: Priority) -> list[K]:
        """Move a waiter to another priority (it keeps its arrival); returns keys admitted."""
        wait = self._waiting.get(key)
        if wait is None or wait.priority is priority:
            return []
        self._waiting[key] = _Wait(wait.arrival + _SHIFT[priority], wait.arrival, wait.group, priority)
        return self._admit()

    def regroup(self, key: K, group: str) -> list[K]:
        """A waiter's session moved to another engine; returns keys admitted."""
        wait = self._waiting.get(key)
        if wait is None or wait.group == group:
            return []
        self._waiting[key] = _Wait(wait.ticket, wait.arrival, group, wait.priority)
        return self._admit()

    def release(self, key: K) -> list[K]:
        """Give a slot back (or stop waiting). Returns the keys admitted as a result, in order."""
        self._holding.pop(key, None)
        self._waiting.pop(key, None)
        return self._admit()

    def set_cap(self, cap: int) -> list[K]:
        """Change the cap; returns keys admitted because it grew."""
        self._cap = _valid_cap(cap)
        return self._admit()

    def set_limit(self, group: str, limit: int | None) -> list[K]:
        """Change a group's limit (None: only the cap); returns keys admitted because it grew."""
        if limit is None:
            self._limits.pop(group, None)
        else:
            self._limits[group] = _valid_cap(limit)
        return self._admit()

    # ----- internals -----
    def _ordered(self) -> list[tuple[K, _Wait]]:
        return sorted(self._waiting.items(), key=lambda kv: (kv[1].ticket, kv[1].arrival))

    def _group_has_room(self, group: str) -> bool:
        limit = self._limits.get(group)
        return limit is None or self.holding_in(group) < limit

    def _admit(self) -> list[K]:
        admitted: list[K] = []
        if not self._waiting or len(self._holding) >= self._cap:
            return admitted
        counts: dict[str, int] = {}
        for g in self._holding.values():
            counts[g] = counts.get(g, 0) + 1
        for key, wait in self._ordered():
            if len(self._holding) >= self._cap:
                break
            limit = self._limits.get(wait.group)
            if limit is not None and counts.get(wait.group, 0) >= limit:
                continue
            del self._waiting[key]
            self._holding[key] = wait.group
            counts[wait.group] = counts.get(wait.group, 0) + 1
            admitted.append(key)
        return admitted


def _valid_cap(cap: int) -> int:
    if not isinstance(cap, int) or isinstance(cap, bool) or cap < 1:
        raise ValueError(f"the generation cap must be a whole number of at least 1, not {cap!r}")
    return cap


def least_loaded(loads: Mapping[str, float], order: Iterable[str]) -> str:
    """The name with the smallest load; ties go to the one earliest in ``order``.

    ``order`` lists every candidate (names missing from ``loads`` count as load 0).
    Raises ``ValueError`` when there is no candidate.
    """
    best: str | None = None
    best_load: float = 0
    for name in order:
        load = loads.get(name, 0)
        if best is None or load < best_load:
            best, best_load = name, load
    if best is None:
        raise ValueError("no endpoint to route to")
    return best
