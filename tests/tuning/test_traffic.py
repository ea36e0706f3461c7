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


def rec(sid, start, dur, prompt, out, cached=0, ok=True, choices=1, constraint=None, chars=0, shared=None):
    return RequestRecord(endpoint="http://x", model="m", session_id=sid, started_s=start, ttft_s=0.1,
                         duration_s=dur, prompt_tokens=prompt, completion_tokens=out, cached_tokens=cached,
                         max_gap_s=0.05, ok=ok, error=None if ok else "boom", choices=choices,
                         constraint=constraint, constraint_chars=chars, shared_prefix_tokens=shared)


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


def test_the_shape_keeps_which_requests_were_constrained_and_its_guided_fraction():
    records = [rec("a", 0, 1, 100, 10, constraint="regex", chars=300),
               rec("a", 1, 1, 150, 60, choices=6, constraint="regex", chars=90),
               rec("b", 0, 1, 100, 10, constraint="json", chars=40), rec("b", 1, 1, 120, 10)]
    shape = shape_from_records("g", records)
    assert shape.constrained_requests == 3 and shape.guided_fraction == 0.75
    assert shape.constraint_kinds == (("regex", 2), ("json", 1))
    by_session = dict(shape.trace)
    assert [(r.constraint, r.constraint_chars) for r in by_session["a"]] == [("regex", 300), ("regex", 90)]
    assert [r.constraint for r in by_session["b"]] == ["json", None]
    assert "75% constrained (regex/json)" in shape.summary_line()
    assert TrafficShape.from_dict(shape.to_dict()) == shape
    plain = shape_from_records("p", [rec("a", 0, 1, 100, 10)])
    assert plain.guided_fraction == 0 and "constrained" not in plain.summary_line()


def test_measured_sharing_replaces_the_append_only_estimate():
    """A guided session: each request is the session's view plus a step hint; the two requests
    of a turn share its view, the next turn's view is rebuilt and shares only its head."""
    records = [rec("a", 0, 1, 1000, 10, shared=None), rec("a", 1, 1, 1100, 80, shared=1000),
               rec("a", 2, 1, 900, 10, shared=400)]
    shape = shape_from_records("g", records)
    assert shape.shared_prefix_share == pytest.approx((1000 + 400) / 3000)
    assert [r.shared_tokens for r in dict(shape.trace)["a"]] == [None, 1000, 400]
    assert shape.prefix_reuse.count == 2 and shape.prefix_reuse.max == pytest.approx(100 * 1000 / 1100)
    # the estimate would have called the third (shorter) prompt condensed and the second shared 1010
    estimated = shape_from_records("e", [rec("a", 0, 1, 1000, 10), rec("a", 1, 1, 1100, 80), rec("a", 2, 1, 900, 10)])
    assert estimated.shared_prefix_share == pytest.approx(1010 / 3000) and estimated.prefix_reuse.count == 0
    assert TrafficShape.from_dict(shape.to_dict()) == shape
    # a measured first request (its client's previous request was before the capture) starts at 0
    late = shape_from_records("l", [rec("a", 0, 1, 1000, 10, shared=900), rec("a", 1, 1, 1100, 10, shared=1000)])
    assert [r.shared_tokens for r in dict(late.trace)["a"]] == [0, 1000]


def test_output_lengths_are_per_sequence_not_a_request_for_n_summed():
    shape = shape_from_records("n", [rec("a", 0, 1, 100, 600, choices=6), rec("a", 1, 1, 100, 100)])
    assert shape.completion_tokens.max == 100 and shape.completion_tokens.p50 == 100
    # the trace keeps the request's total: the replay asks for n sequences of total / n
    assert [r.completion_tokens for r in dict(shape.trace)["a"]] == [600, 100]


def test_a_version_2_shape_loads_without_constraints_or_measured_sharing():
    d = shape_from_records("v2", [rec("a", 0, 1, 100, 10, constraint="regex", shared=0),
                                  rec("a", 1, 1, 150, 10, constraint="regex", shared=100)]).to_dict()
    d["version"] = 2
    for key in ("constrained_requests", "constraint_kinds", "prefix_reuse"):
        d.pop(key)
    for s in d["trace"]:
        s["requests"] = [r[:5] for r in s["requests"]]
    loaded = TrafficShape.from_dict(d)
    assert [(r.shared_tokens, r.constraint, r.constraint_chars) for _, reqs in loaded.trace for r in reqs] == [
        (None, None, 0), (None, None, 0)]
    assert loaded.constrained_requests == 0 and loaded.prefix_reuse.count == 0 and loaded.requests == 2


def test_constraint_of_a_request_body():
    from workstation.core.requests import constraint_of

    assert constraint_of({"structured_outputs": {"regex": "(a|b)"}}) == ("regex", 5)
    assert constraint_of({"structured_outputs": {"choice": ["yes", "no"]}}) == ("choice", len('["yes","no"]'))
    assert constraint_of({"structured_outputs": {"json": {"type": "object"}}})[0] == "json"
    assert constraint_of({"guided_regex": "x+"}) == ("regex", 2)
    assert constraint_of({"response_format": {"type": "json_schema", "json_schema": {"name": "a"}}})[0] == "json"
    assert constraint_of({"response_format": {"type": "text"}}) == (None, 0)
    assert constraint_of({"messages": []}) == (None, 0)


def test_common_prefix_bytes():
    from workstation.core.requests import common_prefix_bytes

    assert common_prefix_bytes(b"abcdef", b"abcxyz") == 3
    assert common_prefix_bytes(b"abc", b"abcdef") == 3
    assert common_prefix_bytes(b"", b"abc") == 0
    assert common_prefix_bytes(b"x" * 10_000 + b"a", b"x" * 10_000 + b"b") == 10_000


def test_the_ledger_finds_the_earlier_request_of_any_session_with_the_longest_common_prefix():
    from workstation.core.requests import LEDGER_BLOCK_BYTES, PromptLedger

    ledger = PromptLedger()
    system, task = b"s" * 640, b"t" * 640
    assert ledger.match_and_add(system + b"a" * 640, ("p", 0)) == (0, None)
    assert ledger.match_and_add(system + task + b"1" * 640, ("a", 0)) == (640, ("p", 0))
    # a second session on the same task repeats the first session's system prompt and task
    assert ledger.match_and_add(system + task + b"2" * 640, ("b", 0)) == (1280, ("a", 0))
    # the grain is a block: a difference inside one loses that block
    matched, _ = ledger.match_and_add(system + b"x" + task, ("c", 0))
    assert matched == 640 - 640 % LEDGER_BLOCK_BYTES
    small = PromptLedger(max_blocks=20)
    small.match_and_add(b"q" * 64 * 30, ("a", 0))
    assert len(small._owner) == 20


def test_a_request_that_repeats_another_sessions_more_than_its_own_points_at_it_in_the_trace():
    def r(sid, start, prompt, index, *, shared=None, reuse=None, of=None):
        return RequestRecord("e", "m", sid, start, 0.1, 1.0, prompt, 10, 0, 0.1, True, request_index=index,
                             shared_prefix_tokens=shared, reuse_tokens=reuse, reuse_of=of)

    records = [r("a", 0, 500, 0, reuse=0), r("b", 1, 500, 0, reuse=450, of=("a", 0)),  # same task
               r("a", 2, 600, 1, shared=500, reuse=500, of=("a", 0)),  # its own previous: no pointer
               r("b", 3, 600, 1, shared=480, reuse=560, of=("a", 1))]  # more of a's than of its own
    shape = shape_from_records("x", records, common_prefix_tokens=300)
    by_session = dict(shape.trace)
    assert [(q.reuse_of, q.reuse_tokens) for q in by_session["a"]] == [(None, 0), (None, 0)]
    assert [(q.reuse_of, q.reuse_tokens) for q in by_session["b"]] == [((0, 0), 450), ((0, 1), 560)]
    assert shape.shared_prefix_share == pytest.approx((450 + 500 + 560) / 2200)
    assert shape.prefix_reuse.count == 4
    assert TrafficShape.from_dict(shape.to_dict()) == shape
