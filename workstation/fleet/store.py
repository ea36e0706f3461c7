"""The fleet's SQLite store (WAL): sessions, their settings, the event transcript, checkpoints.

One connection, used only on the store's own single thread, so SQLite never blocks the event
loop and never sees two threads. Writes are incremental: events are appended as rows in small
batched transactions (every ``flush_interval_s`` or sooner when many are pending); a session
row is updated field by field; nothing is ever rewritten whole. ``synchronous=NORMAL`` in WAL
mode keeps every committed transaction through a crash or SIGKILL of the app (only a power cut
can lose the last ones); :meth:`Store.flush` is the barrier to wait on before doing something
that must not be repeated after a crash (starting a tool).
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import orjson

from workstation.core.errors import UserError
from workstation.core.session_state import SessionState
from workstation.fleet.session import SessionRecord, SessionSpec

log = logging.getLogger(__name__)

T = TypeVar("T")

SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS sessions (
    session_id TEXT PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    position INTEGER NOT NULL,
    state TEXT NOT NULL,
    spec BLOB NOT NULL,
    repo_path TEXT NOT NULL DEFAULT '',
    worktree_path TEXT NOT NULL DEFAULT '',
    branch TEXT NOT NULL DEFAULT '',
    base_branch TEXT NOT NULL DEFAULT '',
    start_commit TEXT NOT NULL DEFAULT '',
    endpoint_name TEXT NOT NULL DEFAULT '',
    prompt_tokens INTEGER NOT NULL DEFAULT 0,
    completion_tokens INTEGER NOT NULL DEFAULT 0,
    cached_tokens INTEGER NOT NULL DEFAULT 0,
    error TEXT NOT NULL DEFAULT '',
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS events (
    session_id TEXT NOT NULL REFERENCES sessions(session_id) ON DELETE CASCADE,
    seq INTEGER NOT NULL,
    ts REAL NOT NULL,
    kind TEXT NOT NULL,
    payload BLOB NOT NULL,
    PRIMARY KEY (session_id, seq)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS checkpoints (
    session_id TEXT NOT NULL REFERENCES sessions(session_id) ON DELETE CASCADE,
    commit_sha TEXT NOT NULL,
    event_seq INTEGER NOT NULL,
    label TEXT NOT NULL DEFAULT '',
    created_at REAL NOT NULL,
    PRIMARY KEY (session_id, commit_sha)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS settings (key TEXT PRIMARY KEY, value BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS repos (path TEXT PRIMARY KEY, last_used REAL NOT NULL);
"""

_SESSION_COLUMNS = (
    "session_id", "name", "position", "state", "spec", "repo_path", "worktree_path", "branch",
    "base_branch", "start_commit", "endpoint_name", "prompt_tokens", "completion_tokens",
    "cached_tokens", "error", "created_at", "updated_at",
)
_UPDATABLE = frozenset(_SESSION_COLUMNS) - {"session_id", "created_at"}


@dataclass(frozen=True, slots=True)
class StoredEvent:
    session_id: str
    seq: int
    ts: float
    kind: str
    payload: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Checkpoint:
    session_id: str
    commit_sha: str
    event_seq: int
    label: str
    created_at: float


class StoreError(UserError):
    """The store cannot be opened or written (disk full, read-only, newer schema)."""


class Store:
    """The fleet's persistence. ``await start()`` before use, ``await aclose()`` after."""

    def __init__(self, path: Path, *, flush_interval_s: float = 0.05, batch_max: int = 2000) -> None:
        self.path = Path(path)
        self._flush_interval_s = flush_interval_s
        self._batch_max = batch_max
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="fleet-store")
        self._conn: sqlite3.Connection | None = None
        self._pending: list[tuple[str, int, float, str, bytes]] = []
        self._next_seq: dict[str, int] = {}
        self._wake = asyncio.Event()
        self._flushed_upto = 0  # count of appended events committed
        self._appended = 0
        self._flushed = asyncio.Condition()
        self._flusher: asyncio.Task[None] | None = None
        self._closing = False
        self._write_error: BaseException | None = None

    # ----- lifecycle -----
    async def start(self) -> None:
        await self._call(self._open)
        self._next_seq = dict(await self._call(self._max_seqs))
        self._flusher = asyncio.create_task(self._flush_loop(), name="fleet-store-flusher")

    def _open(self) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        except (OSError, sqlite3.Error) as exc:
            raise StoreError(f"cannot open the session store {self.path}: {exc}") from exc
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("PRAGMA foreign_keys=ON")
            conn.execute("PRAGMA busy_timeout=5000")
            conn.executescript(_SCHEMA)
            row = conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
            if row is None:
                conn.execute("INSERT INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
            elif int(row[0]) > SCHEMA_VERSION:
                raise StoreError(
                    f"the session store {self.path} was written by a newer workstation "
                    f"(schema {row[0]}, this one knows {SCHEMA_VERSION})"
                )
        except sqlite3.DatabaseError as exc:
            conn.close()
            raise StoreError(f"the session store {self.path} is damaged or not a database: {exc}") from exc
        except StoreError:
            conn.close()
            raise
        self._conn = conn

    def _max_seqs(self) -> list[tuple[str, int]]:
        assert self._conn is not None
        rows = self._conn.execute("SELECT session_id, MAX(seq) FROM events GROUP BY session_id")
        return [(sid, int(seq) + 1) for sid, seq in rows]

    async def aclose(self) -> None:
        if self._closing:
            return
        self._closing = True
        if self._flusher is not None:
            self._wake.set()
            await self._flusher
        if self._conn is not None:
            await self._call(self._close_conn)
        self._pool.shutdown(wait=True)

    def _close_conn(self) -> None:
        if self._conn is not None:
            try:
                self._conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
            finally:
                self._conn.close()
                self._conn = None

    async def _call(self, fn: Any, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)

    # ----- events -----
    def append_event(self, session_id: str, kind: str, payload: dict[str, Any] | bytes) -> int:
        """Queue one transcript event for writing; returns its sequence number (from 1).

        Never blocks: the row is committed by the flusher within ``flush_interval_s``.
        """
        if self._closing:
            raise RuntimeError("the store is closed")
        seq = self._next_seq.get(session_id, 1)
        self._next_seq[session_id] = seq + 1
        body = payload if isinstance(payload, bytes) else orjson.dumps(payload)
        self._pending.append((session_id, seq, time.time(), kind, body))
        self._appended += 1
        if len(self._pending) >= self._batch_max:
            self._wake.set()
        return seq

    def last_seq(self, session_id: str) -> int:
        return self._next_seq.get(session_id, 1) - 1

    async def flush(self) -> None:
        """Return once every event appended before this call is committed."""
        target = self._appended
        if self._flushed_upto >= target:
            return
        self._wake.set()
        async with self._flushed:
            while self._flushed_upto < target:
                if self._write_error is not None:
                    raise StoreError(f"the session store cannot be written: {self._write_error}")
                await self._flushed.wait()

    async def _flush_loop(self) -> None:
        while True:
            try:
                await asyncio.wait_for(self._wake.wait(), self._flush_interval_s)
            except TimeoutError:
                pass
            self._wake.clear()
            if self._pending:
                batch, self._pending = self._pending, []
                count = len(batch)
                try:
                    await self._call(self._write_batch, batch)
                except (sqlite3.Error, OSError) as exc:
                    log.error("store write failed (%d events kept for retry): %s", count, exc)
                    self._write_error = exc
                    self._pending[:0] = batch
                else:
                    self._write_error = None
                    self._flushed_upto += count
                async with self._flushed:
                    self._flushed.notify_all()
            if self._closing and (not self._pending or self._write_error is not None):
                return

    def _write_batch(self, batch: list[tuple[str, int, float, str, bytes]]) -> None:
        if not batch or self._conn is None:
            return
        known = {sid for sid, *_ in batch}
        with _transaction(self._conn):
            present = {
                row[0]
                for row in self._conn.execute(
                    f"SELECT session_id FROM sessions WHERE session_id IN ({','.join('?' * len(known))})",
                    tuple(known),
                )
            }
            rows = [r for r in batch if r[0] in present]  # a removed session's late events
            self._conn.executemany("INSERT OR REPLACE INTO events VALUES (?,?,?,?,?)", rows)

    async def load_events(self, session_id: str, *, after_seq: int = 0, limit: int | None = None
                          ) -> list[StoredEvent]:
        await self.flush()
        return await self._call(self._load_events, session_id, after_seq, limit)

    def _load_events(self, session_id: str, after_seq: int, limit: int | None) -> list[StoredEvent]:
        assert self._conn is not None
        sql = "SELECT seq, ts, kind, payload FROM events WHERE session_id=? AND seq>? ORDER BY seq"
        args: tuple[Any, ...] = (session_id, after_seq)
        if limit is not None:
            sql += " LIMIT ?"
            args += (limit,)
        return [StoredEvent(session_id, seq, ts, kind, orjson.loads(payload))
                for seq, ts, kind, payload in self._conn.execute(sql, args)]

    async def count_events(self, session_id: str) -> int:
        await self.flush()
        return await self._call(
            lambda: self._conn.execute(  # type: ignore[union-attr]
                "SELECT COUNT(*) FROM events WHERE session_id=?", (session_id,)
            ).fetchone()[0]
        )

    async def truncate_events(self, session_id: str, *, after_seq: int) -> None:
        """Drop events after ``after_seq`` (restoring a conversation to a checkpoint)."""
        await self.flush()

        def run() -> None:
            assert self._conn is not None
            self._conn.execute("DELETE FROM events WHERE session_id=? AND seq>?", (session_id, after_seq))

        await self._call(run)
        self._next_seq[session_id] = after_seq + 1

    # ----- sessions -----
    async def insert_session(self, rec: SessionRecord) -> None:
        def run() -> None:
            assert self._conn is not None
            try:
                self._conn.execute(
                    f"INSERT INTO sessions ({','.join(_SESSION_COLUMNS)}) "
                    f"VALUES ({','.join('?' * len(_SESSION_COLUMNS))})",
                    _session_row(rec),
                )
            except sqlite3.IntegrityError as exc:
                raise UserError(f"a session named {rec.name!r} already exists") from exc

        await self._call(run)

    async def update_session(self, session_id: str, **fields: Any) -> None:
        """Update some columns of one session row (``spec`` and ``state`` accept their types)."""
        bad = set(fields) - _UPDATABLE
        if bad:
            raise ValueError(f"not session columns: {sorted(bad)}")
        fields["updated_at"] = time.time()
        if "spec" in fields and isinstance(fields["spec"], SessionSpec):
            fields["spec"] = orjson.dumps(fields["spec"].to_json())
        if "state" in fields and isinstance(fields["state"], SessionState):
            fields["state"] = fields["state"].value
        cols = list(fields)

        def run() -> None:
            assert self._conn is not None
            self._conn.execute(
                f"UPDATE sessions SET {', '.join(f'{c}=?' for c in cols)} WHERE session_id=?",
                (*[fields[c] for c in cols], session_id),
            )

        await self._call(run)

    async def delete_session(self, session_id: str) -> None:
        await self.flush()

        def run() -> None:
            assert self._conn is not None
            with _transaction(self._conn):
                self._conn.execute("DELETE FROM events WHERE session_id=?", (session_id,))
                self._conn.execute("DELETE FROM checkpoints WHERE session_id=?", (session_id,))
                self._conn.execute("DELETE FROM sessions WHERE session_id=?", (session_id,))

        await self._call(run)
        self._next_seq.pop(session_id, None)

    async def load_sessions(self) -> list[SessionRecord]:
        def run() -> list[SessionRecord]:
            assert self._conn is not None
            cur = self._conn.execute(
                f"SELECT {','.join(_SESSION_COLUMNS)} FROM sessions ORDER BY position, created_at"
            )
            return [_record(dict(zip(_SESSION_COLUMNS, row, strict=True))) for row in cur]

        return await self._call(run)

    async def next_position(self) -> int:
        def run() -> int:
            assert self._conn is not None
            row = self._conn.execute("SELECT COALESCE(MAX(position), -1) + 1 FROM sessions").fetchone()
            return int(row[0])

        return await self._call(run)

    # ----- checkpoints -----
    async def add_checkpoint(self, session_id: str, commit_sha: str, *, event_seq: int,
                             label: str = "") -> None:
        def run() -> None:
            assert self._conn is not None
            self._conn.execute(
                "INSERT OR REPLACE INTO checkpoints VALUES (?,?,?,?,?)",
                (session_id, commit_sha, event_seq, label, time.time()),
            )

        await self._call(run)

    async def list_checkpoints(self, session_id: str) -> list[Checkpoint]:
        def run() -> list[Checkpoint]:
            assert self._conn is not None
            cur = self._conn.execute(
                "SELECT commit_sha, event_seq, label, created_at FROM checkpoints "
                "WHERE session_id=? ORDER BY event_seq, created_at",
                (session_id,),
            )
            return [Checkpoint(session_id, *row) for row in cur]

        return await self._call(run)

    # ----- settings and repositories -----
    async def get_setting(self, key: str, default: Any = None) -> Any:
        def run() -> Any:
            assert self._conn is not None
            row = self._conn.execute("SELECT value FROM settings WHERE key=?", (key,)).fetchone()
            return default if row is None else orjson.loads(row[0])

        return await self._call(run)

    async def set_setting(self, key: str, value: Any) -> None:
        def run() -> None:
            assert self._conn is not None
            self._conn.execute("INSERT OR REPLACE INTO settings VALUES (?,?)", (key, orjson.dumps(value)))

        await self._call(run)

    async def remember_repo(self, path: str) -> None:
        def run() -> None:
            assert self._conn is not None
            self._conn.execute("INSERT OR REPLACE INTO repos VALUES (?,?)", (path, time.time()))

        await self._call(run)

    async def known_repos(self) -> list[str]:
        def run() -> list[str]:
            assert self._conn is not None
            return [r[0] for r in self._conn.execute("SELECT path FROM repos ORDER BY last_used DESC")]

        return await self._call(run)


class _transaction:
    """BEGIN IMMEDIATE … COMMIT / ROLLBACK on an autocommit connection."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def __enter__(self) -> sqlite3.Connection:
        self._conn.execute("BEGIN IMMEDIATE")
        return self._conn

    def __exit__(self, exc_type: Any, *_: Any) -> None:
        self._conn.execute("ROLLBACK" if exc_type else "COMMIT")


def _session_row(rec: SessionRecord) -> tuple[Any, ...]:
    return (
        rec.session_id, rec.name, rec.position, rec.state.value, orjson.dumps(rec.spec.to_json()),
        rec.repo_path, rec.worktree_path, rec.branch, rec.base_branch, rec.start_commit,
        rec.endpoint_name, rec.prompt_tokens, rec.completion_tokens, rec.cached_tokens, rec.error,
        rec.created_at, rec.updated_at,
    )


def _record(row: dict[str, Any]) -> SessionRecord:
    return SessionRecord(
        session_id=row["session_id"],
        name=row["name"],
        spec=SessionSpec.from_json(orjson.loads(row["spec"])),
        state=SessionState(row["state"]),
        repo_path=row["repo_path"],
        worktree_path=row["worktree_path"],
        branch=row["branch"],
        base_branch=row["base_branch"],
        start_commit=row["start_commit"],
        endpoint_name=row["endpoint_name"],
        prompt_tokens=row["prompt_tokens"],
        completion_tokens=row["completion_tokens"],
        cached_tokens=row["cached_tokens"],
        error=row["error"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        position=row["position"],
    )

