"""A turn streamed in coalesced deltas: the events carry how many tokens each piece holds."""

import pytest

from workstation.agent.turn import _joined, stream_turn
from workstation.core import agent_events as ev
from workstation.core.agent_events import ToolProtocol
from workstation.engine.sse import ChatDelta, Usage


class _Client:
    def __init__(self, deltas):
        self.deltas = deltas

    async def stream_chat(self, *_a, **_k):
        for d in self.deltas:
            yield d


async def test_coalesced_text_and_tool_calls_keep_their_token_counts():
    deltas = [
        ChatDelta(content="Reading the file first.", events=6),
        ChatDelta(tool_calls=[{"index": 0, "id": "c1", "type": "function", "function": {"name": "read_file", "arguments": ""}},
                              {"index": 0, "function": {"arguments": '{"path":'}},
                              {"index": 0, "function": {"arguments": '"a.py"}'}}],
                  finish_reason="tool_calls", usage=Usage(100, 9), events=3),
    ]
    events = []
    result = await stream_turn(_Client(deltas), [], ToolProtocol.NATIVE, session_id="s", turn=1, max_tokens=64,
                               temperature=0.0, emit=events.append)
    text = [e for e in events if isinstance(e, ev.TextStreamed)]
    calls = [e for e in events if isinstance(e, ev.ToolCallStreamed)]
    assert [(e.text, e.tokens) for e in text] == [("Reading the file first.", 6)]
    assert [(e.name, e.arguments_delta, e.tokens) for e in calls] == [("read_file", '{"path":"a.py"}', 3)]
    assert result.content == "Reading the file first." and result.usage == Usage(100, 9)
    assert [(c.name, c.arguments) for c in result.reply.calls] == [("read_file", '{"path":"a.py"}')]


def test_pieces_of_one_call_are_joined_and_other_calls_stay_apart():
    pieces = [(0, "a", "x"), (0, "a", "y"), (1, "b", "z"), (0, "a", "w")]
    assert _joined(pieces) == [(0, "a", "xy", 2), (1, "b", "z", 1), (0, "a", "w", 1)]


async def test_a_turn_whose_consumer_fails_closes_its_request_at_once(http):
    """An emit that raises mid-stream ends the request there and then: the open count (what
    the safe switch's drain waits on) is 0 while the error is still held, without gc."""
    from tests.helpers.scripted_server import Reply, ScriptedServer
    from workstation.engine.chat_client import ChatClient

    def emit(event):
        if isinstance(event, ev.TextStreamed):
            raise RuntimeError("the pane went away")

    async with ScriptedServer([Reply(text="one two three four five six")]) as server:
        client = ChatClient(http, server.endpoint)
        with pytest.raises(RuntimeError) as failed:  # holds the traceback, and so the turn's frame
            await stream_turn(client, [{"role": "user", "content": "hi"}], ToolProtocol.NATIVE,
                              session_id="s", turn=1, max_tokens=64, temperature=0.0, emit=emit)
        assert failed.value.args == ("the pane went away",)
        assert client.open_requests.on(server.endpoint.base_url) == 0
