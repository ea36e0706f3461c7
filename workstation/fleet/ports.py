"""Each session's own block of ports: allocated from the store, checked free, never shared.

A block is ``count`` consecutive ports of the fleet's range (``fleet.port_range_start`` …
``_end``, below Linux's ephemeral range so an outgoing connection never takes one). The
allocation is one ``BEGIN IMMEDIATE`` transaction on the store (``Store.transact``): every
process that shares the data directory's store — the window, a ``workstation run`` beside
it — takes the same write lock, so two sessions never get overlapping blocks, after a
restart either (blocks are rows, deleted with their session). A candidate block is also
checked on the host: a port something else listens on (a program outside the fleet, a
fleet with another data directory) is skipped.

A session's commands see its block as ``WORKSTATION_PORT`` (the first port),
``WORKSTATION_PORT_COUNT`` and ``WORKSTATION_PORT_1`` … ``WORKSTATION_PORT_<count>``
(``_1`` is the first port again); a dev server also gets ``PORT`` (what most of them read).
"""

from __future__ import annotations

import contextlib
import socket
import sqlite3
import time
from dataclasses import dataclass

from workstation.core.errors import UserError
from workstation.fleet.store import Store

DEFAULT_PORT_RANGE = range(24000, 32000)
MAX_PORTS_PER_SESSION = 64

_TABLE = """
CREATE TABLE IF NOT EXISTS port_blocks (
    session_id TEXT PRIMARY KEY REFERENCES sessions(session_id) ON DELETE CASCADE,
    first_port INTEGER NOT NULL,
    port_count INTEGER NOT NULL,
    allocated_at REAL NOT NULL
)
"""


@dataclass(frozen=True, slots=True)
class PortBlock:
    first: int
    count: int

    @property
    def ports(self) -> range:
        return range(self.first, self.first + self.count)

    @property
    def last(self) -> int:
        return self.first + self.count - 1

    def env(self) -> dict[str, str]:
        """What a session's commands see of their block."""
        out = {"WORKSTATION_PORT": str(self.first), "WORKSTATION_PORT_COUNT": str(self.count)}
        for i, port in enumerate(self.ports, 1):
            out[f"WORKSTATION_PORT_{i}"] = str(port)
        return out

    def describe(self) -> str:
        return str(self.first) if self.count == 1 else f"{self.first}–{self.last}"


def port_free(port: int) -> bool:
    """Nothing listens on ``port`` on any local address (IPv4, and IPv6 where there is one).

    Binding the wildcard address with ``SO_REUSEADDR`` fails exactly when a socket listens
    on the port on some address; connections lingering in TIME_WAIT do not count (a dev
    server binding with ``SO_REUSEADDR``, as they all do, is not stopped by them)."""
    families: list[tuple[socket.AddressFamily, str]] = [(socket.AF_INET, "0.0.0.0")]
    if socket.has_ipv6:
        families.append((socket.AF_INET6, "::"))
    for family, host in families:
        try:
            sock = socket.socket(family, socket.SOCK_STREAM)
        except OSError:
            continue  # no IPv6 on this host
        with sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                sock.bind((host, port))
            except OSError as exc:
                if family == socket.AF_INET6 and exc.errno == 99:  # EADDRNOTAVAIL: IPv6 off
                    continue
                return False
    return True


def busy_ports(block: PortBlock) -> list[int]:
    return [p for p in block.ports if not port_free(p)]


class PortBook:
    """The port blocks of the sessions in one store. Owns the ``port_blocks`` table."""

    def __init__(self, store: Store, port_range: range = DEFAULT_PORT_RANGE) -> None:
        if port_range.step != 1 or len(port_range) < 1 or port_range.start < 1 or port_range.stop > 65536:
            raise UserError(f"the fleet's port range {port_range.start}–{port_range.stop - 1} cannot be used",
                            hint="set fleet.port_range_start and fleet.port_range_end between 1 and 65535")
        self._store = store
        self.range = port_range
        self._blocks: dict[str, PortBlock] = {}

    async def load(self) -> None:
        """Read every stored block (after the store started)."""

        def run(conn: sqlite3.Connection) -> dict[str, PortBlock]:
            conn.execute(_TABLE)
            rows = conn.execute("SELECT session_id, first_port, port_count FROM port_blocks")
            return {sid: PortBlock(first, count) for sid, first, count in rows}

        self._blocks = await self._store.transact(run)

    def get(self, session_id: str) -> PortBlock | None:
        return self._blocks.get(session_id)

    async def allocate(self, session_id: str, count: int) -> PortBlock:
        """The session's block: the one it has, or ``count`` free ports (the session's row
        must be in the store already: a block belongs to a stored session)."""
        if not 1 <= count <= MAX_PORTS_PER_SESSION:
            raise UserError(f"a session can have 1 to {MAX_PORTS_PER_SESSION} ports, not {count}")
        lo, hi = self.range.start, self.range.stop

        def run(conn: sqlite3.Connection) -> PortBlock:
            conn.execute(_TABLE)
            row = conn.execute("SELECT first_port, port_count FROM port_blocks WHERE session_id=?",
                               (session_id,)).fetchone()
            if row is not None:
                return PortBlock(*row)
            taken = sorted(conn.execute("SELECT first_port, port_count FROM port_blocks").fetchall())
            first = _first_fit(taken, count, lo, hi)
            if first is None:
                raise UserError(
                    f"no {count} free consecutive port(s) left in {lo}–{hi - 1} "
                    f"({len(taken)} session(s) hold blocks)",
                    hint="remove finished sessions, or widen fleet.port_range_start/_end")
            conn.execute("INSERT INTO port_blocks VALUES (?,?,?,?)", (session_id, first, count, time.time()))
            return PortBlock(first, count)

        block = await self._store.transact(run)
        self._blocks[session_id] = block
        return block

    async def release(self, session_id: str) -> None:
        self._blocks.pop(session_id, None)

        def run(conn: sqlite3.Connection) -> None:
            conn.execute(_TABLE)
            conn.execute("DELETE FROM port_blocks WHERE session_id=?", (session_id,))

        await self._store.transact(run)


def _first_fit(taken: list[tuple[int, int]], count: int, lo: int, hi: int) -> int | None:
    """Lowest first port of ``count`` ports in ``[lo, hi)`` that overlaps no taken block and
    has no port something listens on."""
    p = lo
    i = 0
    while p + count <= hi:
        while i < len(taken) and taken[i][0] + taken[i][1] <= p:
            i += 1
        if i < len(taken) and taken[i][0] < p + count:  # overlaps the next taken block
            p = taken[i][0] + taken[i][1]
            continue
        busy = next((q for q in range(p, p + count) if not port_free(q)), None)
        if busy is None:
            return p
        p = busy + 1
    return None
