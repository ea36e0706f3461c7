import pytest

from workstation.core.requests import RequestRecord
from workstation.core.traffic import shape_from_records
from workstation.tuning.loadgen import LoadError, LoadGenerator, workload_from_shape
from workstation.tuning.results import BenchResult, Slo, Workload, comparison_table
from workstation.tuning.workload import (
    REPLAY_REGEX_BODY,
    REPLAY_REGEX_MAX_CHARS,
    ReplayStream,
    TokenSource,
    code_text,
    replay_regex,
)

from .fake_vllm import FakeVllm


def endpoint_of(engine):
    from workstation.core.endpoints import Endpoint

    return Endpoint(engine.base_url, "k", "m")


async def test_synthetic_run_counts_exact_tokens_and_is_bounded_in_time():
    vllm = FakeVllm()
    engine = vllm.add(token_delay_s=0.01)
    async with vllm.client() as http:
        w = Workload(kind="synthetic", concurrency=4, input_len=32, output_len=10, duration_s=1.0, warmup_s=0.2)
        result = await LoadGenerator(http, endpoint_of(engine), w, slo=Slo(ttft_ms=1000, tpot_ms=100)).run()
    assert result.duration_s == pytest.approx(1.0, abs=0.05)
    assert result.completed > 0 and result.failed == 0
    # rates are the window's own counts over its length (how close they come to the engine's
    # own counters on the real engine is measured by benchmarks/meter_vs_bench.py, not here)
    assert result.output_tok_s == pytest.approx(result.output_tokens / result.duration_s)
    assert result.total_tok_s == pytest.approx((result.output_tokens + result.prompt_tokens) / result.duration_s)
    # each stream gets a token at most every 10 ms: 4 streams cannot have sent more than this
    assert 0 < result.output_tokens <= 4 * (result.duration_s / 0.01 + 1)
    # a prompt counts when its first token lands in the window, a completion when its last one
    # does: each of the 4 streams can have one request straddling either edge, so the two counts
    # differ by at most 4 requests' worth (CI drew 36 prompts against 37 completions once)
    assert result.prompt_tokens % 32 == 0
    assert abs(result.prompt_tokens // 32 - result.completed) <= 4
    assert result.ttft.p50_ms is not None and result.tpot.p50_ms is not None and result.itl.p99_ms is not None
    assert result.goodput_pct == 100.0
    assert result.cut <= 4
    assert engine.served >= result.completed


async def test_max_requests_bounds_the_count():
    vllm = FakeVllm()
    engine = vllm.add()
    async with vllm.client() as http:
        w = Workload(kind="synthetic", concurrency=2, input_len=8, output_len=3, duration_s=30.0, max_requests=5)
        result = await LoadGenerator(http, endpoint_of(engine), w).run()
    assert result.completed == 5
    assert engine.served == 5


async def test_tight_slo_lowers_goodput():
    vllm = FakeVllm()
    engine = vllm.add(token_delay_s=0.02)
    async with vllm.client() as http:
        w = Workload(kind="synthetic", concurrency=2, input_len=8, output_len=5, duration_s=0.6, warmup_s=0.0)
        result = await LoadGenerator(http, endpoint_of(engine), w, slo=Slo(ttft_ms=1.0, tpot_ms=None)).run()
    assert result.completed > 0 and result.goodput_pct == 0.0 and result.goodput_req_s == 0.0


async def test_refusing_endpoint_is_a_plain_error():
    vllm = FakeVllm()
    engine = vllm.add()
    engine.up = False
    async with vllm.client() as http:
        w = Workload(kind="synthetic", concurrency=1, input_len=8, output_len=3, duration_s=0.5)
        with pytest.raises(LoadError, match="refused"):
            await LoadGenerator(http, endpoint_of(engine), w).run()


def test_workloads_that_cannot_fit_are_refused():
    w = Workload(kind="synthetic", concurrency=1, input_len=8000, output_len=512)
    with pytest.raises(ValueError, match="do not fit"):
        LoadGenerator(None, None, w, max_context=8192)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="captured traffic shape"):
        LoadGenerator(None, None, Workload(kind="replay", concurrency=1))  # type: ignore[arg-type]


def rec(sid, start, prompt, out, choices=1, constraint=None, chars=0, shared=None):
    return RequestRecord("e", "m", sid, start, 0.1, 1.0, prompt, out, 0, 0.1, True, choices=choices,
                         constraint=constraint, constraint_chars=chars, shared_prefix_tokens=shared)


def test_replay_keeps_append_only_histories_with_real_output_tokens():
    shape = shape_from_records("s", [rec("a", 0, 40, 5), rec("a", 1, 60, 5), rec("a", 2, 30, 5)])
    stream = ReplayStream(TokenSource(range(100, 200), seed=1), [reqs for _, reqs in shape.trace], start=0, step=1)
    first = stream.next()
    assert len(first.prompt) == 40 and first.max_tokens == 5 and first.want_ids
    stream.completed([1, 2, 3, 4, 5])
    second = stream.next()
    assert len(second.prompt) == 60
    assert second.prompt[:45] == first.prompt + [1, 2, 3, 4, 5]  # previous prompt + what the server generated
    stream.completed([9] * 5)
    third = stream.next()  # shorter than the history: the agent condensed, start over
    assert len(third.prompt) == 30 and third.prompt[:10] != second.prompt[:10]
    stream.completed(None)
    # the session's trace is over: the stream moves on to the next captured session (the same one here)
    again = stream.next()
    assert len(again.prompt) == 40


def test_replay_sends_a_request_for_several_sequences_as_n_of_its_share_each():
    shape = shape_from_records("s", [rec("a", 0, 40, 401, choices=6), rec("a", 1, 120, 5)])
    stream = ReplayStream(TokenSource(range(100, 200), seed=1), [reqs for _, reqs in shape.trace], start=0, step=1)
    drafts = stream.next()
    assert drafts.choices == 6 and drafts.max_tokens == 67  # ceil(401 / 6), not one sequence of 401
    stream.completed([1] * 67)  # the first sequence's ids: the agent kept one draft
    after = stream.next()
    assert after.choices == 1 and after.max_tokens == 5
    assert after.prompt[:107] == drafts.prompt + [1] * 67


async def test_replay_of_drafts_asks_for_n_and_counts_every_sequence_once():
    shape = shape_from_records("s", [rec("a", 0, 64, 4), rec("a", 1, 96, 12, choices=3), rec("a", 2, 128, 4)])
    vllm = FakeVllm()
    engine = vllm.add(token_delay_s=0.002)
    async with vllm.client() as http:
        w = workload_from_shape(shape, concurrency=1, duration_s=30.0, warmup_s=0.0, max_requests=3)
        gen = LoadGenerator(http, endpoint_of(engine), w, shape=shape)
        result = await gen.run()
    assert result.completed == 3 and result.failed == 0
    assert [t.choice_tokens for t in gen.timings] == [{0: 4}, {0: 4, 1: 4, 2: 4}, {0: 4}]
    assert engine.choices_asked == [1, 3, 1] and engine.max_tokens_asked == [4, 4, 4]
    assert result.output_tokens == 4 + 3 * 4 + 4  # each choice's own running usage, each token once
    # the history went on with choice 0's tokens (the fake's 200…), not choice 1's or 2's (250…, 300…)
    second, third = engine.prompts[1], engine.prompts[2]
    assert third[:len(second) + 4] == second + [200, 201, 202, 203]
    assert result.tpot.p50_ms is not None


def test_replay_respects_the_context_length():
    shape = shape_from_records("s", [rec("a", 0, 9000, 500)])
    stream = ReplayStream(TokenSource(range(100, 200)), [reqs for _, reqs in shape.trace], start=0, step=1,
                          max_context=8192)
    planned = stream.next()
    assert len(planned.prompt) + planned.max_tokens < 8192


async def test_replay_of_a_shape_reuses_prefixes_on_the_server():
    shape = shape_from_records("s", [rec("a", 0, 64, 4), rec("a", 1, 96, 4), rec("a", 2, 128, 4),
                                     rec("b", 0, 64, 4), rec("b", 1, 100, 4)])
    vllm = FakeVllm()
    engine = vllm.add(token_delay_s=0.002)
    async with vllm.client() as http:
        w = workload_from_shape(shape, concurrency=2, duration_s=0.8, warmup_s=0.0)
        assert w.kind == "replay" and w.request_rate_per_s is None
        result = await LoadGenerator(http, endpoint_of(engine), w, shape=shape).run()
    assert result.completed >= 4
    assert result.prefix_cache_hit_rate is not None and result.prefix_cache_hit_rate > 0.3


async def test_open_loop_rate_limits_requests():
    vllm = FakeVllm()
    engine = vllm.add(token_delay_s=0.001)
    async with vllm.client() as http:
        w = Workload(kind="synthetic", concurrency=8, input_len=8, output_len=2, request_rate_per_s=10.0,
                     duration_s=1.0, seed=3)
        result = await LoadGenerator(http, endpoint_of(engine), w).run()
    assert 2 <= result.completed <= 25


def test_result_round_trip_and_comparison_table():
    from dataclasses import replace

    from workstation.tuning.results import LatencyStats

    w = Workload(kind="synthetic", concurrency=4, input_len=512, output_len=512)
    base = BenchResult(tool="loadgen", workload=w, profile="default", profile_args=("--enforce-eager",),
                       profile_env=(), engine_version="0.32.0+cpu", platform="cpu", model="tiny",
                       hardware={"cpu": "x", "cpu_count": 2, "gpus": []}, duration_s=10, completed=10, failed=0,
                       cut=1, output_tokens=1000, prompt_tokens=5000, output_tok_s=100.0, total_tok_s=600.0,
                       requests_per_s=1.0, ttft=LatencyStats(10, 20, 12), tpot=LatencyStats(5, 9, 6),
                       itl=LatencyStats(), e2e=LatencyStats(), slo=Slo(), goodput_req_s=1.0, goodput_pct=100.0)
    assert BenchResult.from_dict(base.to_dict()) == base
    better = replace(base, profile="fast", output_tok_s=120.0)
    other = replace(base, profile="other", model="smollm2")
    lines = comparison_table([base, better, other])
    assert "+20.0" in lines[3] and "different workload/model/hardware" in lines[4]


def test_code_content_takes_contiguous_windows_of_the_text():
    text = list(range(1000, 1100))
    source = TokenSource(range(10, 20), seed=3, text=text)
    for n in (1, 7, 64, 250):
        window = source.fresh(n)
        assert len(window) == n
        # each next token follows the one before in the text, wrapping at its end
        assert all(b == (a + 1 - 1000) % 100 + 1000 for a, b in zip(window, window[1:]))
    # too short a text (or none) falls back to random draws from the pool
    assert set(TokenSource(range(10, 20), text=[1, 2, 3]).fresh(50)) <= set(range(10, 20))


def test_code_text_is_the_apps_own_source_in_a_fixed_order():
    text = code_text(20_000)
    assert len(text) == 20_000 and text == code_text(20_000)
    assert text.startswith("# workstation/") and "def " in text


async def test_replay_with_code_content_sends_the_tokenized_text():
    shape = shape_from_records("s", [rec("a", 0, 64, 4), rec("a", 1, 96, 4)])
    vllm = FakeVllm()  # its /tokenize answers 100..159 for any text
    engine = vllm.add(token_delay_s=0.002)
    async with vllm.client() as http:
        w = workload_from_shape(shape, concurrency=1, duration_s=0.3, warmup_s=0.0, max_requests=1)
        assert w.content == "code" and "code text" in w.describe()
        gen = LoadGenerator(http, endpoint_of(engine), w, shape=shape)
        streams = await gen._streams()
    prompt = streams[0].next().prompt
    assert all(b == a + 1 or (a, b) == (159, 100) for a, b in zip(prompt, prompt[1:]))


def test_unknown_content_is_refused():
    with pytest.raises(ValueError, match="unknown prompt content"):
        LoadGenerator(None, None, Workload(kind="synthetic", concurrency=1, input_len=8, output_len=8,  # type: ignore[arg-type]
                                            content="poetry"))


def test_replay_follows_the_measured_sharing_of_a_guided_session():
    """Each prompt starts with as much of the stream's previous request (prompt, then output) as
    the captured one shared with its session's previous request, then fresh tokens."""
    records = [rec("a", 0, 100, 10, shared=None), rec("a", 1, 120, 10, shared=100),  # one view, two requests
               rec("a", 2, 90, 10, shared=40),  # the next turn's view: only its head is the same
               rec("a", 3, 150, 10, shared=95)]  # reaches into what the server generated
    shape = shape_from_records("g", records, common_prefix_tokens=30)
    tokens = TokenSource(range(100, 200), seed=3)
    stream = ReplayStream(tokens, [reqs for _, reqs in shape.trace], start=0, step=1,
                          common_prefix=tokens.fresh(30))
    first = stream.next()
    assert len(first.prompt) == 100 and first.prompt[:30] == stream.common_prefix
    stream.completed([1] * 10)
    second = stream.next()
    assert len(second.prompt) == 120 and second.prompt[:100] == first.prompt
    assert second.prompt[100:110] != [1] * 10  # not the append-only history: fresh after the shared part
    stream.completed([2] * 10)
    third = stream.next()
    assert len(third.prompt) == 90 and third.prompt[:40] == second.prompt[:40] and third.prompt[40] != second.prompt[40]
    stream.completed([3] * 10)
    fourth = stream.next()
    assert fourth.prompt[:95] == third.prompt + [3] * 5


def test_replay_regex_changes_nothing_generated_and_never_lets_the_text_end():
    import re

    text = code_text(4000)
    a, b = replay_regex(1), replay_regex(2)
    assert a != b  # each request's own: compiled anew, as a guided agent's regexes are
    assert a.startswith(REPLAY_REGEX_BODY)
    tail = a[len(REPLAY_REGEX_BODY):]
    assert tail and "\x1e" not in tail
    assert re.fullmatch(a, text + "\x1e" + tail)  # any code, in lines; it may end only after U+001E
    assert not re.fullmatch(a, text) and not re.fullmatch(a, text + "\n")
    assert len(replay_regex(3, 700)) == 700 and len(replay_regex(3, 10**6)) == REPLAY_REGEX_MAX_CHARS


async def test_replay_constrains_the_requests_that_were_constrained_and_only_those():
    shape = shape_from_records("g", [rec("a", 0, 64, 4, constraint="regex", chars=200), rec("a", 1, 80, 4),
                                     rec("a", 2, 96, 4, constraint="json", chars=50)])
    vllm = FakeVllm()
    engine = vllm.add(token_delay_s=0.001)
    async with vllm.client() as http:
        w = workload_from_shape(shape, concurrency=1, duration_s=30.0, warmup_s=0.0, max_requests=3)
        assert w.constrained
        result = await LoadGenerator(http, endpoint_of(engine), w, shape=shape).run()
        assert result.completed == 3
        sent = engine.constraints_asked
        assert sent[1] is None and all(set(c) == {"regex"} for c in (sent[0], sent[2]))
        assert len(sent[0]["regex"]) == 200 and sent[0]["regex"] != sent[2]["regex"]
        off = workload_from_shape(shape, concurrency=1, duration_s=30.0, warmup_s=0.0, max_requests=3,
                                  constrained=False)
        assert "no constraints" in off.describe()
        engine.constraints_asked.clear()
        await LoadGenerator(http, endpoint_of(engine), off, shape=shape).run()
        assert engine.constraints_asked == [None, None, None]
        engine.constraints_asked.clear()
        synthetic = Workload(kind="synthetic", concurrency=1, input_len=8, output_len=3, duration_s=30.0,
                             max_requests=2)
        await LoadGenerator(http, endpoint_of(engine), synthetic).run()
        assert engine.constraints_asked == [None, None]


async def test_a_replay_primes_the_common_prefix_before_its_streams_start():
    """As the app's fleet primes the prefix cache with its shared system prompt, the replay
    computes the shape's common prefix once before the streams (not counted in the run)."""
    shape = shape_from_records("g", [rec("a", 0, 64, 4), rec("b", 0, 80, 4)], common_prefix_tokens=32)
    vllm = FakeVllm()
    engine = vllm.add(token_delay_s=0.001)
    async with vllm.client() as http:
        w = workload_from_shape(shape, concurrency=2, duration_s=30.0, warmup_s=0.0, max_requests=2)
        gen = LoadGenerator(http, endpoint_of(engine), w, shape=shape)
        result = await gen.run()
    assert engine.max_tokens_asked[0] == 1 and len(engine.prompts[0]) == 32
    assert all(p[:32] == engine.prompts[0] for p in engine.prompts[1:]) and len(engine.prompts) == 3
    assert result.completed == 2 and len(gen.timings) == 2 and result.output_tokens == 8


def test_replay_repeats_what_another_session_replayed_where_the_captured_request_did():
    from workstation.tuning.workload import replay_streams

    def r(sid, start, prompt, index, **kw):
        return RequestRecord("e", "m", sid, start, 0.1, 1.0, prompt, 10, 0, 0.1, True, request_index=index, **kw)

    shape = shape_from_records("x", [r("a", 0, 100, 0, reuse_tokens=0), r("b", 1, 100, 0, reuse_tokens=90,
                                                                            reuse_of=("a", 0))],
                               common_prefix_tokens=20)
    a, b = replay_streams(shape, TokenSource(range(100, 200), seed=5), 2)
    first = a.next()
    a.completed([7] * 10)
    second = b.next()
    assert second.prompt[:90] == first.prompt[:90] and second.prompt[90:] != first.prompt[90:]
    # not played yet (or forgotten): the common prefix only
    c, d = replay_streams(shape, TokenSource(range(100, 200), seed=5), 2)
    alone = d.next()
    assert alone.prompt[:20] == d.common_prefix and alone.prompt[20:90] != c.next().prompt[20:90]


def test_streams_take_the_next_session_in_turn_so_every_session_is_replayed_as_often():
    from workstation.tuning.workload import replay_streams

    records = [rec("long", i, 50, 2) for i in range(6)] + [rec(f"short{k}", k, 50, 2) for k in range(3)]
    shape = shape_from_records("mix", records)
    streams = replay_streams(shape, TokenSource(range(100, 200), seed=1), 4)
    played: dict[int, int] = {}
    for _ in range(60):
        for s in streams:
            s.next()
            s.completed([1, 2])
            played[s.session_index] = played.get(s.session_index, 0) + 1
    sessions = [len(reqs) for _, reqs in shape.trace]
    # requests replayed per session follow the sessions' lengths (6 to 1), not one stream per session
    per_request = [played[i] / sessions[i] for i in range(len(sessions))]
    assert max(per_request) / min(per_request) < 1.5, (played, sessions)


async def test_requests_the_engine_ended_before_their_length_are_reported():
    """``ignore_eos`` forces every length, so a request that ends early was stopped by the
    engine — as vLLM ends a request whose grammar rejected its tokens."""
    shape = shape_from_records("g", [rec("a", 0, 64, 8, constraint="regex"), rec("a", 1, 80, 8)])
    vllm = FakeVllm()
    engine = vllm.add(token_delay_s=0.001)
    engine.constrained_stop_after = 3
    async with vllm.client() as http:
        w = workload_from_shape(shape, concurrency=1, duration_s=30.0, warmup_s=0.0, max_requests=2)
        result = await LoadGenerator(http, endpoint_of(engine), w, shape=shape).run()
        assert result.completed == 2 and result.output_tokens == 3 + 8
        assert any("1 of 2 requests ended before their length" in n for n in result.notes), result.notes
        assert result.ended_early == 1  # what the tuner's verdict reads
        off = workload_from_shape(shape, concurrency=1, duration_s=30.0, warmup_s=0.0, max_requests=2,
                                  constrained=False)
        clean = await LoadGenerator(http, endpoint_of(engine), off, shape=shape).run()
    assert not any("ended before" in n for n in clean.notes)


async def test_a_load_over_several_engines_keeps_each_stream_on_one_and_sums_their_counters():
    """A profile of two engines on the GPU is measured as the app serves it: stream i on engine
    i mod 2 (a session stays on its engine), the common prefix primed on each, every token and
    every engine's prefix-cache counters counted once."""
    shape = shape_from_records("s", [rec(s, i, 64 + 16 * i, 4) for s in "abcd" for i in range(3)],
                               common_prefix_tokens=32)
    vllm = FakeVllm()
    one, two = vllm.add(token_delay_s=0.001), vllm.add(token_delay_s=0.001)
    async with vllm.client() as http:
        w = workload_from_shape(shape, concurrency=4, duration_s=30.0, warmup_s=0.0, max_requests=8)
        gen = LoadGenerator(http, [endpoint_of(one), endpoint_of(two)], w, shape=shape)
        result = await gen.run()
    # one priming request each, then the streams' requests split between them
    assert one.max_tokens_asked[0] == 1 and two.max_tokens_asked[0] == 1
    assert one.served - 1 == two.served - 1 == 4
    firsts = lambda e: {tuple(p[32:40]) for p in e.prompts[1:]}  # noqa: E731 - a session's own tokens
    assert firsts(one).isdisjoint(firsts(two))  # no session's history went to both engines
    assert result.completed == 8 and result.output_tokens == 32
    assert result.prefix_cache_hit_rate is not None and result.prefix_cache_hit_rate > 0
    assert result.endpoint == f"{one.base_url} + {two.base_url}"


def test_another_seed_replays_the_same_requests_with_new_contents_and_regexes():
    """What a screening repeat changes (its seed): the sizes, choices and sharing of every
    request stay; the tokens and each request's regex are new to the engine's caches."""
    from workstation.tuning.workload import replay_streams

    records = [rec("a", 0, 100, 12, constraint="regex", chars=120), rec("a", 1, 130, 30, choices=3,
                                                                        constraint="regex", shared=100),
               rec("b", 0, 90, 8, constraint="regex", chars=80)]
    shape = shape_from_records("g", records, common_prefix_tokens=20)

    def play(seed):
        out = []
        for stream in replay_streams(shape, TokenSource(range(100, 400), seed=seed), 2):
            for _ in range(3):
                planned = stream.next()
                out.append(planned)
                stream.completed([7] * planned.max_tokens)
        return out

    first, again, other = play(1), play(1), play(2)
    assert [(p.prompt, p.regex) for p in first] == [(p.prompt, p.regex) for p in again]
    assert [(len(p.prompt), p.max_tokens, p.choices, len(p.regex or "")) for p in first] == \
        [(len(p.prompt), p.max_tokens, p.choices, len(p.regex or "")) for p in other]
    assert all(p.prompt != q.prompt and p.regex != q.regex for p, q in zip(first, other))
