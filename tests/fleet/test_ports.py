"""Port blocks: allocated from the store (one write lock for every process sharing it),
checked free on the host, kept across restarts, gone with their session."""

from __future__ import annotations

import asyncio
import socket
import sys
import textwrap
from pathlib import Path

import pytest

from workstation.core.errors import UserError
from workstation.core.session_state import SessionState
from workstation.fleet.ports import PortBlock, PortBook, port_free
from workstation.fleet.session import SessionRecord, SessionSpec
from workstation.fleet.store import Store


async def _store_with_sessions(path: Path, ids: list[str]) -> Store:
    store = Store(path)
    await store.start()
    for sid in ids:
        await store.insert_session(SessionRecord(sid, f"n-{sid}", SessionSpec("t", "/r"), SessionState.READY))
    return store


def _free_range(width: int) -> range:
    """A range of ``width`` ports nothing listens on (searched in the fleet's default range)."""
    for start in range(24000, 32000 - width, width):
        if all(port_free(p) for p in range(start, start + width)):
            return range(start, start + width)
    pytest.skip("no free port range on this host")


def test_block_environment() -> None:
    block = PortBlock(24010, 3)
    assert block.env() == {
        "WORKSTATION_PORT": "24010", "WORKSTATION_PORT_COUNT": "3", "WORKSTATION_PORT_1": "24010",
        "WORKSTATION_PORT_2": "24011", "WORKSTATION_PORT_3": "24012",
    }
    assert block.describe() == "24010–24012" and PortBlock(24010, 1).describe() == "24010"


async def test_two_books_on_one_store_never_overlap(tmp_path: Path) -> None:
    ids = [f"s{i}" for i in range(40)]
    first = await _store_with_sessions(tmp_path / "store.sqlite3", ids)
    second = Store(tmp_path / "store.sqlite3")  # another fleet in the same data dir
    await second.start()
    span = _free_range(200)
    a, b = PortBook(first, span), PortBook(second, span)
    await a.load()
    await b.load()
    blocks = await asyncio.gather(*(
        (a if i % 2 else b).allocate(sid, 1 + i % 3) for i, sid in enumerate(ids)))
    used = [p for block in blocks for p in block.ports]
    assert len(used) == len(set(used)) == sum(1 + i % 3 for i in range(40))
    assert all(p in span for p in used)
    assert await a.allocate("s0", 1) == blocks[0]  # a session keeps its block
    await first.aclose()
    await second.aclose()
    reopened = await _store_with_sessions(tmp_path / "store.sqlite3", [])
    book = PortBook(reopened, span)
    await book.load()
    assert [book.get(sid) for sid in ids] == blocks  # after a restart too
    await reopened.delete_session("s1")  # the block goes with its session
    await book.load()
    assert book.get("s1") is None
    await reopened.aclose()


async def test_another_process_allocating_at_the_same_time(tmp_path: Path) -> None:
    span = _free_range(100)
    store = await _store_with_sessions(tmp_path / "store.sqlite3", [f"p{i}" for i in range(20)]
                                       + [f"q{i}" for i in range(20)])
    code = textwrap.dedent(f"""
        import asyncio
        from pathlib import Path
        from workstation.fleet.ports import PortBook
        from workstation.fleet.store import Store

        async def main():
            store = Store(Path({str(tmp_path / "store.sqlite3")!r}))
            await store.start()
            book = PortBook(store, range({span.start}, {span.stop}))
            for i in range(20):
                await book.allocate(f"q{{i}}", 2)
            await store.aclose()

        asyncio.run(main())
    """)
    proc = await asyncio.create_subprocess_exec(sys.executable, "-c", code)
    book = PortBook(store, span)
    for i in range(20):
        await book.allocate(f"p{i}", 2)
    assert await proc.wait() == 0
    await book.load()
    blocks = [book.get(f"{k}{i}") for k in "pq" for i in range(20)]
    used = [p for block in blocks for p in block.ports]  # type: ignore[union-attr]
    assert len(used) == len(set(used)) == 80
    await store.aclose()


async def test_busy_ports_are_skipped_and_exhaustion_is_clear(tmp_path: Path) -> None:
    span = _free_range(6)
    store = await _store_with_sessions(tmp_path / "store.sqlite3", ["a", "b", "c"])
    listener = socket.socket()
    listener.bind(("127.0.0.1", span.start + 1))  # a program outside the fleet uses it
    listener.listen()
    try:
        assert not port_free(span.start + 1)
        book = PortBook(store, span)
        await book.load()
        a = await book.allocate("a", 2)
        assert a.first == span.start + 2  # not span.start: its second port is taken
        with pytest.raises(UserError, match="no 3 free consecutive port"):
            await book.allocate("b", 3)
        assert book.get("b") is None
        b = await book.allocate("b", 2)
        assert b.first == span.start + 4
        with pytest.raises(UserError, match="1 to 64"):
            await book.allocate("c", 0)
    finally:
        listener.close()
    await store.aclose()
