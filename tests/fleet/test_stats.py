"""A pane's tok/s counts the tokens the engine generated for its session, and nothing else.

The guided protocol in the real agent loop (scripted server, real tools, real pytest in a real
sample repository), run by a fleet: the transcript it shows is no measure of generation — a
note after the drafts, and after failed tests a draft drawn turns ago, shown whole while the
engine generates nothing; and of the drafts it draws only one is shown."""

from __future__ import annotations

import asyncio
import re
import subprocess
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fleet.conftest import GIT_ENV
from tests.fleet.fakes import FakeAgent, Script
from tests.helpers.scripted_server import Reply, ScriptedServer
from workstation.agent import Agent, AgentConfig
from workstation.core import agent_events as ev
from workstation.core.approvals import ApprovalPolicy
from workstation.core.endpoints import Endpoint
from workstation.engine.chat_client import ChatClient
from workstation.engine.http import make_http_client
from workstation.fleet.agent_bridge import AgentSetup
from workstation.fleet.sample_repos import create_sample_repository
from workstation.fleet.service import Fleet
from workstation.fleet.session import SessionSpec
from workstation.fleet.stats import SessionStats, TokenObserver

SMOLLM2_PARAMETERS = 134_515_008  # a model the guided protocol is for
GOOD = ("```python\ndef total_value(self):\n"
        '    """What the whole stock is worth: price times quantity, summed over items."""\n'
        "    return sum(item.price * item.quantity for item in self._items.values())\n```")
WRONG = GOOD.replace("item.price * item.quantity", "item.price * item.quantity * 2")
EXPLICIT = ("Inventory.total_value in inventory/stock.py ignores the quantity: it must multiply each price "
            "by its quantity, item.price * item.quantity. Then run the tests.")


class ReportingClient(ChatClient):
    """A chat client that tells ``feed`` each delta's generated tokens (its ``events``) of
    every request — what the fleet's real factory is to give its clients (the change to
    ``ChatClient`` proposed with this test; ``feed`` is not ``token_observers`` so that the
    client's own reports, once it makes them, are not counted twice); ``ended`` lets the
    test see what the pane counted while no request was streaming."""

    def __init__(self, *args: Any, feed: list[TokenObserver], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.feed = feed
        self.generated = 0
        self.ended: list[int] = []
        """The pane's count of the session's tokens as each request ended."""
        self.fleet: Fleet | None = None

    async def stream_chat(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:  # type: ignore[override]
        try:
            async for delta in super().stream_chat(*args, **kwargs):
                if delta.events:
                    self.generated += delta.events
                    for observe in self.feed:
                        observe(self.session_id or "", delta.events)
                yield delta
        finally:
            if self.fleet is not None:
                counted = self.fleet.streams.session(self.session_id or "")
                self.ended.append(counted.streamed_chunks if counted is not None else 0)


class GuidedAgents:
    """Real agents on the guided protocol, whose clients report their generated tokens."""

    def __init__(self, http: httpx.AsyncClient, endpoint: Endpoint) -> None:
        self.http = http
        self.endpoint = endpoint
        self.token_observers: list[TokenObserver] = []
        self.clients: dict[str, ReportingClient] = {}
        self.fleet: Fleet | None = None

    def __call__(self, setup: AgentSetup) -> Agent:
        client = ReportingClient(self.http, self.endpoint, session_id=setup.session_id,
                                 feed=self.token_observers)
        client.fleet = self.fleet
        self.clients[setup.session_id] = client
        config = AgentConfig(retry_backoff_s=0.01, approval=ApprovalPolicy.parse("all"),
                             context_window_tokens=32_768, model_parameters=SMOLLM2_PARAMETERS,
                             user_present=False)
        return Agent(setup.session_id, setup.root, setup.task, client, config, on_event=setup.on_event,
                     approver=setup.approver, generation_slot=setup.generation_slot, history=setup.history)


def answering(greedy: str, sampled: str):  # type: ignore[no-untyped-def]
    """The greedy draft gets ``greedy``, the sampled ones (drawn at the same time) ``sampled``;
    each answer is checked against its request's regex."""

    def respond(body: dict[str, Any], n: int) -> Reply:
        regex = body["structured_outputs"]["regex"]
        text = sampled if body.get("temperature") else greedy
        assert re.fullmatch(regex, text), f"reply {n} does not match its regex:\n{text}\n{regex}"
        return Reply(text=text)

    return respond


@pytest.fixture
def bug_repo(tmp_path: Path) -> Path:
    repo = create_sample_repository("inventory", tmp_path / "inventory")
    subprocess.run(["git", "-C", str(repo), "checkout", "-q", "bug/fix-total-value"], check=True, env=GIT_ENV,
                   capture_output=True)
    return repo


async def test_a_pane_counts_the_tokens_generated_and_nothing_the_guided_turn_only_shows(
        tmp_path: Path, bug_repo: Path) -> None:
    """The greedy draft is wrong, the tests fail, the sampled draft comes from the queue: the
    second edit asks the engine nothing. Every token the engine streamed is counted (the
    hidden sampled draft's too), and nothing after the last request ended: neither the note
    on the drafts nor the queued draft shown whole (each had counted as a token)."""
    http = make_http_client(read_timeout_s=10.0)
    async with ScriptedServer(responder=answering(WRONG, GOOD)) as srv:
        agents = GuidedAgents(http, srv.endpoint)
        fleet = Fleet(data_dir=tmp_path / "data", endpoints=(srv.endpoint,), agent_factory=agents, http=http,
                      max_generating=4, engine_poll_s=0.05)
        agents.fleet = fleet
        try:
            await fleet.start()
            (s,) = await fleet.create_sessions(SessionSpec(task=EXPLICIT, repo=str(bug_repo), headless=True), 1,
                                               start=True)
            await asyncio.wait_for(fleet.wait_settled(), 120)
            client = agents.clients[s.session_id]
            counted = fleet.streams.session(s.session_id)
            assert fleet.book.get(s.session_id).state.value == "done"
            assert len(srv.requests) == 2 and sorted(r.get("n", 1) for r in srv.requests) == [1, 6]
            assert client.generated > 0 and counted is not None
            # nothing counted while no request streamed (the note, the queued draft shown whole)
            assert counted.streamed_chunks == client.ended[-1]
            assert counted.streamed_chunks == client.generated  # the hidden draft's tokens too
        finally:
            await fleet.aclose()
            await http.aclose()
    assert agents.token_observers == []  # the closed fleet no longer listens


def test_shown_pieces_count_only_where_no_client_reports() -> None:
    """A factory whose agents' clients do not report (the tests' scripted agents): the pieces
    the agents show are the estimate; one that reports: its reports, and the shown pieces not."""

    class Book:
        def get(self, _sid: str) -> None:
            return None

    alone = SessionStats(Book(), emit=lambda _e: None)  # type: ignore[arg-type]
    alone.shown("s", 3)
    assert alone.streams.session("s").streamed_chunks == 3

    feed: list[TokenObserver] = []
    fed = SessionStats(Book(), emit=lambda _e: None, token_feed=feed)  # type: ignore[arg-type]
    assert feed == [fed.generated]
    fed.shown("s", 3)
    assert fed.streams.session("s") is None
    for observe in feed:
        observe("s", 5)
    assert fed.streams.session("s").streamed_chunks == 5
    asyncio.run(fed.aclose())
    assert feed == []


class HiddenDrafts(FakeAgent):
    """The scripted agent whose one model turn is what a guided edit asks of a real engine:
    six sampled drafts in one request (``n``), none of them shown; then a note it shows."""

    def __init__(self, setup: AgentSetup, script: Script, http: httpx.AsyncClient, feed: list[TokenObserver],
                 clients: dict[str, ReportingClient]) -> None:
        super().__init__(setup, script)
        self.client = clients[setup.session_id] = ReportingClient(http, setup.endpoint, session_id=setup.session_id,
                                                                  feed=feed)

    async def _generate(self, turn: int) -> None:
        sid = self.s.session_id
        usage = None
        async for delta in self.client.stream_chat(
                [{"role": "user", "content": "Write a Python function that adds two numbers."}], max_tokens=32,
                temperature=0.8, extra={"n": 6, "structured_outputs": {"regex": r"```python\n[a-z (),:+=\n]{1,120}```"}}):
            usage = delta.usage or usage
        assert usage is not None and usage.completion_tokens > 0
        self._emit(ev.TextStreamed(sid, turn, "\n[6 drafts, 1 usable; trying the best first]"))
        self._emit(ev.UsageReported(sid, turn, usage.prompt_tokens, usage.completion_tokens, usage.cached_tokens,
                                    usage.total_tokens, 8192))


@pytest.mark.engine
async def test_hidden_drafts_on_the_real_engine_count_as_their_usage_says(
        tmp_path: Path, git_repo: Path, smollm2_engine: Endpoint) -> None:
    """vLLM streams each choice's tokens as events of their own: the pane counts what the
    usage says the six drafts took, less the end token of each draft that ended (it has no
    text; measured 104 events for 110 tokens, 140 for 144), and not the note it shows."""
    feed: list[TokenObserver] = []
    clients: dict[str, ReportingClient] = {}
    script = Script(steps=0)
    async with make_http_client() as http:
        fleet = Fleet(data_dir=tmp_path / "data", endpoints=[smollm2_engine], http=http, max_generating=2,
                      agent_factory=_Factory(lambda setup: HiddenDrafts(setup, script, http, feed, clients), feed))
        try:
            await fleet.start()
            (s,) = await fleet.create_sessions(SessionSpec(task="t", repo=str(git_repo), headless=True), 1,
                                               start=True)
            await asyncio.wait_for(fleet.wait_settled(), 300)
            counted = fleet.streams.session(s.session_id)
            assert counted is not None and counted.streamed_chunks == clients[s.session_id].generated
            # each draft's end token has no text, so no event (ASCII drafts: no half characters)
            assert counted.completion_tokens - 6 <= counted.streamed_chunks <= counted.completion_tokens
        finally:
            await fleet.aclose()


class _Factory:
    """An agent factory with the shared list its agents' clients report generated tokens to."""

    def __init__(self, make: Callable[[AgentSetup], Any], token_observers: list[TokenObserver]) -> None:
        self.make = make
        self.token_observers = token_observers

    def __call__(self, setup: AgentSetup) -> Any:
        return self.make(setup)
