"""A scripted stand-in for the coding agent, for deterministic fleet tests.

It speaks the real agent's event vocabulary (``workstation.core.agent_events``) in the real
order, holds the fleet's generation slot for each model turn, writes real files in its
root, and resumes from the history it is given exactly as the fleet expects of the agent:
a finished step is never repeated, a tool call without a result is reported interrupted.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from workstation.core import agent_events as ev
from workstation.core.admission import SlotRefused
from workstation.core.approvals import ToolCategory
from workstation.fleet.agent_bridge import AgentSetup


@dataclass
class Script:
    steps: int = 3
    """Tool calls before attempt_completion."""
    turn_s: float = 0.0
    """How long a model turn holds the generation slot."""
    tool_s: float = 0.0
    tokens_per_turn: int = 5
    engine_ok: Callable[[AgentSetup], bool] = lambda setup: True
    ask_approval_at: int | None = None
    question_at: int | None = None
    inside: list[int] = field(default_factory=lambda: [0])
    peak: list[int] = field(default_factory=lambda: [0])
    runs: list[str] = field(default_factory=list)
    urls: list[str] = field(default_factory=list)


class EngineDown(Exception):
    pass


class FakeAgent:
    def __init__(self, setup: AgentSetup, script: Script) -> None:
        self.s = setup
        self.script = script
        self.messages: list[dict[str, Any]] = list(setup.history)
        self._stopped = False

    def _emit(self, event: object) -> None:
        self.s.on_event(event)

    def _append(self, msg: dict[str, Any]) -> None:
        self._emit(ev.MessageAppended(self.s.session_id, len(self.messages), msg["role"], json.dumps(msg)))
        self.messages.append(msg)

    def stop(self) -> None:
        self._stopped = True

    async def run(self) -> ev.RunFinished:
        sid = self.s.session_id
        self.script.runs.append(sid)
        self.script.urls.append(self.s.endpoint.base_url)
        if not self.messages:
            self._append({"role": "system", "content": "sys"})
            self._append({"role": "user", "content": self.s.task})
        if self.s.user_message:
            self._append({"role": "user", "content": self.s.user_message})
        last = self.messages[-1]
        if last["role"] == "assistant" and last.get("tool_calls"):  # tool started, no result
            call = last["tool_calls"][0]
            self._emit(ev.ToolCallFinished(sid, call["id"], "write_to_file", "interrupted", "interrupted"))
            self._append({"role": "tool", "tool_call_id": call["id"], "content": "interrupted"})
        done_steps = sum(1 for m in self.messages if m["role"] == "tool")
        for step in range(done_steps, self.script.steps + 1):
            if self._stopped:
                return self._finish(ev.RunStatus.STOPPED, "stopped")
            if self.script.question_at == step and not self.s.user_message:
                self._emit(ev.QuestionAsked(sid, f"q{step}", "which file?"))
                return self._finish(ev.RunStatus.NEEDS_INPUT, "which file?")
            final = step == self.script.steps
            try:
                await self._turn(step, final)
            except SlotRefused as exc:  # as the real agent: the turn never started
                return self._finish(exc.status, str(exc))
            if final:
                self._emit(ev.TaskCompleted(sid, "done"))
                return self._finish(ev.RunStatus.COMPLETED, "done")
            await self._tool(step)
        return self._finish(ev.RunStatus.COMPLETED, "done")

    async def _turn(self, step: int, final: bool) -> None:
        sid = self.s.session_id
        self._emit(ev.AgentStateChanged(sid, ev.AgentState.IDLE, ev.AgentState.WAITING_SLOT))
        async with self.s.generation_slot():
            self.script.inside[0] += 1
            self.script.peak[0] = max(self.script.peak[0], self.script.inside[0])
            try:
                self._emit(ev.AgentStateChanged(sid, ev.AgentState.WAITING_SLOT, ev.AgentState.GENERATING))
                self._emit(ev.TurnStarted(sid, step + 1))
                await self._generate(step + 1)
            finally:
                self.script.inside[0] -= 1
        name = "attempt_completion" if final else "write_to_file"
        args = {"result": "done"} if final else {"path": f"{self.s.name}-{step}.txt", "content": self.s.name}
        self._emit(ev.TurnFinished(sid, step + 1, "tool_calls", "", 1))
        self._append({"role": "assistant", "content": "",
                      "tool_calls": [{"id": f"c{step}", "type": "function",
                                      "function": {"name": name, "arguments": json.dumps(args)}}]})

    async def _generate(self, turn: int) -> None:
        sid = self.s.session_id
        for _ in range(self.script.tokens_per_turn):
            if not self.script.engine_ok(self.s):
                raise EngineDown("engine gone")
            self._emit(ev.TextStreamed(sid, turn, "x"))
            await asyncio.sleep(self.script.turn_s / max(1, self.script.tokens_per_turn))
        self._emit(ev.UsageReported(sid, turn, 100, self.script.tokens_per_turn, 50, 0, 8192))

    async def _tool(self, step: int) -> None:
        sid = self.s.session_id
        args = json.loads(self.messages[-1]["tool_calls"][0]["function"]["arguments"])
        self._emit(ev.ToolCallStarted(sid, f"c{step}", "write_to_file", args, f"write {args['path']}"))
        if self.script.ask_approval_at == step and self.s.approver is not None:
            req = ev.ApprovalRequested(f"r{step}", sid, f"c{step}", "write_to_file", ToolCategory.EDIT,
                                       args, f"write {args['path']}", "edit actions need approval")
            self._emit(req)
            decision = await self.s.approver(req)
            self._emit(ev.ApprovalResolved(sid, req.request_id, decision.approved, decision.feedback))
            if not decision.approved:
                self._emit(ev.ToolCallFinished(sid, f"c{step}", "write_to_file", "denied", "denied"))
                self._append({"role": "tool", "tool_call_id": f"c{step}", "content": "denied"})
                return
        await asyncio.sleep(self.script.tool_s)
        target = self.s.root / args["path"]
        with target.open("a", encoding="utf-8") as fh:  # appending: a second run would show
            fh.write(args["content"] + "\n")
        self._emit(ev.ToolCallFinished(sid, f"c{step}", "write_to_file", "ok", "written"))
        self._append({"role": "tool", "tool_call_id": f"c{step}", "content": "written"})
        self._emit(ev.CheckpointCreated(sid, f"{step:040d}", len(self.messages), f"after step {step}"))

    def _finish(self, status: ev.RunStatus, message: str) -> ev.RunFinished:
        done = ev.RunFinished(self.s.session_id, status, message)
        self._emit(done)
        return done


class StreamingAgent(FakeAgent):
    """The scripted agent whose model turns are real completions streamed from the
    session's endpoint (a real engine): its steps stay deterministic, its traffic is real."""

    def __init__(self, setup: AgentSetup, script: Script, http: Any) -> None:
        from workstation.engine.chat_client import ChatClient

        super().__init__(setup, script)
        self.client = ChatClient(http, setup.endpoint, session_id=setup.session_id)

    async def _generate(self, turn: int) -> None:
        sid = self.s.session_id
        prompt = [{"role": "user", "content": f"{self.s.task} (session {self.s.name}, turn {turn})"}]
        usage = None
        async for delta in self.client.stream_chat(prompt, max_tokens=self.script.tokens_per_turn,
                                                   temperature=0.0, extra={"ignore_eos": True}):
            if delta.content:
                self._emit(ev.TextStreamed(sid, turn, delta.content))
            usage = delta.usage or usage
        assert usage is not None and usage.completion_tokens > 0
        self._emit(ev.UsageReported(sid, turn, usage.prompt_tokens, usage.completion_tokens, usage.cached_tokens,
                                    usage.total_tokens, 8192))


def factory(script: Script) -> Callable[[AgentSetup], FakeAgent]:
    return lambda setup: FakeAgent(setup, script)


def streaming_factory(script: Script, http: Any) -> Callable[[AgentSetup], FakeAgent]:
    return lambda setup: StreamingAgent(setup, script, http)
