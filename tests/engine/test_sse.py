"""The raw-bytes SSE decoder, the payload reducer and the coalescer (pure)."""

import pytest

from workstation.engine.sse import DONE, ChatDelta, Coalescer, EngineHTTPError, SseDecoder, Usage, reduce_payload

EVENTS = [b'{"choices":[{"delta":{"content":"a"}}]}', b'{"choices":[{"delta":{"content":"b"}}]}', b"[DONE]"]
STREAM = b"".join(b"data: " + e + b"\n\n" for e in EVENTS)


@pytest.mark.parametrize("size", [1, 2, 3, 7, 64, len(STREAM)])
def test_events_split_anywhere_come_out_whole_and_in_order(size):
    decoder = SseDecoder()
    out = []
    for i in range(0, len(STREAM), size):
        out += decoder.feed(STREAM[i:i + size])
    assert out == EVENTS and decoder.pending == 0


def test_crlf_comments_other_fields_and_multi_line_data():
    decoder = SseDecoder()
    raw = b": keep-alive\r\n\r\nevent: x\r\ndata: {\"a\":\r\ndata: 1}\r\n\r\nid: 3\r\n\r\ndata:[DONE]\r"
    assert decoder.feed(raw) == [b'{"a":\n1}']
    assert decoder.feed(b"\n\r\n") == [b"[DONE]"]


def test_payloads_reduce_to_what_the_app_uses():
    d = reduce_payload(b'{"choices":[{"delta":{"content":"hi","reasoning_content":"r"},"finish_reason":null}]}')
    assert (d.content, d.reasoning, d.finish_reason, d.events) == ("hi", "r", None, 1)
    d = reduce_payload(b'{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":7,'
                       b'"prompt_tokens_details":{"cached_tokens":4}}}')
    assert d.usage == Usage(5, 7, 4)
    assert reduce_payload(b"[DONE]") is DONE
    for bad in (b'{"choices":[{"delta":', b"[1,2]", b'{"error":{"message":"boom"}}'):
        with pytest.raises(EngineHTTPError):
            reduce_payload(bad)


def test_coalescing_folds_runs_of_one_kind_and_keeps_the_order():
    c = Coalescer()
    c.add(ChatDelta())  # the role-only first chunk
    for piece in ("Let ", "me ", "read."):
        c.add(ChatDelta(content=piece))
    c.add(ChatDelta(tool_calls=[{"index": 0, "id": "c1", "function": {"name": "read_file", "arguments": ""}}]))
    c.add(ChatDelta(tool_calls=[{"index": 0, "function": {"arguments": '{"path":'}}]))
    c.add(ChatDelta(tool_calls=[{"index": 0, "function": {"arguments": '"a.py"}'}}]))
    c.add(ChatDelta(finish_reason="tool_calls"))
    c.add(ChatDelta(usage=Usage(10, 9)))
    assert c.events == 9
    out = c.take()
    assert [d.content for d in out] == ["Let me read.", ""]
    assert "".join(t["function"]["arguments"] for t in out[1].tool_calls) == '{"path":"a.py"}'
    assert out[1].finish_reason == "tool_calls" and out[1].usage == Usage(10, 9)
    assert [d.events for d in out] == [4, 5]
    assert not c and c.take() == []


def test_text_after_a_tool_call_starts_a_new_delta():
    c = Coalescer()
    c.add(ChatDelta(tool_calls=[{"index": 0}]))
    c.add(ChatDelta(content="after"))
    c.add(ChatDelta(content=" it"))
    out = c.take()
    assert len(out) == 2 and out[1].content == "after it"


def test_choices_of_one_request_keep_their_index_and_never_fold_together():
    # n > 1 (the guided protocol's drafts): vLLM interleaves the choices' pieces
    raw = [b'{"choices":[{"index":0,"delta":{"content":"a"}}]}', b'{"choices":[{"index":1,"delta":{"content":"x"}}]}',
           b'{"choices":[{"index":1,"delta":{"content":"y"}}]}', b'{"choices":[{"index":0,"delta":{"content":"b"}}]}']
    c = Coalescer()
    for payload in raw:
        c.add(reduce_payload(payload))
    texts: dict[int, str] = {}
    for d in c.take():
        texts[d.index] = texts.get(d.index, "") + d.content
    assert texts == {0: "ab", 1: "xy"}
