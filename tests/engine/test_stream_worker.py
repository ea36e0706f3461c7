"""Chat streams read on the stream worker's thread, against a real local server.

Both byte sources must behave alike: every test runs through ``ChatClient`` with the worker
and with the plain ``httpx`` client, and the faults come from the scripted server."""

import asyncio
import contextlib
import threading

import pytest

from tests.helpers.scripted_server import Fault, Reply, ScriptedServer, ToolCall
from workstation.engine.chat_client import ChatClient, EngineHTTPError, EngineUnreachable
from workstation.engine.http import make_http_client
from workstation.engine.stream_worker import StreamWorker
from workstation.agent.toolcalls import ToolCallAccumulator

MESSAGES = [{"role": "user", "content": "go"}]


@pytest.fixture(params=["worker", "httpx"])
def client_for(request):
    """``async with client_for() as make: make(endpoint, ...)`` — a ChatClient on either path
    (made on the test's own loop)."""

    @contextlib.asynccontextmanager
    async def opened():
        worker = StreamWorker(batch_s=0.01, read_timeout_s=1.5) if request.param == "worker" else None
        try:
            async with make_http_client(read_timeout_s=1.5) as http:
                yield lambda endpoint, **kw: ChatClient(http, endpoint, streams=worker, **kw)
        finally:
            if worker is not None:
                worker.close()

    return opened


async def _collect(client):
    text, calls, finish, usage, events = [], [], None, None, 0
    async for d in client.stream_chat(MESSAGES, max_tokens=64):
        text.append(d.content)
        calls += d.tool_calls
        finish = d.finish_reason or finish
        usage = d.usage or usage
        events += d.events
    return "".join(text), calls, finish, usage, events


async def test_text_tool_calls_finish_and_usage_arrive_whole_and_in_order(client_for):
    reply = Reply(text="Reading the test first. " * 20, tool_calls=[ToolCall("read_file", {"path": "a.py"})],
                  chunk_chars=3)
    records = []
    async with client_for() as make, ScriptedServer([reply]) as server:
        text, calls, finish, usage, events = await _collect(make(server.endpoint, observers=[records.append]))
    assert text == reply.text
    acc = ToolCallAccumulator()
    acc.add(calls)
    assert [(c.name, c.arguments) for c in acc.finish()] == [("read_file", '{"path":"a.py"}')]
    assert finish == "tool_calls" and usage is not None and usage.completion_tokens > 0
    assert events >= len(reply.text) // 3
    assert len(records) == 1 and records[0].ok and records[0].ttft_s is not None


async def test_a_request_for_several_choices_is_recorded_with_its_n(client_for):
    """The guided agent asks for ``n`` drafts in one request: its record says so, on both paths,
    so a captured shape replays n sequences instead of one of their summed length."""
    records = []
    async with client_for() as make, ScriptedServer([Reply(text="a"), Reply(text="b")]) as server:
        client = make(server.endpoint, observers=[records.append])
        async for _ in client.stream_chat(MESSAGES, max_tokens=8, extra={"n": 3}):
            pass
        async for _ in client.stream_chat(MESSAGES, max_tokens=8):
            pass
    assert [r.choices for r in records] == [3, 1]
    assert all(r.ok for r in records)


@pytest.mark.parametrize("fault, error, words", [
    (Fault.http(500, "scripted engine crash"), EngineHTTPError, "HTTP 500: scripted engine crash"),
    (Fault.http(429, "too many"), EngineHTTPError, "HTTP 429"),
    (Fault.wrong_content_type(), EngineHTTPError, "did not stream"),
    (Fault.truncated_json(after_chunks=2), EngineHTTPError, "malformed stream chunk"),
    (Fault.disconnect(after_chunks=2), EngineUnreachable, "closed the stream"),
    (Fault.reset(after_chunks=2), EngineUnreachable, "closed the stream"),
    (Fault.stall(seconds=5.0, after_chunks=2), EngineUnreachable, "read timeout"),
])
async def test_faults_are_the_same_typed_errors_on_both_paths(client_for, fault, error, words):
    records = []
    async with client_for() as make, ScriptedServer([fault]) as server:
        with pytest.raises(error, match=words) as raised:
            await _collect(make(server.endpoint, observers=[records.append]))
    if isinstance(raised.value, EngineHTTPError) and "HTTP" in words:
        assert raised.value.retryable == (fault.status in (429, 500))
    assert len(records) == 1 and not records[0].ok


async def test_nothing_listening_is_unreachable(client_for):
    from workstation.core.endpoints import Endpoint

    async with client_for() as make:
        with pytest.raises(EngineUnreachable, match="cannot reach"):
            await _collect(make(Endpoint(base_url="http://127.0.0.1:9", api_key="", model="m")))


async def test_connections_are_kept_alive_and_reused():
    worker = StreamWorker(batch_s=0.01)
    try:
        async with make_http_client() as http, ScriptedServer([Reply(text="one"), Reply(text="two"),
                                                                Reply(text="three")]) as server:
            client = ChatClient(http, server.endpoint, streams=worker)
            texts = [(await _collect(client))[0] for _ in range(3)]
            assert texts == ["one", "two", "three"]
            assert server.connections == 1
    finally:
        worker.close()


async def test_closing_the_consumer_aborts_the_stream_on_the_server():
    worker = StreamWorker(batch_s=0.01)
    try:
        async with make_http_client() as http, ScriptedServer([Reply(text="x" * 4000, chunk_chars=1, delay_s=0.002),
                                                                Reply(text="next")]) as server:
            client = ChatClient(http, server.endpoint, streams=worker)
            got = 0
            async for d in client.stream_chat(MESSAGES):
                got += len(d.content)
                if got > 50:
                    break
            for _ in range(100):
                if worker.streams_open == 0:
                    break
                await asyncio.sleep(0.02)
            assert worker.streams_open == 0
            assert (await _collect(client))[0] == "next"  # the worker goes on serving
            assert server.connections == 2  # the aborted connection was not reused
    finally:
        worker.close()


async def test_a_slow_consumer_pauses_its_socket_and_loses_nothing(monkeypatch):
    from workstation.engine import stream_worker

    monkeypatch.setattr(stream_worker, "MAX_PENDING_BATCHES", 4)
    worker = StreamWorker(batch_s=0.002)
    paused = []
    original = stream_worker._Connection.pause

    def pause(self):  # type: ignore[no-untyped-def]
        paused.append(threading.current_thread().name)
        original(self)

    monkeypatch.setattr(stream_worker._Connection, "pause", pause)
    text = "".join(f"{i:05d}" for i in range(3000))
    try:
        async with make_http_client() as http, ScriptedServer([Reply(text=text, chunk_chars=5, delay_s=0.0005)]) as server:
            got = []
            async for d in ChatClient(http, server.endpoint, streams=worker).stream_chat(MESSAGES):
                got.append(d.content)
                await asyncio.sleep(0.02)  # a consumer far slower than the stream
            assert "".join(got) == text
            assert paused and all(name == "ws-streams" for name in paused)
    finally:
        worker.close()


async def test_hand_off_is_batched_the_caller_wakes_per_batch_not_per_token():
    worker = StreamWorker(batch_s=0.05)
    try:
        async with make_http_client() as http, ScriptedServer([Reply(text="t" * 2000, chunk_chars=1,
                                                                     delay_s=0.0002)]) as server:
            deltas = events = 0
            async for d in ChatClient(http, server.endpoint, streams=worker).stream_chat(MESSAGES):
                deltas += 1
                events += d.events
            assert events >= 2000 and deltas < events / 10
    finally:
        worker.close()


async def test_the_worker_refuses_after_close_and_close_twice_is_harmless():
    worker = StreamWorker()
    worker.close()
    worker.close()
    with pytest.raises(RuntimeError, match="closed"):
        worker.open("http://127.0.0.1:9/v1/chat/completions", b"{}", {})


async def test_a_bad_chunk_fails_the_stream_after_every_event_before_it(client_for):
    # "partial answer " in pieces of 4: role, "part", "ial ", then a chunk cut mid-JSON — all
    # in one read on the worker, where the read's events are parsed together
    async with client_for() as make, ScriptedServer([Fault.truncated_json(after_chunks=3)]) as server:
        got = []
        with pytest.raises(EngineHTTPError, match="malformed stream chunk"):
            async for d in make(server.endpoint).stream_chat(MESSAGES):
                got.append(d.content)
    assert "".join(got) == "partial "


async def test_reads_are_paced_many_events_per_read_and_every_one_arrives_in_order(monkeypatch):
    from workstation.engine import stream_worker

    reads = []
    original = stream_worker._Stream.on_body

    def on_body(self, body):  # type: ignore[no-untyped-def]
        reads.append(len(body))
        original(self, body)

    monkeypatch.setattr(stream_worker._Stream, "on_body", on_body)
    text = "".join(f"{i:04d}" for i in range(2000))
    worker = StreamWorker(batch_s=0.05)
    try:
        async with make_http_client() as http, ScriptedServer([Reply(text=text, chunk_chars=4,
                                                                     delay_s=0.0002)]) as server:
            got, events = [], 0
            async for d in ChatClient(http, server.endpoint, streams=worker).stream_chat(MESSAGES):
                got.append(d.content)
                events += d.events
            assert "".join(got) == text and events == 2000
            # one read per tick, not one per event written (2000 writes, each drained)
            assert len(reads) < events / 10, len(reads)
    finally:
        worker.close()


async def test_the_first_token_is_read_as_it_comes_so_time_to_first_token_stays_exact():
    worker = StreamWorker(batch_s=0.6)
    records = []
    try:
        async with make_http_client() as http, ScriptedServer([Reply(text="abcdef", chunk_chars=1,
                                                                     delay_s=0.05)]) as server:
            client = ChatClient(http, server.endpoint, streams=worker, observers=[records.append])
            assert (await _collect(client))[0] == "abcdef"
        # the role chunk, then 50 ms to the first token: paced from the role chunk on, it
        # would be read at the next tick, 600 ms later
        assert records[0].ttft_s is not None and records[0].ttft_s < 0.4, records[0].ttft_s
    finally:
        worker.close()


async def test_streams_read_into_one_shared_buffer_keep_their_own_text():
    texts = ["".join(f"{k}{i:04d} " for i in range(400)) for k in "abcdefgh"]
    worker = StreamWorker(batch_s=0.02)
    try:
        async with make_http_client() as http, ScriptedServer([Reply(text=t, chunk_chars=3, delay_s=0.0003)
                                                                for t in texts]) as server:
            client = ChatClient(http, server.endpoint, streams=worker)
            got = await asyncio.gather(*(_collect(client) for _ in texts))
        assert sorted(g[0] for g in got) == sorted(texts)
    finally:
        worker.close()


async def test_open_requests_count_a_stream_while_it_runs_and_drop_it_however_it_ends(client_for):
    """What a safe switch drains: a request is open from its send to its end, success or fault,
    on both paths."""
    reply = Reply(text="slow " * 30, chunk_chars=5, delay_s=0.01)
    async with client_for() as make, ScriptedServer([reply, Fault.disconnect(after_chunks=2)]) as server:
        client = make(server.endpoint)
        url = server.endpoint.base_url
        seen = []
        async for _ in client.stream_chat(MESSAGES, max_tokens=64):
            seen.append(client.open_requests.on(url))
        assert seen and set(seen) == {1} and client.open_requests.on(url) == 0
        with pytest.raises(EngineUnreachable):
            await _collect(client)
        assert client.open_requests.on(url) == 0


async def test_token_observers_are_told_every_deltas_generated_tokens_of_a_session(client_for):
    """What a fleet's panes count: each delta's ``events`` of every request of a session,
    shown or not, on both paths; a client without a session reports nothing."""
    reply = Reply(text="Reading the test first. " * 8, chunk_chars=3)
    async with client_for() as make, ScriptedServer([reply, reply]) as server:
        told = []
        client = make(server.endpoint, session_id="s1")
        client.token_observers = [lambda sid, n: told.append((sid, n))]
        _text, _calls, _finish, _usage, events = await _collect(client)
        assert events > 0 and sum(n for _sid, n in told) == events and {sid for sid, _n in told} == {"s1"}
        anonymous = make(server.endpoint)
        anonymous.token_observers = client.token_observers
        before = len(told)
        await _collect(anonymous)
        assert len(told) == before


def test_the_agent_factorys_clients_share_its_token_observers():
    from workstation.core.endpoints import Endpoint
    from workstation.fleet.agent_bridge import real_agent_factory

    factory = real_agent_factory(None)  # type: ignore[arg-type]
    ep = Endpoint("http://127.0.0.1:9", "k", "m")
    a, b = factory._client(ep, None, "s1"), factory._client(ep, None, "s2")
    assert a.token_observers is b.token_observers is factory.token_observers
    assert a.open_requests is b.open_requests is factory.open_requests


async def test_a_cancelled_request_is_closed_and_recorded_on_both_paths(client_for):
    """A turn cancelled mid-stream (a stopped session, a timeout) leaves nothing open for a
    safe switch to wait on, and its record says it did not finish."""
    records = []
    async with client_for() as make, ScriptedServer([Reply(text="slow " * 200, chunk_chars=5,
                                                           delay_s=0.005)]) as server:
        client = make(server.endpoint, observers=[records.append])
        streamed = asyncio.Event()

        async def consume():
            async for delta in client.stream_chat(MESSAGES):
                if delta.content:
                    streamed.set()

        task = asyncio.create_task(consume())
        await asyncio.wait_for(streamed.wait(), 5)
        assert client.open_requests.on(server.endpoint.base_url) == 1
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert client.open_requests.on(server.endpoint.base_url) == 0
    assert [(r.ok, r.error) for r in records] == [(False, "CancelledError")]


async def test_closing_the_stream_early_ends_the_request_at_once_on_both_paths(client_for):
    """``aclose()`` on the deltas (what ``contextlib.aclosing`` does for a consumer that stops
    early) ends the request there and then: not open any more, its record out, the worker's
    stream dropped. The worker path had left its record and its abort to the inner generators'
    collection, a loop pass or more later."""
    records = []
    async with client_for() as make, ScriptedServer([Reply(text="slow " * 200, chunk_chars=5,
                                                           delay_s=0.005)]) as server:
        client = make(server.endpoint, observers=[records.append])
        stream = client.stream_chat(MESSAGES)
        async for delta in stream:
            if delta.content:
                break
        await stream.aclose()
        assert client.open_requests.on(server.endpoint.base_url) == 0
        assert [(r.ok, r.error) for r in records] == [(False, "GeneratorExit")]
        if client.streams is not None:
            for _ in range(100):  # the abort runs on the worker's thread
                if client.streams.streams_open == 0:
                    break
                await asyncio.sleep(0.01)
            assert client.streams.streams_open == 0
