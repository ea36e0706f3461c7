import httpx
import pytest

from workstation.core.endpoints import Endpoint
from workstation.engine.chat_client import ChatClient, EngineHTTPError, EngineUnreachable, parse_chunk
from workstation.engine.http import make_http_client


def test_parse_chunk_reads_content_tool_calls_finish_and_usage():
    d = parse_chunk('{"choices":[{"delta":{"content":"hi"},"finish_reason":null}]}')
    assert d.content == "hi" and d.finish_reason is None
    d = parse_chunk('{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{"}}]},'
                    '"finish_reason":"tool_calls"}]}')
    assert d.tool_calls[0]["function"]["arguments"] == "{" and d.finish_reason == "tool_calls"
    d = parse_chunk('{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":7,'
                    '"prompt_tokens_details":{"cached_tokens":4}}}')
    assert (d.usage.prompt_tokens, d.usage.completion_tokens, d.usage.cached_tokens) == (5, 7, 4)


@pytest.mark.parametrize("payload", ['{"choices":[{"delta":', "[1,2]", '{"error":{"message":"boom"}}'])
def test_parse_chunk_refuses_malformed_or_error_chunks(payload):
    with pytest.raises(EngineHTTPError):
        parse_chunk(payload)


@pytest.mark.parametrize("exc, words", [
    (httpx.ConnectTimeout("timed out"), "cannot reach"),
    (httpx.ReadError("reset"), "closed the stream"),
    (httpx.WriteError("broken pipe"), "closed the stream"),
    (httpx.PoolTimeout("no connection came free"), "timed out"),
])
async def test_every_httpx_transport_error_is_a_typed_error_and_ends_the_request(exc, words):
    """What the agent retries (``EngineUnreachable``), whatever ``httpx`` raised: a reset
    connection is a ``ReadError`` there, a slow connect a ``ConnectTimeout`` — neither of them
    the ``ConnectError``, ``ReadTimeout`` or ``RemoteProtocolError`` the client once caught alone."""
    def fail(request: httpx.Request) -> httpx.Response:
        raise exc

    records = []
    endpoint = Endpoint("http://127.0.0.1:9", "", "m")
    async with httpx.AsyncClient(transport=httpx.MockTransport(fail)) as http:
        client = ChatClient(http, endpoint, observers=[records.append])
        with pytest.raises(EngineUnreachable, match=words):
            async for _ in client.stream_chat([{"role": "user", "content": "go"}]):
                pass
    assert client.open_requests.on(endpoint.base_url) == 0
    assert len(records) == 1 and not records[0].ok and words in (records[0].error or "")


@pytest.mark.engine
async def test_observers_get_one_record_per_request(smollm2_engine):
    records = []
    async with make_http_client() as http:
        client = ChatClient(http, smollm2_engine, observers=[records.append], session_id="s1")
        await client.complete([{"role": "user", "content": "Say hello."}], max_tokens=12, temperature=0.0)
    assert len(records) == 1
    rec = records[0]
    assert rec.ok and rec.session_id == "s1" and rec.completion_tokens > 0 and rec.prompt_tokens > 0
    assert rec.ttft_s is not None and rec.ttft_s <= rec.duration_s
