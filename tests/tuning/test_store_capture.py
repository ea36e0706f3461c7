import json

import pytest

from workstation.core import agent_events as ev
from workstation.core.errors import UserError
from workstation.core.fleet_events import SessionAgentEvent
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


def test_recorder_turns_fleet_events_into_requests():
    recorder = TrafficRecorder("f")
    recorder.source = "fleet"
    for sid, prompt in (("s1", 900), ("s2", 1000)):
        recorder.on_agent_event(SessionAgentEvent(sid, 1, ev.TurnStarted(sid, 1)))
        recorder.on_agent_event(SessionAgentEvent(sid, 2, ev.TextStreamed(sid, 1, "hi")))
        recorder.on_agent_event(SessionAgentEvent(sid, 3, ev.UsageReported(sid, 1, prompt, 40, 512, prompt + 40, 8192)))
        recorder.on_agent_event(SessionAgentEvent(sid, 4, ev.TurnFinished(sid, 1, "tool_calls", "", 1)))
    recorder.on_agent_event(SessionAgentEvent("s3", 1, ev.TurnStarted("s3", 1)))
    recorder.on_agent_event(SessionAgentEvent("s3", 2, ev.TurnFinished("s3", 1, "error", "", 0)))
    assert [r.prompt_tokens for r in recorder.records] == [900, 1000, 0]
    assert recorder.records[0].ttft_s is not None and not recorder.records[2].ok
    shape = recorder.shape()
    assert shape.requests == 2 and shape.failed == 1 and shape.source == "fleet"
    assert shape.prefix_cache_hit_rate == pytest.approx(1024 / 1900)


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
