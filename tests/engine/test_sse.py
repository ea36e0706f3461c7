"""The raw-bytes SSE decoder, the payload reducer and the coalescer (pure)."""

import pytest

from workstation.engine.sse import (
    DONE,
    ChatDelta,
    Coalescer,
    EngineHTTPError,
    SseDecoder,
    TextRun,
    TextTemplate,
    Usage,
    reduce_payload,
    status_error,
)

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


VLLM_TOKEN = (b'{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,'
              b'"delta":{"content":"%s"},"logprobs":null,"finish_reason":null,"token_ids":null}]}')


def test_many_payloads_parse_in_one_call_unless_done_or_a_bad_one_is_among_them():
    from workstation.engine.sse import parse_payloads

    good = [VLLM_TOKEN % b"a", VLLM_TOKEN % b"b", b'{"choices":[],"usage":{"prompt_tokens":1}}']
    objs = parse_payloads(good)
    assert [o["choices"][0]["delta"]["content"] for o in objs[:2]] == ["a", "b"] and objs[2]["usage"]
    assert parse_payloads(good + [b"[DONE]"]) is None
    assert parse_payloads([good[0], b'{"choices":[{"delta":', good[1]]) is None
    assert parse_payloads([good[0], b'{"choices":[', b'{"delta":{}}]}']) is None  # joins into one object
    assert parse_payloads([good[0]]) is None  # one payload: nothing to gain


def test_only_a_chunk_of_nothing_but_text_of_choice_zero_takes_the_short_path():
    import orjson

    from workstation.engine.sse import plain_text

    assert plain_text(orjson.loads(VLLM_TOKEN % b"hi")) == "hi"
    for other in (
        b'{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}',
        b'{"choices":[{"index":0,"delta":{"content":""}}]}',
        b'{"choices":[{"index":1,"delta":{"content":"x"}}]}',
        b'{"choices":[{"index":0,"delta":{"content":"x"},"finish_reason":"stop"}]}',
        b'{"choices":[{"index":0,"delta":{"content":"x","reasoning_content":"r"}}]}',
        b'{"choices":[{"index":0,"delta":{"reasoning":"r"}}]}',
        b'{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0}]}}]}',
        b'{"choices":[{"index":0,"delta":{"content":"x"}}],"usage":{"prompt_tokens":1}}',
        b'{"choices":[{"index":0,"delta":{"content":"x"}},{"index":1,"delta":{"content":"y"}}]}',
        b'{"error":{"message":"boom"},"choices":[{"delta":{"content":"x"}}]}',
        b'[1]',
    ):
        assert plain_text(orjson.loads(other)) is None, other


@pytest.mark.parametrize("seed", range(20))
def test_folding_text_without_a_delta_is_the_same_as_adding_one(seed):
    import random

    rng = random.Random(seed)
    kinds = [ChatDelta(content="t"), ChatDelta(reasoning="r"), ChatDelta(tool_calls=[{"index": 0}]),
             ChatDelta(finish_reason="stop", events=0), ChatDelta(usage=Usage(1, 2), events=0),
             ChatDelta(content="c", index=1)]
    fast, slow = Coalescer(), Coalescer()
    for step in range(60):
        if rng.random() < 0.5:
            text = f"w{step}"
            fast.add_text(text)
            slow.add(ChatDelta(content=text))
        else:
            delta = rng.choice(kinds)
            fast.add(delta)
            slow.add(delta)
        if rng.random() < 0.1:
            assert fast.events == slow.events
            assert fast.take() == slow.take()
    assert fast.events == slow.events and fast.take() == slow.take()


def _units(objs):
    """Objects as the app takes them: runs of text-only chunks joined (text, chunks)."""
    from workstation.engine.sse import plain_text

    out = []
    for obj in objs:
        if isinstance(obj, TextRun):
            unit = ("text", obj.text, obj.events)
        elif isinstance(obj, dict) and plain_text(obj) is not None:
            unit = ("text", plain_text(obj), 1)
        else:
            out.append(obj)
            continue
        if out and isinstance(out[-1], tuple):
            out[-1] = ("text", out[-1][1] + unit[1], out[-1][2] + unit[2])
        else:
            out.append(unit)
    return out


@pytest.mark.parametrize("seed", range(12))
def test_parsing_whole_reads_at_once_gives_what_event_by_event_parsing_gives(seed):
    import random

    import orjson

    rng = random.Random(seed)
    pieces = [b"data: " + VLLM_TOKEN % b"w\\n" + b"\n\n", b"data: " + VLLM_TOKEN % b'say \\"data: {\\"' + b"\n\n",
              b"data: " + VLLM_TOKEN % b"[DONE] in text" + b"\n\n", b": keep-alive\n\n",
              b'data: {"choices":[],\r\ndata: "usage":{"prompt_tokens":3}}\r\n\r\n', b"data:{}\n\n"]
    stream = b"".join(rng.choice(pieces[:2] if rng.random() < 0.9 else pieces) for _ in range(80))
    stream += b"data: [DONE]\n\n"
    reference = []
    for payload in SseDecoder().feed(stream):
        reference.append(payload if payload == b"[DONE]" else orjson.loads(payload))
    decoder, got, fast = SseDecoder(), [], 0
    at = 0
    while at < len(stream):
        size = rng.choice([1, 7, 200, 1000, 5000])
        objs, payloads = decoder.feed_parsed(stream[at:at + size])
        at += size
        if objs is not None:
            fast += 1
            got += objs
        got += [p if p == b"[DONE]" else orjson.loads(p) for p in payloads]
    assert _units(got) == _units(reference) and decoder.pending == 0
    assert fast > 0  # the one-call path was taken


def test_a_bad_payload_among_good_ones_is_left_to_event_by_event_parsing():
    decoder = SseDecoder()
    raw = b"data: " + VLLM_TOKEN % b"a" + b"\n\ndata: {\"choices\":[\n\ndata: " + VLLM_TOKEN % b"b" + b"\n\n"
    objs, payloads = decoder.feed_parsed(raw)
    assert objs is None and len(payloads) == 3 and payloads[1] == b'{"choices":['


def _event(payload: bytes) -> bytes:
    return b"data: " + payload + b"\n\n"


def test_a_template_is_learnt_only_from_a_text_chunk_whose_content_is_what_it_says():
    assert TextTemplate.learn(_event(VLLM_TOKEN % b"hi")) is not None
    for other in (b'{"choices":[{"index":0,"delta":{"content":"x"},"finish_reason":"stop"}]}',
                  b'{"choices":[{"index":0,"delta":{"content":"x","tool_calls":[]}}]}',
                  b'{"choices":[{"index":1,"delta":{"content":"x"}}]}',
                  # the content named first is not the one a parser keeps
                  b'{"choices":[{"index":0,"delta":{"content":"x"}}],"choices":[{"delta":{"content":"y"}}]}',
                  b'{"choices":[{"index":0,"delta":{"content":"x"}}]}junk'):
        assert TextTemplate.learn(_event(other)) is None, other


def test_a_template_cuts_escapes_right_and_lets_anything_else_through_whole():
    import orjson

    template = TextTemplate.learn(_event(VLLM_TOKEN % b'a\\"b'))  # content: a\"b  (escapes)
    assert template is not None
    texts = ['q"uote\\', "\\", "line\nbreak", "é ✓ \u2028", '"},"logprobs":null']
    read = b"".join(_event(VLLM_TOKEN.replace(b'"%s"', orjson.dumps(t))) for t in texts)
    assert template.match(read, read.count(b"\n")) == TextRun("".join(texts), len(texts))
    changed = read + _event(VLLM_TOKEN.replace(b"chatcmpl-1", b"chatcmpl-2") % b"z")
    assert template.match(changed, changed.count(b"\n")) is None
    finish = read + _event(b'{"choices":[{"index":0,"delta":{"content":"x"},"finish_reason":"stop"}]}')
    assert template.match(finish, finish.count(b"\n")) is None
    empty = read + _event(VLLM_TOKEN % b"")
    assert template.match(empty, empty.count(b"\n")) is None  # no text: not a token


def test_once_learnt_a_stream_s_text_reads_come_as_one_run_each():
    decoder = SseDecoder()
    reads = [b"".join(_event(VLLM_TOKEN % t) for t in (b"a", b"b", b"c")) for _ in range(3)]
    first, second, third = (decoder.feed_parsed(r) for r in reads)
    assert len(first[0]) == 3 and isinstance(first[0][0], dict)  # parsed whole, shape learnt
    assert second == ([TextRun("abc", 3)], []) and third == second
    finish = _event(b'{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}') + b"data: [DONE]\n\n"
    objs, payloads = decoder.feed_parsed(reads[0] + finish)
    assert objs is None and len(payloads) == 5 and payloads[-1] == b"[DONE]"


@pytest.mark.parametrize(("body", "message"), [
    (b'{"error": {"message": "prompt too long", "type": "BadRequestError"}}', "prompt too long"),
    (b'{"error": "model not loaded"}', "model not loaded"),
    (b'{"object": "error", "message": "older vLLM", "code": 400}', "older vLLM"),
    (b'{"detail": "Not Found"}', "Not Found"),
    (b'[{"message": "a list"}]', '[{"message": "a list"}]'),
    (b'"just a string"', "just a string"),
    (b"42", "42"),
    (b"null", "null"),
    (b'{"error": null}', '{"error": null}'),
    (b'{"error": {"message": 7}}', '{"error": {"message": 7}}'),
    (b"<html>Bad Gateway</html>", "<html>Bad Gateway</html>"),
    (b"", "(no body)"),
    (b"  \n", "(no body)"),
])
def test_an_error_body_of_any_json_or_none_gives_the_typed_error(body: bytes, message: str) -> None:
    err = status_error(502, body)
    assert isinstance(err, EngineHTTPError)
    assert str(err) == f"engine answered HTTP 502: {message}"
    assert err.status == 502 and err.retryable
    assert not status_error(400, body).retryable


def test_a_long_error_body_is_cut() -> None:
    err = status_error(500, b"[" + b"1," * 1000 + b"1]")
    assert len(str(err)) < 400
