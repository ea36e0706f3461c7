from __future__ import annotations

import math

import pytest

from workstation.core.series import SeriesBook, TimeSeries, capacity_for


def test_ring_keeps_the_newest_points_in_order() -> None:
    s = TimeSeries(3, name="x", unit="W")
    for i in range(5):
        s.append(float(i), i * 10.0)
    assert len(s) == 3
    assert list(s.times()) == [2.0, 3.0, 4.0]
    assert list(s.values()) == [20.0, 30.0, 40.0]
    assert s.last() == (4.0, 40.0)


def test_partial_ring_and_empty() -> None:
    s = TimeSeries(4)
    assert s.last() is None
    assert list(s.values()) == []
    s.append(1.0, 5)
    assert list(s.times()) == [1.0]


def test_gaps_are_nan_and_none() -> None:
    s = TimeSeries(4)
    s.append(0.0, 1.0)
    s.append(1.0, None)
    s.append(2.0, 3.0)
    assert math.isnan(s.values()[1])
    assert list(s.points()) == [(0.0, 1.0), (1.0, None), (2.0, 3.0)]
    st = s.stats_since(0.0)
    assert st is not None and st.count == 2 and st.mean == 2.0 and st.min == 1.0 and st.max == 3.0


def test_since_after_wraparound() -> None:
    s = TimeSeries(5)
    for i in range(12):
        s.append(float(i), float(i))
    t, v = s.since(9.5)
    assert list(t) == [10.0, 11.0]
    assert list(v) == [10.0, 11.0]
    assert s.stats_since(100.0) is None


def test_capacity_for_15_minutes() -> None:
    assert capacity_for(900, 1.0) == 901
    assert capacity_for(900, 0.1) == 9001
    with pytest.raises(ValueError):
        capacity_for(0, 1)


def test_book_creates_series_with_units_and_horizon() -> None:
    book = SeriesBook(horizon_s=10, interval_s=1.0, wall_offset_s=1000.0)
    book.record(0.0, {"a": 1.0, "b": None}, units={"a": "W"})
    book.record(1.0, {"a": 2.0})
    assert book.names() == ["a", "b"]
    a = book.get("a")
    assert a is not None and a.unit == "W" and a.capacity == 11
    assert list(a.values()) == [1.0, 2.0]
    assert "b" in book and len(book) == 2
