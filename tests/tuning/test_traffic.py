import pytest

from workstation.core.requests import RequestRecord
from workstation.core.traffic import (
    Distribution,
    TrafficShape,
    concurrency_series,
    max_overlap,
    percentile,
    shape_from_records,
)


def rec(sid, start, dur, prompt, out, cached=0, ok=True, choices=1):
    return RequestRecord(endpoint="http://x", model="m", session_id=sid, started_s=start, ttft_s=0.1,
                         duration_s=dur, prompt_tokens=prompt, completion_tokens=out, cached_tokens=cached,
                         max_gap_s=0.05, ok=ok, error=None if ok else "boom", choices=choices)


def test_percentile_interpolates():
    assert percentile([1, 2, 3, 4], 50) == 2.5
    assert percentile([5], 99) == 5
    assert percentile([], 50) is None


def test_distribution_has_log2_histogram():
    d = Distribution.of([1, 3, 4, 5, 100])
    assert d.count == 5 and d.max == 100 and d.p50 == 4
    assert dict(d.histogram) == {1: 1, 4: 2, 8: 1, 128: 1}
    assert Distribution.from_dict(d.to_dict()) == d


def test_concurrency_series_is_time_weighted():
    # two requests overlap for half of the first second
    series = concurrency_series([(0.0, 1.0), (0.5, 2.0)], 0.0, 2.0, 1.0)
    assert series == [1.5, 1.0]
    assert max_overlap([(0.0, 1.0), (0.5, 2.0), (1.0, 3.0)]) == 2  # an end and a start at 1.0 do not overlap


def test_shape_of_two_append_only_sessions():
    records = [
        rec("a", 0.0, 2.0, 1000, 100),
        rec("a", 2.0, 2.0, 1300, 50),   # shares 1000 + 100 with its predecessor
        rec("b", 0.0, 4.0, 800, 200),
        rec("b", 4.0, 1.0, 500, 20),    # shorter than before: condensed, nothing shared
        rec("c", 1.0, 1.0, 10, 0, ok=False),
    ]
    shape = shape_from_records("s", records, bin_s=1.0)
    assert shape.requests == 4 and shape.failed == 1 and shape.sessions == 2
    assert shape.span_s == pytest.approx(5.0)
    assert shape.request_rate_per_s == pytest.approx(0.8)
    assert shape.shared_prefix_share == pytest.approx(1100 / 3600)
    assert shape.concurrency_max == 2
    assert shape.concurrency_series == (2.0, 2.0, 2.0, 2.0, 1.0)
    assert shape.concurrency_mean == pytest.approx(1.8)
    assert shape.suggested_concurrency() == 2
    assert shape.prefix_cache_hit_rate is None and shape.prefix_cache_source == "none"
    assert [len(reqs) for _, reqs in shape.trace] == [2, 2]
    assert shape.trace[0][1][1].offset_s == 2.0


def test_hit_rate_prefers_usage_then_metrics():
    with_usage = [rec("a", 0, 1, 1000, 10, cached=512), rec("a", 1, 1, 1000, 10, cached=0)]
    assert shape_from_records("u", with_usage, metrics_hit_rate=0.9).prefix_cache_hit_rate == pytest.approx(0.256)
    without = [rec("a", 0, 1, 1000, 10)]
    shape = shape_from_records("m", without, metrics_hit_rate=0.4)
    assert shape.prefix_cache_hit_rate == 0.4 and shape.prefix_cache_source == "metrics"


def test_common_prefix_counts_for_first_requests_of_other_sessions():
    records = [rec("a", 0, 1, 1000, 10), rec("b", 0, 1, 1000, 10), rec("c", 0, 1, 1000, 10)]
    assert shape_from_records("c", records, common_prefix_tokens=600).shared_prefix_share == pytest.approx(1200 / 3000)


def test_round_trip_and_refusals():
    shape = shape_from_records("s", [rec("a", 0, 1, 100, 10), rec("a", 1, 1, 150, 10)], source="test")
    assert TrafficShape.from_dict(shape.to_dict()) == shape
    assert "2 requests" in shape.summary_line()
    with pytest.raises(ValueError, match="no finished requests"):
        shape_from_records("empty", [rec("a", 0, 1, 10, 1, ok=False)])


def test_requests_for_several_sequences_keep_their_n_in_the_trace_and_the_summary():
    records = [rec("a", 0, 1, 100, 10), rec("a", 1, 1, 150, 402, choices=6), rec("a", 3, 1, 300, 12),
               rec("b", 0, 1, 100, 300, choices=4)]
    shape = shape_from_records("s", records)
    by_session = dict(shape.trace)
    assert [(r.completion_tokens, r.choices) for r in by_session["a"]] == [(10, 1), (402, 6), (12, 1)]
    assert by_session["b"][0].choices == 4
    assert shape.multi_choice_requests == 2 and shape.choices.p50 == 5 and shape.choices.max == 6
    assert "2 requests for several sequences (n p50 5 / max 6)" in shape.summary_line()
    assert TrafficShape.from_dict(shape.to_dict()) == shape
    # the history goes on with one of the six sequences (67 tokens), not all 402 of them
    assert shape.shared_prefix_share == pytest.approx((110 + 150 + 67) / 650)
    plain = shape_from_records("p", [rec("a", 0, 1, 100, 10)])
    assert plain.multi_choice_requests == 0 and "several sequences" not in plain.summary_line()


def test_a_shape_saved_before_choices_loads_with_one_each():
    d = shape_from_records("old", [rec("a", 0, 1, 100, 10), rec("a", 1, 1, 150, 10)]).to_dict()
    d["version"] = 1
    d.pop("choices")
    d.pop("multi_choice_requests")
    for s in d["trace"]:
        s["requests"] = [r[:4] for r in s["requests"]]
    loaded = TrafficShape.from_dict(d)
    assert [r.choices for _, reqs in loaded.trace for r in reqs] == [1, 1]
    assert loaded.multi_choice_requests == 0 and loaded.requests == 2


def test_largest_token_gap_only_counts_requests_in_the_window():
    from workstation.core.traffic import largest_token_gap

    before = rec("a", 0.0, 1.0, 10, 10)
    inside = RequestRecord("e", "m", "b", 5.0, 0.1, 2.0, 10, 10, 0, 1.7, True)
    straddling = RequestRecord("e", "m", "c", 3.0, 0.1, 3.0, 10, 10, 0, 0.9, True)
    assert largest_token_gap([before, inside, straddling], 4.0, 8.0) == (1.7, "b")
    assert largest_token_gap([before], 4.0, 8.0) == (None, None)
