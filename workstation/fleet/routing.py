"""Routing sessions over several OpenAI-compatible endpoints.

A session stays on the endpoint it was given (its conversation lives in that engine's
prefix cache); a new session goes to the endpoint with the fewest active sessions, ties to
the first configured. The choice is persisted with the session, so it survives restarts.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from workstation.core.admission import least_loaded
from workstation.core.endpoints import Endpoint
from workstation.core.errors import UserError


class Router:
    def __init__(self, endpoints: Sequence[Endpoint]) -> None:
        if not endpoints:
            raise UserError("no engine endpoint configured", hint="start the engine or pass --endpoint URL")
        names = [e.name for e in endpoints]
        dupes = sorted(n for n, c in Counter(names).items() if c > 1)
        if dupes:
            raise UserError(f"endpoint names must be unique; repeated: {', '.join(dupes)}")
        self._endpoints: dict[str, Endpoint] = {e.name: e for e in endpoints}
        self._assigned: dict[str, str] = {}
        self._active: set[str] = set()

    @property
    def endpoints(self) -> tuple[Endpoint, ...]:
        return tuple(self._endpoints.values())

    def get(self, name: str) -> Endpoint:
        try:
            return self._endpoints[name]
        except KeyError:
            raise UserError(f"no endpoint named {name!r}",
                            hint=f"known: {', '.join(self._endpoints)}") from None

    def assign(self, session_id: str, *, pinned: str | None = None, previous: str | None = None) -> Endpoint:
        """The endpoint for a session: its previous one if it still exists, the pinned one, or
        the least loaded."""
        if previous and previous in self._endpoints:
            name = previous
        elif pinned:
            name = self.get(pinned).name
        else:
            name = least_loaded(self.loads(), self._endpoints)
        self._assigned[session_id] = name
        return self._endpoints[name]

    def update(self, endpoint: Endpoint) -> bool:
        """Put ``endpoint`` in place of the one with its name (a restarted engine on a new port
        or key keeps its sessions), or add it. True when it replaced one."""
        existed = endpoint.name in self._endpoints
        self._endpoints[endpoint.name] = endpoint
        return existed

    def endpoint_of(self, session_id: str) -> Endpoint | None:
        name = self._assigned.get(session_id)
        return self._endpoints.get(name) if name else None

    def set_active(self, session_id: str, active: bool) -> None:
        """Only sessions that are not finished (done, failed, stopped) count as load."""
        if active:
            self._active.add(session_id)
        else:
            self._active.discard(session_id)

    def forget(self, session_id: str) -> None:
        self._assigned.pop(session_id, None)
        self._active.discard(session_id)

    def loads(self) -> dict[str, int]:
        counts = dict.fromkeys(self._endpoints, 0)
        for sid in self._active:
            name = self._assigned.get(sid)
            if name in counts:
                counts[name] += 1
        return counts
