"""Routing sessions over several OpenAI-compatible endpoints.

A session stays on the endpoint it was given (its conversation lives in that engine's
prefix cache). A new session goes to the least loaded endpoint that is not drained: the
lowest KV-cache use as the engines last reported it (in steps of 10 %, so two engines a
point apart do not flip-flop), then the fewest active sessions, ties to the first
configured. An endpoint that stopped answering is *drained*: no new session goes there and
its sessions are moved (:meth:`move`) to a healthy one, where they continue from their
history; it takes new sessions again once it answers. The choice is persisted with the
session, so it survives restarts.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from workstation.core.admission import least_loaded
from workstation.core.endpoints import Endpoint
from workstation.core.errors import UserError

KV_STEP_PCT = 10.0


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
        self._kv: dict[str, float] = {}
        self._drained: set[str] = set()

    @property
    def endpoints(self) -> tuple[Endpoint, ...]:
        return tuple(self._endpoints.values())

    def names(self) -> tuple[str, ...]:
        return tuple(self._endpoints)

    def get(self, name: str) -> Endpoint:
        try:
            return self._endpoints[name]
        except KeyError:
            raise UserError(f"no endpoint named {name!r}",
                            hint=f"known: {', '.join(self._endpoints)}") from None

    def assign(self, session_id: str, *, pinned: str | None = None, previous: str | None = None) -> Endpoint:
        """The endpoint for a session: its previous one if it still exists (and is not
        drained while another serves), the pinned one, or the least loaded."""
        healthy = self.healthy()
        if previous and previous in self._endpoints and (previous in healthy or not healthy):
            name = previous
        elif pinned:
            name = self.get(pinned).name
        else:
            name = self._least_loaded(healthy or self.names())
        self._assigned[session_id] = name
        return self._endpoints[name]

    def move(self, session_id: str) -> Endpoint | None:
        """Move a session off its drained endpoint to the least loaded healthy one; None when
        no other serves (it then waits for its own)."""
        current = self._assigned.get(session_id)
        candidates = [n for n in self.healthy() if n != current]
        if not candidates:
            return None
        name = self._least_loaded(candidates, leaving=session_id)
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

    # ----- load and health -----
    def set_kv(self, name: str, kv_usage_pct: float | None) -> None:
        """The engine's KV-cache use as last read (None: unknown)."""
        if kv_usage_pct is None:
            self._kv.pop(name, None)
        else:
            self._kv[name] = kv_usage_pct

    def drain(self, name: str) -> bool:
        """The endpoint stopped answering: no new sessions; True when it was serving."""
        if name not in self._endpoints or name in self._drained:
            return False
        self._drained.add(name)
        return True

    def undrain(self, name: str) -> bool:
        """The endpoint answers again; True when it was drained."""
        if name not in self._drained:
            return False
        self._drained.discard(name)
        return True

    def is_drained(self, name: str) -> bool:
        return name in self._drained

    def healthy(self) -> tuple[str, ...]:
        return tuple(n for n in self._endpoints if n not in self._drained)

    def sessions_on(self, name: str) -> list[str]:
        return [sid for sid, n in self._assigned.items() if n == name]

    def loads(self) -> dict[str, int]:
        """Active sessions per endpoint."""
        counts = dict.fromkeys(self._endpoints, 0)
        for sid in self._active:
            name = self._assigned.get(sid)
            if name in counts:
                counts[name] += 1
        return counts

    def _least_loaded(self, names: Sequence[str], *, leaving: str | None = None) -> str:
        sessions = self.loads()
        if leaving is not None and leaving in self._active:
            own = self._assigned.get(leaving)
            if own in sessions:
                sessions[own] -= 1
        ranked = {n: (self._kv.get(n, 0.0) // KV_STEP_PCT) * 1e6 + sessions.get(n, 0) for n in names}
        return least_loaded(ranked, names)
