"""Shared pieces of the fault-injection suite: a fleet of real agents, a scripted engine that
follows per-task plans, and the invariants every fault must leave intact.

What must hold after every fault (``check_transcript``):
- the stored transcript numbers its events 1, 2, 3 … without gaps;
- messages are only ever appended at the end (no message stored twice, none rewritten);
- every finished model turn is stored once, a turn cut off by the fault never;
- every tool call started at most once, and (when the session is settled) finished once.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest_asyncio

from tests.helpers.scripted_server import Fault, Reply, ToolCall
from workstation.agent.prompts import CONDENSE_REQUEST
from workstation.agent.sandbox import SandboxPolicy
from workstation.core import agent_events as ev
from workstation.core.endpoints import Endpoint
from workstation.core.session_state import SessionState as S
from workstation.engine.http import make_http_client
from workstation.fleet import Fleet, SessionSpec, real_agent_factory

Step = Callable[[int, dict[str, Any]], "Reply | Fault"]


def call(name: str, **args: Any) -> Reply:
    return Reply(tool_calls=[ToolCall(name, dict(args))], chunk_chars=16)


DONE = call("attempt_completion", result="finished")


def plan_of(body: dict[str, Any]) -> str:
    """The plan named in the task (``… [plan=NAME] …``)."""
    for message in body.get("messages", []):
        if message.get("role") == "user":
            found = re.search(r"\[plan=([\w-]+)\]", str(message.get("content")))
            if found:
                return found.group(1)
    return ""


def tag_of(body: dict[str, Any]) -> str:
    """A per-session tag in the task (``#tag``), to tell sessions of one plan apart."""
    for message in body.get("messages", []):
        if message.get("role") == "user":
            found = re.search(r"#([\w-]+)", str(message.get("content")))
            if found:
                return found.group(1)
    return ""


def step_of(body: dict[str, Any]) -> int:
    """How many tool results the conversation holds: the plan's step to answer."""
    return sum(1 for m in body.get("messages", []) if m.get("role") == "tool")


@dataclass
class Planner:
    """A scripted engine's responder: each task names a plan; a plan maps the step (tool
    results so far) to the next reply. Condensing requests get a short summary."""

    plans: dict[str, Step] = field(default_factory=dict)
    requests: int = 0

    def __call__(self, body: dict[str, Any], n: int) -> Reply | Fault:
        self.requests += 1
        messages = body.get("messages", [])
        if messages and messages[-1].get("content") == CONDENSE_REQUEST:
            return Reply(text="Summary: the work so far went as planned.")
        plan = self.plans.get(plan_of(body))
        if plan is None:
            return DONE
        return plan(step_of(body), body)


def steps(*replies: Reply | Fault) -> Step:
    """A plan that answers step k with ``replies[k]`` and completes after the last."""

    def plan(step: int, body: dict[str, Any]) -> Reply | Fault:
        return replies[step] if step < len(replies) else DONE

    return plan


def agent_overrides(data_dir: Path, **more: Any) -> dict[str, Any]:
    return {"retry_backoff_s": 0.05, "max_retries": 2, "command_timeout_s": 60.0,
            "sandbox": SandboxPolicy(app_data_dirs=(str(data_dir),)), **more}


@contextlib.asynccontextmanager
async def running_fleet(data_dir: Path, endpoint: Endpoint, http: httpx.AsyncClient, *,
                        max_generating: int = 32, context_window_tokens: int = 16_384,
                        **overrides: Any) -> AsyncIterator[Fleet]:
    fleet = Fleet(data_dir=data_dir, endpoints=[endpoint], http=http, max_generating=max_generating,
                  agent_factory=real_agent_factory(http, context_window_tokens=context_window_tokens,
                                                   overrides=agent_overrides(data_dir, **overrides)),
                  engine_poll_s=0.2)
    await fleet.start()
    try:
        yield fleet
    finally:
        await fleet.aclose()


@pytest_asyncio.fixture(loop_scope="function")
async def http() -> AsyncIterator[httpx.AsyncClient]:
    client = make_http_client(read_timeout_s=3.0)
    yield client
    await client.aclose()


def spec(repo: Path, plan: str, tag: str = "", **kw: Any) -> SessionSpec:
    return SessionSpec(task=f"fault suite [plan={plan}] #{tag or plan}", repo=str(repo), headless=True,
                       auto_approve=("all",), **kw)


async def until(predicate: Callable[[], bool], timeout_s: float = 60.0, what: str = "condition") -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


async def settle(fleet: Fleet, timeout_s: float = 120.0) -> None:
    await asyncio.wait_for(fleet.wait_settled(), timeout_s)


@dataclass
class Facts:
    events: list[object]
    messages: list[dict[str, Any]]
    tool_calls: dict[str, str]
    """call id → tool of every ToolCallStarted."""
    finished: dict[str, str]
    """call id → status of every ToolCallFinished."""

    def of(self, kind: type) -> list[Any]:
        return [e for e in self.events if isinstance(e, kind)]

    def tools(self, name: str) -> list[str]:
        return [cid for cid, tool in self.tool_calls.items() if tool == name]


async def check_transcript(fleet: Fleet, session_id: str, *, settled: bool = True) -> Facts:
    """Assert the invariants in the module docstring; return what the transcript holds."""
    rows = await fleet.transcript(session_id)
    seqs = [seq for seq, _ in rows]
    assert seqs == list(range(1, len(seqs) + 1)), f"{session_id}: transcript has gaps or repeats"
    events = [e for _, e in rows]
    messages: list[dict[str, Any]] = []
    tool_calls: dict[str, str] = {}
    finished: dict[str, str] = {}
    good_turns = 0
    for event in events:
        if isinstance(event, ev.MessageAppended):
            assert event.index == len(messages), \
                f"{session_id}: message {event.index} stored when the history had {len(messages)}"
            messages.append(orjson.loads(event.message_json))
        elif isinstance(event, ev.HistoryReplaced):
            messages = list(orjson.loads(event.messages_json))
        elif isinstance(event, ev.TurnFinished) and event.finish_reason != "error":
            good_turns += 1
        elif isinstance(event, ev.ToolCallStarted):
            assert event.call_id not in tool_calls, f"{session_id}: tool call {event.call_id} started twice"
            tool_calls[event.call_id] = event.tool
        elif isinstance(event, ev.ToolCallFinished):
            assert event.call_id not in finished, f"{session_id}: tool call {event.call_id} finished twice"
            finished[event.call_id] = event.status
    if not any(isinstance(e, ev.HistoryReplaced) for e in events):
        assistant = sum(1 for e in events if isinstance(e, ev.MessageAppended) and e.role == "assistant")
        assert assistant == good_turns, \
            f"{session_id}: {assistant} assistant messages stored for {good_turns} finished turns"
    ids = [c.get("id") for m in messages if m.get("role") == "assistant" for c in m.get("tool_calls") or []]
    assert len(ids) == len(set(ids)), f"{session_id}: a model turn is stored twice"
    if settled:
        unfinished = set(tool_calls) - set(finished)
        assert not unfinished, f"{session_id}: tool calls without a result: {unfinished}"
    return Facts(events, messages, tool_calls, finished)


async def prove_alive(fleet: Fleet, repo: Path) -> None:
    """The app keeps running: a new session still goes from start to done."""
    made = await fleet.create_session(spec(repo, "alive", tag=f"alive{os.getpid()}"), start=True)
    await until(lambda: fleet.summary(made.session_id).state.is_finished, 60, "a fresh session to finish")
    assert fleet.summary(made.session_id).state is S.DONE, fleet.summary(made.session_id).error
    await check_transcript(fleet, made.session_id)
