"""The tuner's agent check: real sessions on an engine, and the refusal of a change whose
sessions do not hold up against the baseline's."""

from __future__ import annotations

import socket

import pytest

from workstation.core.endpoints import Endpoint
from workstation.core.profiles import Profile
from workstation.telemetry.vllm_metrics import parse_metrics
from workstation.tuning.agent_check import AgentCheck, refusal, run_agent_check
from workstation.tuning.loadgen import counter_delta
from workstation.tuning.autotune import Candidate, TuneReport, TuneStep
from workstation.tuning.results import Workload
from workstation.tuning.screening import Measured, Trial

from .test_screening import _result, _tuner


def check(calls: float, errors: int = 0, ended: dict | None = None, failing: dict | None = None) -> AgentCheck:
    return AgentCheck("http://x", 8, calls, errors, ended or {"failed: reached the limit of 6 model turns": 8},
                      error_reasons=failing or {})


def test_a_change_whose_sessions_make_far_fewer_calls_or_fail_more_is_refused():
    base = check(8.0)
    assert refusal(base, check(7.5)) is None and refusal(base, check(5.6)) is None
    # the night's H200 run: 1.2 tool calls a session on n-gram drafts, 8.0 without
    why = refusal(base, check(1.2))
    assert why and "1.2 tool calls" in why and "8" in why
    why = refusal(base, check(8.0, errors=3, ended={"failed: HTTP 500 from the engine": 3, "done": 5},
                              failing={"failed: HTTP 500 from the engine": 3}))
    assert why and "3 of 8" in why and "HTTP 500" in why
    # the same errors as the baseline had are the check's own, not the change's
    assert refusal(check(8.0, errors=1), check(8.0, errors=1)) is None


def _metrics(drafts: int, accepted: int, hits: int, queries: int) -> str:
    return (f"vllm:spec_decode_num_draft_tokens_total{{model_name=\"m\"}} {drafts}.0\n"
            f"vllm:spec_decode_num_accepted_tokens_total{{model_name=\"m\"}} {accepted}.0\n"
            f"vllm:prefix_cache_hits_total{{model_name=\"m\"}} {hits}.0\n"
            f"vllm:prefix_cache_queries_total{{model_name=\"m\"}} {queries}.0\n")


def test_the_checks_figures_come_from_the_engines_counters_around_the_run():
    before, after = parse_metrics(_metrics(100, 40, 10, 20)), parse_metrics(_metrics(7375, 4371, 110, 220))
    drafts = counter_delta(before, after, "spec_draft_tokens")
    accepted = counter_delta(before, after, "spec_accepted_tokens")
    assert (drafts, accepted) == (7275.0, 4331.0)
    assert counter_delta(None, after, "spec_draft_tokens") is None
    assert counter_delta(parse_metrics(""), after, "spec_draft_tokens") is None  # an engine that does not draft
    ran = AgentCheck("http://x", 32, 1.2, 0, {"failed: reached the limit of 8 model turns": 30, "done": 2},
                     wall_s=11.8, generated_tokens=4663, spec_draft_tokens=drafts, spec_accepted_tokens=accepted)
    assert ran.spec_acceptance_rate == 0.5953 and ran.generated_tok_s == 395.2
    assert ran.states == {"failed": 30, "done": 2}
    assert ran.why_not_done == {"failed: reached the limit of 8 model turns": 30}
    keys = ran.to_json()  # the GPU suite's fleet_on_trials keys, read in docs/measurements
    assert {"sessions", "wall_s", "generated_tok_s", "tool_calls_mean", "prefix_hit_rate", "spec_draft_tokens",
            "spec_accepted_tokens", "spec_acceptance_rate", "states", "why_not_done"} <= set(keys)
    assert check(8.0).spec_acceptance_rate is None and check(8.0).generated_tok_s is None


async def test_the_screening_keeps_only_the_changes_whose_agents_hold_up(tmp_path):
    tuner = _tuner(tmp_path)

    class _Launcher:
        def __init__(self, name: str) -> None:
            self.endpoint = name

    good, bad = Candidate.of(["--stream-interval", "8"]), Candidate.of(["--speculative-config", "{}"], label="drafts")
    trials = [Trial("baseline", Profile("b", ""), launcher=_Launcher("base")),  # type: ignore[arg-type]
              # a trial of two engines on the GPU: its check spreads the sessions over both
              Trial(good.change, Profile("g", ""), candidate=good, launcher=_Launcher("good"),  # type: ignore[arg-type]
                    more=[_Launcher("good#2")]),  # type: ignore[list-item]
              Trial(bad.change, Profile("d", ""), candidate=bad, launcher=_Launcher("bad"))]  # type: ignore[arg-type]
    measured = [Measured(t, [_result(1000.0, 100.0)] * 3) for t in trials]
    report = TuneReport(workload=Workload(kind="synthetic", concurrency=4, input_len=8, output_len=8))
    report.steps = [TuneStep(i, t.label, 1000.0, 0.0, i > 0) for i, t in enumerate(trials)]
    seen: list[str] = []

    async def agent_check(endpoints):  # type: ignore[no-untyped-def]
        seen.append("+".join(endpoints))
        return check(1.0 if endpoints == ["bad"] else 8.0)

    tuner.agent_check = agent_check
    record: dict = {}
    held = await tuner._check_agents([(good, 30.0), (bad, 40.0)], measured, report, record)
    assert held == [(good, 30.0)] and seen == ["base", "good+good#2", "bad"]
    steps = {s.change: s for s in report.steps}
    assert steps["drafts"].kept is False and "agent check" in steps["drafts"].note
    assert steps[good.change].kept is True
    assert set(record) == {"baseline", good.change, "drafts"} and record["drafts"]["tool_calls_mean"] == 1.0

    faster = [Measured(t, [_result(tok_s, 100.0)] * 3) for t, tok_s in zip(trials, (1000.0, 1300.0, 1400.0))]

    async def measure(_trials, _workload, _shape):  # type: ignore[no-untyped-def]
        return faster

    tuner.trials, tuner._measure = trials, measure  # type: ignore[method-assign]
    seen.clear()
    screening = await tuner.screen("agents", report.workload)
    assert screening.outcome["kept"] == [good.change] and seen == ["base", "good+good#2", "bad"]
    # every check's figures stay in the round's summary (the GPU suite's tune results' detail)
    assert screening.outcome["agent_check"]["drafts"]["tool_calls_mean"] == 1.0
    assert "spec_acceptance_rate" in screening.outcome["agent_check"]["baseline"]


@pytest.mark.engine
async def test_real_sessions_on_a_real_engine_and_on_one_that_is_gone(smollm2_engine, tmp_path):
    from workstation.config import Settings
    from workstation.services import Services

    settings = Settings(data_dir=tmp_path / "data")
    async with Services(settings) as services:
        ok = await run_agent_check(services.fleet, smollm2_engine, sessions=2, max_turns=3, timeout_s=240)
        with socket.socket() as s:  # a port nothing listens on
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        gone = Endpoint(f"http://127.0.0.1:{port}", smollm2_engine.api_key, smollm2_engine.model)
        dead = await run_agent_check(services.fleet, gone, sessions=2, max_turns=3, timeout_s=20)
    assert ok.sessions == 2 and ok.tool_calls_mean >= 2 and ok.errors == 0
    # read from the engine's /metrics around the run: it does not speculate, so no drafts
    assert ok.spec_draft_tokens is None and ok.spec_acceptance_rate is None
    assert ok.generated_tokens > 0 and ok.generated_tok_s and 0 < ok.wall_s <= ok.seconds
    assert ok.prefix_hit_rate is not None and 0 <= ok.prefix_hit_rate <= 1
    assert sum(ok.states.values()) == 2 and dead.prefix_hit_rate is None and dead.generated_tok_s == 0
    # the guided protocol's first step (read the named file) needs no model; nothing after it comes
    assert dead.sessions == 2 and dead.tool_calls_mean <= 1 and dead.errors == 2
    why = refusal(ok, dead)
    assert why and "refused by the agent check" in why


async def test_a_check_on_several_engines_spreads_its_sessions_and_names_them_all(tmp_path):
    """A profile of several engines on the GPU is checked on all of them (named apart, as the
    app names its engines on one GPU): its fleet's figures are the profile's, not one engine's."""
    from workstation.config import Settings
    from workstation.services import Services

    gone = []
    for i in range(2):
        with socket.socket() as s:  # ports nothing listens on
            s.bind(("127.0.0.1", 0))
            gone.append(Endpoint(f"http://127.0.0.1:{s.getsockname()[1]}", "k", "m", name=f"managed:m#{i + 1}"))
    async with Services(Settings(data_dir=tmp_path / "data")) as services:
        dead = await run_agent_check(services.fleet, gone, sessions=2, max_turns=2, timeout_s=20)
    assert dead.endpoint == f"{gone[0].base_url}, {gone[1].base_url}"
    assert dead.sessions == 2 and dead.errors == 2 and dead.prefix_hit_rate is None
