"""What a guided turn shows says how many tokens the engine generated for it: the streamed
draft its deltas' tokens, the notes, blank lines and drafts replayed from the session's
memory none (a pane counts shown text where the chat clients report no tokens)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from tests.agent.guided.bench import bench
from workstation.agent.config import AgentConfig
from workstation.agent.guided.drafts import GuidedMemory
from workstation.agent.guided.turn import GuidedTurn
from workstation.core import agent_events as ev


class ThreeTokenDeltas(bench.ScriptedDrafts):  # type: ignore[name-defined,misc]
    """The benchmark's scripted drafts, each delta holding three tokens."""

    async def stream_chat(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        async for delta in super().stream_chat(*args, **kwargs):
            yield dataclasses.replace(delta, events=3) if delta.content else delta


async def test_shown_text_counts_only_the_tokens_generated_for_it(tmp_path: Path) -> None:
    source = bench.pick_sources()[0]
    (tmp_path / source.path).parent.mkdir(parents=True)
    (tmp_path / source.path).write_text(source.text, encoding="utf-8")
    task, draws = bench.drafts_of(source, "rewrite", 1)
    memory = GuidedMemory()
    shown: list[ev.TextStreamed] = []

    def emit(event: ev.AgentEvent) -> None:
        if isinstance(event, ev.TextStreamed):
            shown.append(event)

    async def turn(client: Any, number: int) -> dict[str, Any]:
        guided = GuidedTurn(client, bench._history(source, task), root=tmp_path, task=task, config=AgentConfig(),
                            session_id="s", turn=number, max_tokens=2048, emit=emit, memory=memory)
        result = await guided.run()
        return json.loads(result.reply.calls[0].arguments)

    first = await turn(ThreeTokenDeltas(draws), 1)
    assert "    _calls_14 = " in first["diff"]
    # the greedy draft, then the first of each later draw, streamed as drawn, 3 tokens a delta
    assert "".join(e.text for e in shown if e.tokens == 3) == draws[0][0] + draws[1][0] + draws[2][0]
    assert [e.text for e in shown if e.tokens == 0] == ["\n", "\n", "\n[19 drafts, 3 usable; trying the best first]"]
    assert {e.tokens for e in shown} == {0, 3}

    shown.clear()  # the tests failed: the next turn replays the next usable draft of the same draw
    second = await turn(ThreeTokenDeltas([["never asked"]]), 2)
    assert "    _calls_16 = " in second["diff"] or "    _calls_19 = " in second["diff"]
    assert [(e.text.startswith("```python"), e.tokens) for e in shown] == [(True, 0)]
