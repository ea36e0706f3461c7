import json

import pytest

from workstation.core.errors import UserError
from workstation.core.profiles import PRESETS, Profile, effective
from workstation.core.requests import RequestRecord
from workstation.core.traffic import shape_from_records
from workstation.tuning.capture import TrafficRecorder
from workstation.tuning.store import TuningStore

from .fake_vllm import FakeVllm


def test_user_profiles_round_trip_and_resolve_flattened(tmp_path):
    store = TuningStore(tmp_path)
    mine = Profile("mine", "more seqs", args=("--max-num-seqs", "64"), parent="default")
    store.save_profile(mine)
    child = Profile("mine2", "ngram", args=("--speculative-config", '{"method":"ngram","num_speculative_tokens":3}'),
                    parent="mine", env=(("OMP_NUM_THREADS", "1"),))
    path = store.save_profile(child)
    assert path.suffix == ".toml" and "[env]" in path.read_text()
    assert set(store.catalogue()) >= {*PRESETS, "mine", "mine2"}
    flat, cat = store.resolve("mine2")
    assert flat.parent is None and effective(flat, PRESETS) == effective(child, cat)
    assert store.delete_profile("mine2") and "mine2" not in store.catalogue()


def test_bad_or_shadowing_profile_files_are_reported_not_fatal(tmp_path):
    store = TuningStore(tmp_path)
    store.profiles_dir.mkdir(parents=True)
    (store.profiles_dir / "broken.toml").write_text("name = [")
    (store.profiles_dir / "default.json").write_text(json.dumps({"name": "default", "args": []}))
    (store.profiles_dir / "ok.json").write_text(json.dumps({"name": "ok", "args": ["--max-num-seqs", "4"]}))
    assert set(store.user_profiles()) == {"ok"}
    assert len(store.problems) == 2
    with pytest.raises(UserError, match="preset"):
        store.save_profile(Profile("compiled", ""))
    with pytest.raises(UserError, match="unknown parent"):
        store.save_profile(Profile("orphan", "", parent="nope"))
    with pytest.raises(UserError, match="unknown profile"):
        store.resolve("nope")


def rec(sid, start, prompt, out, ok=True):
    return RequestRecord("e", "m", sid, start, 0.1, 1.0, prompt, out, 0, 0.2, ok)


def test_shapes_are_stored_by_name(tmp_path):
    store = TuningStore(tmp_path)
    shape = shape_from_records("fleet 8/x", [rec("a", 0, 100, 10), rec("a", 1, 120, 10)])
    store.save_shape(shape)
    assert store.shapes() == ["fleet-8-x"]
    assert store.load_shape("fleet 8/x") == shape
    with pytest.raises(UserError, match="no traffic shape"):
        store.load_shape("missing")


async def test_recorder_on_a_fleet_gets_one_record_per_model_request_of_every_client(tmp_path):
    """The fleet's request observers are one list that every chat client of its agent factory
    shares: clients made before and after the recorder attached report to it, each request once
    with its own usage and n, and detaching stops it for all of them."""
    from workstation.core.endpoints import Endpoint
    from workstation.fleet import Fleet, real_agent_factory

    vllm = FakeVllm()
    engine = vllm.add(token_delay_s=0.001)
    async with vllm.client() as http:
        ep = Endpoint(engine.base_url, "k", "m")
        factory = real_agent_factory(http)
        fleet = Fleet(data_dir=tmp_path / "data", endpoints=[ep], agent_factory=factory, http=http)
        assert fleet.request_observers is factory.request_observers
        before = factory._client(ep, None, "s1")
        recorder = TrafficRecorder("f", http=http, endpoint=ep)
        recorder.attach_fleet(fleet)
        recorder.attach_fleet(fleet)  # twice: still one observer
        after = factory._client(ep, None, "s2")
        priming = factory._client(ep, None)
        await recorder.start()
        await before.complete([{"role": "user", "content": "x"}], max_tokens=5)
        await after.complete([{"role": "user", "content": "x"}], max_tokens=7, extra={"n": 3})
        await after.complete([{"role": "user", "content": "x"}], max_tokens=2)
        await priming.complete([{"role": "user", "content": "x"}], max_tokens=1)
        await recorder.stop()
        assert recorder.observe not in factory.request_observers
        assert before.observers is after.observers is factory.request_observers
        await before.complete([{"role": "user", "content": "x"}], max_tokens=2)  # after stop: not recorded
    assert [(r.session_id, r.completion_tokens, r.choices) for r in recorder.records] == [
        ("s1", 5, 1), ("s2", 7, 3), ("s2", 2, 1)]
    assert all(r.ok and r.prompt_tokens for r in recorder.records)
    # each client compares a request with its previous one: s2's second repeats its first
    assert [r.shared_prefix_tokens for r in recorder.records] == [None, None, recorder.records[2].prompt_tokens]
    # the priming (no session) is kept apart: not a one-request session of the shape
    assert [(r.session_id, r.completion_tokens) for r in recorder.priming] == [(None, 1)]
    shape = recorder.shape()
    assert shape.source == "fleet" and shape.requests == 3 and shape.sessions == 2
    assert shape.multi_choice_requests == 1


def test_a_fleet_whose_agents_report_no_requests_is_refused(tmp_path):
    from workstation.core.endpoints import Endpoint
    from workstation.fleet import Fleet

    fleet = Fleet(data_dir=tmp_path / "data", endpoints=[Endpoint("http://x", "k", "m")],
                  agent_factory=lambda setup: None, http=None)  # type: ignore[arg-type]
    assert fleet.request_observers is None
    with pytest.raises(ValueError, match="do not report their model requests"):
        TrafficRecorder("f").attach_fleet(fleet)


async def test_recorder_observes_chat_clients_and_reads_metrics():
    from workstation.engine.chat_client import ChatClient

    vllm = FakeVllm()
    engine = vllm.add(token_delay_s=0.001)
    async with vllm.client() as http:
        from workstation.core.endpoints import Endpoint

        ep = Endpoint(engine.base_url, "k", "m")
        recorder = TrafficRecorder("c", http=http, endpoint=ep)
        clients = [ChatClient(http, ep, session_id=f"s{i}") for i in range(3)]
        for c in clients:
            recorder.attach(c)
        await recorder.start()
        for c in clients:
            await c.complete([{"role": "user", "content": "x"}], max_tokens=5)
        await recorder.stop()
        assert all(recorder.observe not in c.observers for c in clients)
        await clients[0].complete([{"role": "user", "content": "x"}], max_tokens=2)  # after stop: not recorded
    shape = recorder.shape()
    assert shape.requests == 3 and shape.sessions == 3
    assert shape.completion_tokens.p50 == 5


async def test_a_client_records_each_requests_constraint_and_what_it_repeats_of_the_previous_one():
    """The guided protocol's requests: a view plus a hint, then the same view plus another ask
    (sharing the view), each held to a regex; the record keeps the regex's kind and size, and
    the prompt tokens the request repeats of its client's previous one."""
    import httpx
    import orjson

    from workstation.core.endpoints import Endpoint
    from workstation.engine.chat_client import ChatClient

    def chat(request: httpx.Request) -> httpx.Response:  # a prompt of a token per 4 bytes of messages
        body = orjson.loads(request.content)
        usage = {"prompt_tokens": len(orjson.dumps(body["messages"])) // 4, "completion_tokens": 1}
        events = [{"choices": [{"index": 0, "delta": {"content": "y"}}]}, {"choices": [], "usage": usage}]
        payload = (b"".join(b"data: " + orjson.dumps(e) + b"\n\n" for e in events) + b"data: [DONE]\n\n")

        async def stream():  # type: ignore[no-untyped-def]
            yield payload

        return httpx.Response(200, content=stream(), headers={"content-type": "text/event-stream"})

    records: list[RequestRecord] = []
    view = [{"role": "system", "content": "You are a coding agent. " * 40},
            {"role": "user", "content": "Fix the failing test in calc.py. " * 5}]
    async with httpx.AsyncClient(transport=httpx.MockTransport(chat)) as http:
        client = ChatClient(http, Endpoint("http://fake", "k", "m"), observers=[records.append], session_id="s")
        regex = "(<tool_call>a</tool_call>|<tool_call>b</tool_call>)"
        await client.complete([*view, {"role": "user", "content": "Next step: read a file."}], max_tokens=3,
                              extra={"structured_outputs": {"regex": regex}})
        await client.complete([*view, {"role": "assistant", "content": "a"},
                               {"role": "user", "content": "Now write the new code. " * 30}], max_tokens=3,
                              extra={"structured_outputs": {"regex": "```python\n[^`]*```"}, "n": 2})
        await client.complete(view[:1] + [{"role": "user", "content": "something else entirely"}], max_tokens=2)
    first, second, third = records
    assert (first.constraint, first.constraint_chars, first.shared_prefix_tokens) == ("regex", len(regex), None)
    assert second.constraint == "regex" and second.choices == 2 and third.constraint is None
    # the second repeats the view (most of the first's prompt, less than its own); the third only
    # the system prompt (most of its short prompt)
    assert 0.9 * len(orjson.dumps(view)) // 4 < second.shared_prefix_tokens < first.prompt_tokens
    system = len(orjson.dumps(view[:1])) // 4
    assert system <= third.shared_prefix_tokens <= system + 8 < third.prompt_tokens  # + the next role
    shape = shape_from_records("guided", records)
    assert shape.guided_fraction == pytest.approx(2 / 3) and shape.prefix_reuse.count == 2


def test_the_fleets_priming_tells_the_common_prefix():
    """The priming request's prompt is the shared system prompt (and a stub user turn), so the
    common prefix is known instead of guessed from the shortest first prompt."""
    from workstation.tuning.capture import PRIMING_OWN_TOKENS, estimate_common_prefix

    recorder = TrafficRecorder("f")
    recorder.source = "fleet"
    recorder.observe(rec(None, 0, 1400, 1))
    for i, sid in enumerate(("a", "b")):
        recorder.observe(rec(sid, 1 + i, 1600 + 100 * i, 20))
        recorder.observe(rec(sid, 5 + i, 1900, 20))
    assert len(recorder.priming) == 1 and len(recorder.records) == 4
    assert estimate_common_prefix(recorder) == 1400 - PRIMING_OWN_TOKENS
    recorder.priming.clear()  # without it: the shortest first prompt less an allowance
    assert estimate_common_prefix(recorder) == 1600 - 96
    recorder.common_prefix_tokens = estimate_common_prefix(recorder)
    assert recorder.shape().sessions == 2


def test_a_fleets_shape_carries_the_common_prefix_it_estimates():
    """``shape()`` of a fleet's recording estimates the prefix its sessions share (the headless
    capture and the benchmarks take it so); one given is kept; chat clients' share none."""
    from workstation.tuning.capture import PRIMING_OWN_TOKENS

    def recording(source: str, **kwargs) -> TrafficRecorder:  # type: ignore[no-untyped-def]
        recorder = TrafficRecorder("f", **kwargs)
        recorder.source = source
        recorder.observe(rec(None, 0, 1400, 1))
        for i, sid in enumerate(("a", "b")):
            recorder.observe(rec(sid, 1 + i, 1600 + 100 * i, 20))
        return recorder

    assert recording("fleet").shape().common_prefix_tokens == 1400 - PRIMING_OWN_TOKENS
    assert recording("fleet", common_prefix_tokens=500).shape().common_prefix_tokens == 500
    assert recording("chat-client").shape().common_prefix_tokens == 0


async def test_the_newest_shape_is_the_one_saved_last_for_the_docks_jobs_and_the_verbs(tmp_path):
    """Whatever the names: a shape captured by the verb (``fleet-…``) after one the dock
    captured (``live-…``) is the one the dock's bench replays and the verbs' ``latest``."""
    import os

    from workstation.commands.tuning_cmd import _shape_name
    from workstation.core.endpoints import Endpoint
    from workstation.tuning.live_jobs import LiveJobs

    store = TuningStore(tmp_path)
    older = store.save_shape(shape_from_records("live-4-20261202-040000", [rec("a", 0, 100, 10)]))
    os.utime(older, (1_000_000_000, 1_000_000_000))
    store.save_shape(shape_from_records("fleet-8-20261202-050000", [rec("a", 0, 100, 10)]))
    assert _shape_name(store, "latest") == _shape_name(store, None) == "fleet-8-20261202-050000"
    vllm = FakeVllm()
    engine = vllm.add(token_delay_s=0.001)
    said: list[str] = []
    async with vllm.client() as http:
        jobs = LiveJobs(http, endpoint=lambda: Endpoint(engine.base_url, "k", "m"), store=store,
                        fleets=None, bench_s=1.0, bench_concurrency=1)  # type: ignore[arg-type]
        await jobs.bench(said.append)
    assert "(shape fleet-8-20261202-050000)" in said[0], said[0]
