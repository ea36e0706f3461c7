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
import os
import sqlite3
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
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
    agent_meta BLOB NOT NULL DEFAULT '{}',
    ready_at REAL NOT NULL DEFAULT 0,
    archived TEXT NOT NULL DEFAULT '',
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
    "cached_tokens", "error", "agent_meta", "ready_at", "archived", "created_at", "updated_at",
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
        self._pending = _Pending()
        self._swapped = 0  # count of queued writes handed to the store thread
        self._next_seq: dict[str, int] = {}
        self._wake = asyncio.Event()
        self._flushed_upto = 0  # count of queued writes committed
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
            if not self.path.exists():  # transcripts are private: create the file 0600
                os.close(os.open(self.path, os.O_CREAT | os.O_WRONLY, 0o600))
            conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        except (OSError, sqlite3.Error) as exc:
            raise StoreError(f"cannot open the session store {self.path}: {exc}") from exc
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("PRAGMA foreign_keys=ON")
            conn.execute("PRAGMA busy_timeout=5000")
            conn.executescript(_SCHEMA)
            columns = {r[1] for r in conn.execute("PRAGMA table_info(sessions)")}
            if "agent_meta" not in columns:  # stores made before the column existed
                conn.execute("ALTER TABLE sessions ADD COLUMN agent_meta BLOB NOT NULL DEFAULT '{}'")
            if "ready_at" not in columns:  # stores made before the merge queue
                conn.execute("ALTER TABLE sessions ADD COLUMN ready_at REAL NOT NULL DEFAULT 0")
            if "archived" not in columns:  # stores made before the archive
                conn.execute("ALTER TABLE sessions ADD COLUMN archived TEXT NOT NULL DEFAULT ''")
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
        try:
            return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)
        except sqlite3.Error as exc:  # a full disk, an I/O error: a plain message, not a traceback
            raise StoreError(f"the session store {self.path} cannot be used: {exc}") from exc

    # ----- events and queued writes -----
    def append_event(self, session_id: str, kind: str, payload: dict[str, Any] | bytes) -> int:
        """Queue one transcript event for writing; returns its sequence number (from 1).

        Never blocks: the row is committed by the flusher within ``flush_interval_s``.
        """
        if self._closing:
            raise RuntimeError("the store is closed")
        seq = self._next_seq.get(session_id, 1)
        self._next_seq[session_id] = seq + 1
        body = payload if isinstance(payload, bytes) else orjson.dumps(payload)
        self._pending.events.append((session_id, seq, time.time(), kind, body))
        self._queued()
        return seq

    def queue_update(self, session_id: str, **fields: Any) -> None:
        """Queue a partial update of a session row; written with the next batch of events
        (updates of one session merge, the last value wins)."""
        bad = set(fields) - _UPDATABLE
        if bad:
            raise ValueError(f"not session columns: {sorted(bad)}")
        self._pending.updates.setdefault(session_id, {}).update(_columns(fields))
        self._queued()

    def queue_checkpoint(self, session_id: str, commit_sha: str, *, event_seq: int, label: str = "") -> None:
        self._pending.checkpoints.append((session_id, commit_sha, event_seq, label, time.time()))
        self._queued()

    def _queued(self) -> None:
        self._appended += 1
        if len(self._pending.events) >= self._batch_max:
            self._wake.set()

    def last_seq(self, session_id: str) -> int:
        return self._next_seq.get(session_id, 1) - 1

    async def flush(self) -> None:
        """Return once every write queued before this call is committed."""
        target = self._appended
        if self._flushed_upto >= target:
            return
        self._wake.set()
        async with self._flushed:
            while self._flushed_upto < target:
                if isinstance(self._write_error, StoreError):
                    raise StoreError(str(self._write_error))
                if self._write_error is not None:
                    raise StoreError(f"the session store cannot be written: {self._write_error}")
                await self._flushed.wait()

    def commit_now(self, timeout_s: float = 10.0) -> None:
        """Commit everything queued, blocking the caller until it is on disk.

        For the one moment that must be durable before the app goes on: a tool is about to
        run, and after a crash it must be known that it started (so it is reported as
        interrupted instead of run twice). Costs one small transaction (well under a
        millisecond in WAL mode with ``synchronous=NORMAL``).
        """
        if self._closing or self._conn is None:
            return
        if not self._pending:
            return
        batch, count = self._take()
        try:
            self._pool.submit(self._write_batch, batch).result(timeout=timeout_s)
        except (sqlite3.Error, OSError) as exc:
            self._give_back(batch, count)
            raise StoreError(f"the session store cannot be written: {exc}") from exc
        self._flushed_upto += count

    def _take(self) -> tuple[_Pending, int]:
        batch, self._pending = self._pending, _Pending()
        count, self._swapped = self._appended - self._swapped, self._appended
        return batch, count

    def _give_back(self, batch: _Pending, count: int) -> None:
        self._pending.merge_front(batch)
        self._swapped -= count

    async def _flush_loop(self) -> None:
        while True:
            try:
                await asyncio.wait_for(self._wake.wait(), self._flush_interval_s)
            except TimeoutError:
                pass
            self._wake.clear()
            if self._pending:
                batch, count = self._take()
                try:
                    await self._call(self._write_batch, batch)
                except (StoreError, OSError) as exc:
                    log.error("store write failed (%d writes kept for retry): %s", count, exc)
                    self._write_error = exc
                    self._give_back(batch, count)
                else:
                    self._write_error = None
                    self._flushed_upto += count
                async with self._flushed:
                    self._flushed.notify_all()
            if self._closing and (not self._pending or self._write_error is not None):
                return

    def _write_batch(self, batch: _Pending) -> None:
        if not batch or self._conn is None:
            return
        with _transaction(self._conn):
            sids = {r[0] for r in batch.events} | {r[0] for r in batch.checkpoints} | set(batch.updates)
            marks = ",".join("?" * len(sids))
            present = {row[0] for row in self._conn.execute(
                f"SELECT session_id FROM sessions WHERE session_id IN ({marks})", tuple(sids))}
            # a removed session's late writes are dropped
            self._conn.executemany("INSERT OR REPLACE INTO events VALUES (?,?,?,?,?)",
                                   [r for r in batch.events if r[0] in present])
            self._conn.executemany("INSERT OR REPLACE INTO checkpoints VALUES (?,?,?,?,?)",
                                   [r for r in batch.checkpoints if r[0] in present])
            for sid, fields in batch.updates.items():
                if sid in present:
                    cols = list(fields)
                    self._conn.execute(
                        f"UPDATE sessions SET {', '.join(f'{c}=?' for c in cols)}, updated_at=? "
                        "WHERE session_id=?",
                        (*[fields[c] for c in cols], time.time(), sid),
                    )

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
        await self.flush()  # queued updates of the same row come first
        fields = _columns(fields)
        fields["updated_at"] = time.time()
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

    async def transact(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn(connection)`` on the store's thread inside ``BEGIN IMMEDIATE … COMMIT``
        (rolled back when it raises). The write lock is taken at BEGIN, so a read-then-write in
        ``fn`` is atomic across every process that shares this store file (the port book
        allocates with it)."""

        def run() -> T:
            assert self._conn is not None
            with _transaction(self._conn):
                return fn(self._conn)

        return await self._call(run)

    async def load_session(self, session_id: str) -> SessionRecord | None:
        """One session as stored now (another process may have changed it)."""
        await self.flush()

        def run() -> SessionRecord | None:
            assert self._conn is not None
            row = self._conn.execute(
                f"SELECT {','.join(_SESSION_COLUMNS)} FROM sessions WHERE session_id=?", (session_id,)
            ).fetchone()
            return None if row is None else _record(dict(zip(_SESSION_COLUMNS, row, strict=True)))

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


@dataclass(slots=True)
class _Pending:
    """Writes queued for the next transaction."""

    events: list[tuple[str, int, float, str, bytes]] = field(default_factory=list)
    updates: dict[str, dict[str, Any]] = field(default_factory=dict)
    checkpoints: list[tuple[str, str, int, str, float]] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.events or self.updates or self.checkpoints)

    def merge_front(self, older: _Pending) -> None:
        """Put a batch that failed to write back in front of what came since."""
        self.events[:0] = older.events
        self.checkpoints[:0] = older.checkpoints
        for sid, fields in older.updates.items():
            self.updates[sid] = {**fields, **self.updates.get(sid, {})}


def _columns(fields: dict[str, Any]) -> dict[str, Any]:
    out = dict(fields)
    if isinstance(out.get("spec"), SessionSpec):
        out["spec"] = orjson.dumps(out["spec"].to_json())
    if isinstance(out.get("state"), SessionState):
        out["state"] = out["state"].value
    if isinstance(out.get("agent_meta"), dict):
        out["agent_meta"] = orjson.dumps(out["agent_meta"])
    return out


def _meta(raw: Any) -> dict[str, Any]:
    try:
        value = orjson.loads(raw) if raw else {}
    except orjson.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


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
        orjson.dumps(rec.agent_meta), rec.ready_at, rec.archived, rec.created_at, rec.updated_at,
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
        agent_meta=_meta(row["agent_meta"]),
        ready_at=row["ready_at"] or 0.0,
        archived=row["archived"] or "",
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        position=row["position"],
    )

