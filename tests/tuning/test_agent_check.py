"""The tuner's agent check: real sessions on an engine, and the refusal of a change whose
sessions do not hold up against the baseline's."""

from __future__ import annotations

import socket

import pytest

from workstation.core.endpoints import Endpoint
from workstation.core.profiles import Profile
from workstation.tuning.agent_check import AgentCheck, refusal, run_agent_check
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


async def test_the_screening_keeps_only_the_changes_whose_agents_hold_up(tmp_path):
    tuner = _tuner(tmp_path)

    class _Launcher:
        def __init__(self, name: str) -> None:
            self.endpoint = name

    good, bad = Candidate.of(["--stream-interval", "8"]), Candidate.of(["--speculative-config", "{}"], label="drafts")
    trials = [Trial("baseline", Profile("b", ""), launcher=_Launcher("base")),  # type: ignore[arg-type]
              Trial(good.change, Profile("g", ""), candidate=good, launcher=_Launcher("good")),  # type: ignore[arg-type]
              Trial(bad.change, Profile("d", ""), candidate=bad, launcher=_Launcher("bad"))]  # type: ignore[arg-type]
    measured = [Measured(t, [_result(1000.0, 100.0)] * 3) for t in trials]
    report = TuneReport(workload=Workload(kind="synthetic", concurrency=4, input_len=8, output_len=8))
    report.steps = [TuneStep(i, t.label, 1000.0, 0.0, i > 0) for i, t in enumerate(trials)]
    seen: list[str] = []

    async def agent_check(endpoint):  # type: ignore[no-untyped-def]
        seen.append(endpoint)
        return check(1.0 if endpoint == "bad" else 8.0)

    tuner.agent_check = agent_check
    record: dict = {}
    held = await tuner._check_agents([(good, 30.0), (bad, 40.0)], measured, report, record)
    assert held == [(good, 30.0)] and seen == ["base", "good", "bad"]
    steps = {s.change: s for s in report.steps}
    assert steps["drafts"].kept is False and "agent check" in steps["drafts"].note
    assert steps[good.change].kept is True
    assert set(record) == {"baseline", good.change, "drafts"} and record["drafts"]["tool_calls_mean"] == 1.0


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
    # the guided protocol's first step (read the named file) needs no model; nothing after it comes
    assert dead.sessions == 2 and dead.tool_calls_mean <= 1 and dead.errors == 2
    why = refusal(ok, dead)
    assert why and "refused by the agent check" in why
