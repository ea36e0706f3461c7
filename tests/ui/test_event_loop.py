"""The app's qasync loop: cancelled timers go away at once, a cancel after firing never
touches another timer, and async generators are finalized by the loop (not closed
synchronously by the garbage collector)."""

from __future__ import annotations

import asyncio

import pytest

from tests.ui.conftest import run

pytestmark = pytest.mark.gui


def pending_timers(loop: asyncio.AbstractEventLoop) -> int:
    return len(loop._timer._SimpleTimer__callbacks)  # type: ignore[attr-defined]


def test_cancelled_timers_do_not_pile_up(qloop) -> None:  # type: ignore[no-untyped-def]
    async def body() -> None:
        before = pending_timers(qloop)
        handles = [qloop.call_later(120, lambda: None) for _ in range(500)]
        assert pending_timers(qloop) == before + 500
        for handle in handles:
            handle.cancel()
        assert pending_timers(qloop) == before
        for _ in range(200):  # what httpx does around every read: arm a timeout, cancel it
            async with asyncio.timeout(120):
                await asyncio.sleep(0)
        assert pending_timers(qloop) == before

    run(qloop, body())


def test_cancel_after_firing_leaves_newer_timers_alone(qloop) -> None:  # type: ignore[no-untyped-def]
    async def body() -> None:
        fired: list[str] = []
        for i in range(20):
            old = qloop.call_later(0.001, fired.append, f"old{i}")
            while f"old{i}" not in fired:
                await asyncio.sleep(0)
            newer = [qloop.call_later(0.01, fired.append, f"new{i}.{k}") for k in range(20)]
            old.cancel()  # asyncio.sleep cancels its handle after it fired
            await asyncio.sleep(0.05)
            lost = [k for k in range(20) if f"new{i}.{k}" not in fired]
            assert not lost, f"round {i}: timers {lost} were lost"
            del newer

    run(qloop, body())


def test_call_soon_runs_in_order_once_and_not_when_cancelled_without_asking_inspect(qloop, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import inspect

    async def body() -> None:
        asked = []
        original = inspect.iscoroutinefunction
        monkeypatch.setattr(inspect, "iscoroutinefunction", lambda f: asked.append(f) or original(f))
        ran: list[int] = []
        handles = [qloop.call_soon(ran.append, i) for i in range(50)]
        handles[7].cancel()
        for _ in range(5):
            await asyncio.sleep(0)
        await asyncio.sleep(0.01)
        assert ran == [i for i in range(50) if i != 7]
        assert not [f for f in asked if getattr(f, "__self__", None) is ran]

    run(qloop, body())


def test_async_generators_are_finalized_by_the_loop(qloop) -> None:  # type: ignore[no-untyped-def]
    closed: list[str] = []

    async def stream():  # type: ignore[no-untyped-def]
        try:
            for i in range(10):
                yield i
        finally:
            await asyncio.sleep(0)  # cleanup that awaits, like an HTTP response's aclose
            closed.append("closed")

    async def body() -> None:
        async for item in stream():
            if item == 2:
                break  # the generator is left suspended; the loop's hook must close it
        for _ in range(5):
            await asyncio.sleep(0.01)

    run(qloop, body())
    assert closed == ["closed"]
