"""The SQLite store: WAL, incremental event writes, sessions, checkpoints, settings."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from workstation.core.errors import UserError
from workstation.core.session_state import SessionState
from workstation.fleet.session import SessionRecord, SessionSpec
from workstation.fleet.store import Store, StoreError


def _rec(sid: str, name: str, pos: int = 0) -> SessionRecord:
    return SessionRecord(session_id=sid, name=name, spec=SessionSpec(task="t", repo="/r"),
                         state=SessionState.READY, position=pos)


async def test_sessions_events_checkpoints_roundtrip(tmp_path: Path) -> None:
    path = tmp_path / "store.sqlite3"
    store = Store(path)
    await store.start()
    await store.insert_session(_rec("a", "alpha"))
    await store.insert_session(_rec("b", "beta", 1))
    with pytest.raises(UserError, match="named 'alpha' already exists"):
        await store.insert_session(_rec("c", "alpha"))
    seqs = [store.append_event("a", "text", {"i": i}) for i in range(500)]
    assert seqs == list(range(1, 501))
    store.append_event("b", "text", {"i": 0})
    await store.flush()
    await store.update_session("a", state=SessionState.RUNNING, completion_tokens=42)
    await store.add_checkpoint("a", "abc123", event_seq=10, label="after edit")
    await store.set_setting("layout", {"cols": 8})
    await store.remember_repo("/r")
    await store.aclose()
    assert sqlite3.connect(path).execute("PRAGMA journal_mode").fetchone()[0] == "wal"

    again = Store(path)
    await again.start()
    recs = await again.load_sessions()
    assert [r.name for r in recs] == ["alpha", "beta"]
    assert recs[0].state is SessionState.RUNNING and recs[0].completion_tokens == 42
    events = await again.load_events("a", after_seq=495)
    assert [e.payload["i"] for e in events] == [495, 496, 497, 498, 499]
    assert again.append_event("a", "text", {}) == 501  # numbering continues
    assert [c.commit_sha for c in await again.list_checkpoints("a")] == ["abc123"]
    assert await again.get_setting("layout") == {"cols": 8}
    assert await again.known_repos() == ["/r"]
    await again.truncate_events("a", after_seq=100)
    assert await again.count_events("a") == 100
    assert again.append_event("a", "text", {}) == 101
    await again.delete_session("a")
    assert await again.count_events("a") == 0
    assert [r.name for r in await again.load_sessions()] == ["beta"]
    await again.aclose()


async def test_events_of_removed_session_are_dropped(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.sqlite3")
    await store.start()
    store.append_event("ghost", "text", {})
    await store.flush()
    assert await store.count_events("ghost") == 0
    await store.aclose()


async def test_unusable_store_is_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.sqlite3"
    bad.write_bytes(b"this is not sqlite" * 100)
    store = Store(bad)
    with pytest.raises(StoreError, match="damaged or not a database"):
        await store.start()
    await store.aclose()
    newer = tmp_path / "newer.sqlite3"
    s = Store(newer)
    await s.start()
    await s.aclose()
    conn = sqlite3.connect(newer)
    conn.execute("UPDATE meta SET value='99' WHERE key='schema_version'")
    conn.commit()
    conn.close()
    s2 = Store(newer)
    with pytest.raises(StoreError, match="newer workstation"):
        await s2.start()
    await s2.aclose()
