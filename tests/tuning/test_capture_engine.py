"""A fleet of real agents on the real engine (SmolLM2: the guided protocol) recorded by a
:class:`TrafficRecorder` attached to the fleet (marked ``engine``): one record per model
request, checked against the chat requests the fleet's HTTP client really sent and against
the engine's own counters."""

from __future__ import annotations

import asyncio
import os
import re
from pathlib import Path

import httpx
import orjson
import pytest

from workstation.agent import AgentConfig
from workstation.core import agent_events as ev
from workstation.core.agent_events import ToolProtocol
from workstation.core.endpoints import Endpoint
from workstation.engine.http import make_http_client
from workstation.fleet import Fleet, SessionSpec, real_agent_factory
from workstation.tuning.capture import TrafficRecorder

pytestmark = [pytest.mark.engine, pytest.mark.slow]

DRAFTS = re.compile(r"\[(\d+) drafts, ")


async def engine_counts(http: httpx.AsyncClient, endpoint: Endpoint) -> tuple[float, float]:
    """(requests, sequences) the engine finished: ``vllm:request_params_n`` is observed once a
    request, ``vllm:request_success_total`` once a sequence (a request for n counts n)."""
    from prometheus_client.parser import text_string_to_metric_families

    headers = {"Authorization": f"Bearer {endpoint.api_key}"} if endpoint.api_key else {}
    response = await http.get(endpoint.base_url.rstrip("/") + "/metrics", headers=headers)
    response.raise_for_status()
    requests = sequences = 0.0
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            if sample.name == "vllm:request_params_n_count":
                requests += sample.value
            elif sample.name == "vllm:request_success_total":
                sequences += sample.value
    return requests, sequences


async def test_a_fleet_capture_records_each_model_request_once_with_its_n(
        tmp_path: Path, git_repo: Path, smollm2_engine: Endpoint) -> None:
    sent: list[int] = []
    """The ``n`` of each chat request the fleet's HTTP client sent."""
    drafted: list[int] = []
    protocols: list[ToolProtocol] = []

    async def on_request(request: httpx.Request) -> None:
        if request.method == "POST" and request.url.path.endswith("/chat/completions"):
            sent.append(int(orjson.loads(request.content).get("n") or 1))

    def on_agent(e) -> None:  # type: ignore[no-untyped-def]
        if isinstance(e.event, ev.ProtocolSelected):
            protocols.append(e.event.protocol)
        elif isinstance(e.event, ev.TextStreamed) and (m := DRAFTS.search(e.event.text)):
            drafted.append(int(m.group(1)))

    async with make_http_client() as http:
        http.event_hooks = {"request": [on_request]}
        factory = real_agent_factory(http)
        fleet = Fleet(data_dir=tmp_path / "data", endpoints=[smollm2_engine], http=http,
                      agent_factory=factory, max_generating=3)
        fleet.agent_event.connect(on_agent)
        await fleet.start()
        recorder = TrafficRecorder("engine-fleet", http=http, endpoint=smollm2_engine)
        recorder.attach_fleet(fleet)
        await recorder.start()
        before = await engine_counts(http, smollm2_engine)
        await fleet.create_sessions(
            SessionSpec(task="Read app.py, then add a function sub(a, b) that returns a - b to app.py.",
                        repo=str(git_repo), auto_approve=("read", "edit"), headless=True, max_steps=3), 3,
            start=True)
        await asyncio.wait_for(fleet.wait_settled(), 900)
        after = await engine_counts(http, smollm2_engine)
        await recorder.stop()
        ids = {s.session_id for s in fleet.sessions()}
        await fleet.aclose()

    # the priming request (no session) is kept apart from the sessions' records
    assert all(r.session_id is None for r in recorder.priming) and len(recorder.priming) <= 1
    sessions_records = recorder.records
    records = sessions_records + recorder.priming
    assert protocols and set(protocols) == {ToolProtocol.GUIDED}, protocols
    # every request of the guided protocol is held to a regex: the record says so, and how long
    assert sessions_records and all(r.constraint == "regex" and r.constraint_chars > 0 for r in sessions_records)
    assert all(r.constraint is None for r in recorder.priming)
    # and what it repeats: of its session's previous request, and the longest of any earlier one
    assert all((r.shared_prefix_tokens is not None) == (r.request_index != 0) for r in sessions_records)
    assert all(r.reuse_of is not None and 0 < r.reuse_tokens <= r.prompt_tokens for r in sessions_records
               if r.request_index), [(r.reuse_of, r.reuse_tokens) for r in sessions_records]
    # one record per chat request the fleet sent (the priming one included), each with its n
    assert len(records) == len(sent) > 0
    assert sorted(r.choices for r in records) == sorted(sent)
    assert all(r.ok for r in records), [r.error for r in records if not r.ok]
    assert all(r.prompt_tokens > 0 and r.completion_tokens > 0 for r in records), \
        [(r.prompt_tokens, r.completion_tokens) for r in records]
    assert {r.session_id for r in records} <= ids | {None}
    assert sum(1 for r in records if r.session_id is None) <= 1  # the one priming request
    # the drafts the agents announced ("[19 drafts, …": a greedy one and up to three rounds of
    # n) came from one request for n of them a round
    n = AgentConfig().guided_drafts
    multi = [r for r in records if r.choices > 1]
    assert {r.choices for r in multi} <= {n}
    assert len(multi) == sum(k // n for k in drafted), (drafted, [r.choices for r in records])
    assert all(r.completion_tokens >= r.choices for r in multi)
    # the engine saw them: one request each (n's count), n sequences each (success counts sequences)
    requests, sequences = after[0] - before[0], after[1] - before[1]
    if os.environ.get("WORKSTATION_TEST_ENGINE_URL"):  # a shared engine: others' requests count too
        assert requests >= len(records) and sequences >= sum(r.choices for r in records)
    else:
        assert requests == len(records) and sequences == sum(r.choices for r in records)
    shape = recorder.shape()
    assert shape.requests == len(sessions_records) and shape.sessions == len({r.session_id for r in sessions_records})
    assert shape.multi_choice_requests == len(multi) and shape.guided_fraction == 1.0


async def test_a_replay_sends_drafts_as_n_sequences_and_counts_each_token_once(tiny_engine: Endpoint) -> None:
    """vLLM takes the replay's request for n (at a sampling temperature: it refuses n > 1
    greedy) and streams each choice with its own running usage: the load generator's count is
    every sequence's tokens, exactly (``ignore_eos``)."""
    from workstation.core.requests import RequestRecord
    from workstation.core.traffic import shape_from_records
    from workstation.tuning.loadgen import LoadGenerator, workload_from_shape

    def rec(start: float, prompt: int, out: int, choices: int = 1) -> RequestRecord:
        return RequestRecord("e", "tiny", "a", start, 0.1, 1.0, prompt, out, 0, 0.1, True, choices=choices)

    shape = shape_from_records("drafts", [rec(0, 200, 12), rec(1, 260, 6 * 20, choices=6), rec(2, 320, 8)])
    async with make_http_client() as http:
        w = workload_from_shape(shape, concurrency=1, duration_s=120.0, warmup_s=0.0, max_requests=3)
        gen = LoadGenerator(http, tiny_engine, w, shape=shape)
        result = await gen.run()
    assert result.failed == 0 and result.completed == 3, result.notes
    assert [t.choice_tokens for t in gen.timings] == [{0: 12}, {i: 20 for i in range(6)}, {0: 8}]
    assert result.output_tokens == 12 + 6 * 20 + 8


async def test_a_constrained_replay_generates_the_full_lengths(smollm2_engine: Endpoint) -> None:
    """The replay's structured-outputs regex (for the requests a guided agent held to one) is
    taken by vLLM's /v1/completions and ends no sequence early: every request, of one sequence
    or of n, generates exactly the captured length (``ignore_eos``), as without it."""
    from workstation.core.requests import RequestRecord
    from workstation.core.traffic import shape_from_records
    from workstation.tuning.loadgen import LoadGenerator, workload_from_shape
    from workstation.tuning.workload import replay_regex

    def rec(start: float, prompt: int, out: int, choices: int = 1, shared: int | None = None) -> RequestRecord:
        return RequestRecord("e", "smollm2", "a", start, 0.1, 1.0, prompt, out, 0, 0.1, True, choices=choices,
                             constraint="regex", constraint_chars=600, shared_prefix_tokens=shared)

    shape = shape_from_records("guided", [rec(0, 300, 48), rec(1, 340, 2 * 40, choices=2, shared=300),
                                          rec(2, 320, 64, shared=120)])
    assert shape.guided_fraction == 1.0
    async with make_http_client() as http:
        w = workload_from_shape(shape, concurrency=1, duration_s=300.0, warmup_s=0.0, max_requests=3)
        gen = LoadGenerator(http, smollm2_engine, w, shape=shape)
        result = await gen.run()
        # the engine reads the field: a regex it cannot compile is refused, not ignored
        body = {"model": smollm2_engine.model, "prompt": [100, 200, 300], "max_tokens": 4, "ignore_eos": True,
                "structured_outputs": {"regex": replay_regex(1) + "(("}}
        refused = await http.post(smollm2_engine.v1 + "/completions", json=body,
                                  headers=smollm2_engine.auth_headers())
    assert result.failed == 0 and result.completed == 3, result.notes
    assert [t.choice_tokens for t in gen.timings] == [{0: 48}, {0: 40, 1: 40}, {0: 64}]
    assert result.output_tokens == 48 + 80 + 64
    assert not any("ended before" in note for note in result.notes), result.notes
    assert refused.status_code == 400, refused.text[:300]
