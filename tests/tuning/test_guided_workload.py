"""The built-in agent-like workload as the guided protocol sends it (regex on every request,
drafts drawn n at a time) where the app's agents are guided for the model, and unchanged where
they are not: on the fake engine (what the requests carry), and one short run on the real
dev engine (marked ``engine``: it accepts them and every sequence's tokens count once)."""

from __future__ import annotations

import pytest

from workstation.config import Settings
from workstation.core.endpoints import Endpoint
from workstation.tuning.live_jobs import LiveJobs
from workstation.tuning.loadgen import (
    LoadGenerator,
    agent_like_workload,
    guided_agent_choices,
    guided_draft_choices,
    workload_model,
)
from workstation.tuning.results import BenchResult, Workload
from workstation.tuning.store import TuningStore
from workstation.tuning.workload import (
    GUIDED_CALL_TOKENS,
    GUIDED_CHOICE_REGEX_CHARS,
    GUIDED_CODE_REGEX_CHARS,
    REPLAY_REGEX_BODY,
    guided_session,
)

from .fake_vllm import FakeVllm


def endpoint_of(engine, model: str = "m") -> Endpoint:  # type: ignore[no-untyped-def]
    return Endpoint(engine.base_url, "k", model)


def test_a_guided_session_is_a_choice_then_a_greedy_and_n_sampled_drafts_then_n_more():
    session = guided_session(500, 64, 6, prefix_tokens=300)
    assert [r.choices for r in session] == [1, 1, 6, 6]
    assert all(r.constraint == "regex" for r in session)
    assert session[0].completion_tokens == GUIDED_CALL_TOKENS
    assert session[0].constraint_chars == GUIDED_CHOICE_REGEX_CHARS
    assert [r.completion_tokens for r in session[1:]] == [64, 6 * 64, 6 * 64]  # n sequences of 64 each
    assert all(r.constraint_chars == GUIDED_CODE_REGEX_CHARS for r in session[1:])
    # the drafts share the draw's whole prompt; the greedy one shares the choice's view
    assert session[2].shared_tokens == session[2].prompt_tokens == session[1].prompt_tokens
    assert session[1].shared_tokens == 800 < session[1].prompt_tokens
    assert session[3].prompt_tokens > session[2].prompt_tokens


async def test_guided_builtin_requests_carry_a_regex_and_the_planned_n_and_the_plain_one_none():
    vllm = FakeVllm()
    guided_engine, plain_engine = vllm.add(token_delay_s=0.001), vllm.add(token_delay_s=0.001)
    guided = agent_like_workload(concurrency=1, duration_s=30.0, warmup_s=0.0, max_requests=4, guided_choices=6)
    plain = agent_like_workload(concurrency=1, duration_s=30.0, warmup_s=0.0, max_requests=4)
    async with vllm.client() as http:
        gen = LoadGenerator(http, endpoint_of(guided_engine), guided)
        result = await gen.run()
        plain_result = await LoadGenerator(http, endpoint_of(plain_engine), plain).run()
    # the prefix-priming request first (unconstrained, unmeasured), then one guided session
    assert guided_engine.choices_asked == [1, 1, 1, 6, 6]
    assert guided_engine.max_tokens_asked == [1, GUIDED_CALL_TOKENS, 64, 64, 64]
    regexes = [c["regex"] if c else None for c in guided_engine.constraints_asked]
    assert regexes[0] is None and all(r is not None and r.startswith(REPLAY_REGEX_BODY) for r in regexes[1:])
    assert len(regexes[1]) == GUIDED_CHOICE_REGEX_CHARS and len(regexes[2]) == GUIDED_CODE_REGEX_CHARS
    assert len(set(regexes[1:])) == 4  # each compiled anew, as the agent's are
    # n sequences of 64 each, each counted once
    assert [t.choice_tokens for t in gen.timings] == [{0: GUIDED_CALL_TOKENS}, {0: 64}, {i: 64 for i in range(6)},
                                                      {i: 64 for i in range(6)}]
    assert result.output_tokens == GUIDED_CALL_TOKENS + 64 + 2 * 6 * 64 and result.completed == 4
    assert result.ended_early == 0 and result.failed == 0
    # ITL is between one choice's chunks: the six choices' chunks of one step arrive together,
    # and their gaps (~0) would otherwise make most of them (the fake sends a step per ms)
    assert result.itl.p50_ms is not None and result.itl.p50_ms >= 0.9
    assert plain_engine.choices_asked == [1, 1, 1, 1] and plain_engine.constraints_asked == [None] * 4
    assert plain_engine.max_tokens_asked == [48] * 4 and plain_result.output_tokens == 4 * 48


def test_the_workload_says_it_is_guided_and_old_results_without_the_field_load():
    guided = agent_like_workload(guided_choices=6)
    assert guided.describe().endswith("guided: regex, n=6 draws")
    assert "guided" not in agent_like_workload().describe()
    assert agent_like_workload().guided_choices == 0
    result = _result(guided)
    data = result.to_dict()
    assert BenchResult.from_dict(data).workload == guided
    del data["workload"]["guided_choices"]  # what results stored before the field look like
    old = BenchResult.from_dict(data)
    assert old.workload.guided_choices == 0 and old.workload.kind == "synthetic"
    with pytest.raises(ValueError, match="built-in synthetic"):
        LoadGenerator(None, None, Workload(kind="replay", concurrency=1, guided_choices=6))  # type: ignore[arg-type]


def _result(workload: Workload) -> BenchResult:
    from workstation.tuning.results import LatencyStats, Slo

    none = LatencyStats()
    return BenchResult(tool="loadgen", workload=workload, profile="p", profile_args=(), profile_env=(),
                       engine_version="v", platform="cpu", model="m", hardware={}, duration_s=1.0, completed=1,
                       failed=0, cut=0, output_tokens=1, prompt_tokens=1, output_tok_s=1.0, total_tok_s=2.0,
                       requests_per_s=1.0, ttft=none, tpot=none, itl=none, e2e=none, slo=Slo(),
                       goodput_req_s=None, goodput_pct=None)


def test_the_built_in_workload_is_guided_where_the_agents_are_guided_for_the_model(tmp_path):
    settings = Settings(data_dir=tmp_path)
    small = workload_model(settings, "smollm2")  # not prepared here: known by its name
    assert small.local_dir is None and guided_agent_choices(settings, small) == guided_draft_choices() == 6
    assert guided_agent_choices(settings, workload_model(settings, "Qwen2.5-Coder-32B")) == 0
    assert guided_agent_choices(settings, workload_model(settings, "some-model")) == 0  # unknown: plain


@pytest.mark.parametrize(("model", "guided"), [("smollm2", True), ("Qwen2.5-Coder-32B", False)])
async def test_the_docks_bench_picks_the_built_in_workload_by_the_served_model(tmp_path, model, guided):
    vllm = FakeVllm()
    engine = vllm.add(token_delay_s=0.001)
    said: list[str] = []
    async with vllm.client() as http:
        jobs = LiveJobs(http, endpoint=lambda: endpoint_of(engine, model), store=TuningStore(tmp_path),
                        fleets=None, settings=Settings(data_dir=tmp_path), bench_s=1.0,  # type: ignore[arg-type]
                        bench_concurrency=1)
        line = await jobs.bench(said.append)
    assert "stored as" in line
    stored = TuningStore(tmp_path).results()[-1]
    assert (stored.workload.guided_choices == 6) is guided
    assert ("guided: regex, n=6 draws" in said[0]) is guided
    assert ("as the guided protocol sends it" in said[0]) is guided
    constrained = [c for c in engine.constraints_asked if c]
    assert bool(constrained) is guided and (6 in engine.choices_asked) is guided


@pytest.mark.engine
async def test_the_dev_engine_takes_the_guided_built_in_requests_and_every_token_counts_once(smollm2_engine):
    from workstation.engine.http import make_http_client

    # bounded by its 6 requests; the window only has to outlast them on a slow host (a 2-core
    # CPU without AVX2 cut 2 of them at 120 s)
    w = agent_like_workload(concurrency=2, duration_s=420.0, warmup_s=0.0, max_requests=6,
                            guided_choices=guided_draft_choices())
    async with make_http_client() as http:
        gen = LoadGenerator(http, smollm2_engine, w, max_context=8192)
        result = await gen.run()
    assert result.failed == 0 and result.cut == 0, result.notes
    assert result.completed == 6 and result.ended_early == 0  # the regex never ended a sequence early
    done = [t for t in gen.timings if t.done]
    assert {t.choices for t in done} == {1, 6}
    for t in done:  # ignore_eos: each of the n sequences generates exactly its max_tokens, counted once
        assert t.choice_tokens == {i: t.max_tokens for i in range(t.choices)}
        assert t.output_tokens == t.max_tokens * t.choices
    assert result.output_tokens == sum(t.output_tokens for t in done)
