"""Fair admission to a limited number of generation slots, and least-loaded routing. Pure rules.

A session asks for a slot before each model turn and gives it back after the turn, so a
slot is held only while the engine generates for that session (tools run without one).
Waiting sessions are admitted in the order they asked; a session that just gave its slot
back and asks again joins the back of the line — round-robin between sessions, so none
can starve the others however fast it asks. Lowering the cap never takes a slot away
from a session that holds one; it only admits fewer until the count is under the cap.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Iterable, Mapping
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)


class AdmissionQueue(Generic[K]):
    """Who generates now (at most ``cap``), who waits, in which order."""

    def __init__(self, cap: int) -> None:
        self._cap = _valid_cap(cap)
        self._holding: set[K] = set()
        self._waiting: OrderedDict[K, None] = OrderedDict()

    @property
    def cap(self) -> int:
        return self._cap

    @property
    def holding(self) -> frozenset[K]:
        return frozenset(self._holding)

    @property
    def waiting(self) -> tuple[K, ...]:
        return tuple(self._waiting)

    def holds(self, key: K) -> bool:
        return key in self._holding

    def is_waiting(self, key: K) -> bool:
        return key in self._waiting

    def request(self, key: K) -> bool:
        """Ask for a slot. True: admitted now. False: waits (see :meth:`release`)."""
        if key in self._holding:
            return True
        if key in self._waiting:
            return False
        if not self._waiting and len(self._holding) < self._cap:
            self._holding.add(key)
            return True
        self._waiting[key] = None
        return False

    def release(self, key: K) -> list[K]:
        """Give a slot back (or stop waiting). Returns the keys admitted as a result, in order."""
        self._holding.discard(key)
        self._waiting.pop(key, None)
        return self._admit()

    def set_cap(self, cap: int) -> list[K]:
        """Change the cap; returns keys admitted because it grew."""
        self._cap = _valid_cap(cap)
        return self._admit()

    def _admit(self) -> list[K]:
        admitted: list[K] = []
        while self._waiting and len(self._holding) < self._cap:
            key, _ = self._waiting.popitem(last=False)
            self._holding.add(key)
            admitted.append(key)
        return admitted


def _valid_cap(cap: int) -> int:
    if not isinstance(cap, int) or isinstance(cap, bool) or cap < 1:
        raise ValueError(f"the generation cap must be a whole number of at least 1, not {cap!r}")
    return cap


def least_loaded(loads: Mapping[str, int], order: Iterable[str]) -> str:
    """The name with the smallest load; ties go to the one earliest in ``order``.

    ``order`` lists every candidate (names missing from ``loads`` count as load 0).
    Raises ``ValueError`` when there is no candidate.
    """
    best: str | None = None
    best_load = 0
    for name in order:
        load = loads.get(name, 0)
        if best is None or load < best_load:
            best, best_load = name, load
    if best is None:
        raise ValueError("no endpoint to route to")
    return best
