"""The agent's model turns and the context window they fill.

:class:`ModelTurns` owns what turns leave behind: how many the session and the current run
took, how the last one finished, the tokens they cost and how full the context is (the
:class:`~workstation.agent.token_account.TokenAccount`), and the guided protocol's memory.
One turn (``take``) waits for the fleet's generation slot, streams the reply (or runs a guided
turn), appends it and reports its usage; an engine error is retried with backoff, a request
the server refuses for its tool protocol steps down to the next protocol, and a context
overflow condenses the conversation once. ``condense`` replaces the history by a summary.

The history, the protocol and the state stay the agent's: this reads them and changes them
through callbacks (``messages``, ``protocol``, ``switch_protocol``, ``append``,
``replace_history``, ``set_state``, ``emit``). ``config`` is read on every use: a caller may
give the agent a new one between runs.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from pathlib import Path

from workstation.agent.calls import WorkLog
from workstation.agent.config import AgentConfig
from workstation.agent.context import facts_summary
from workstation.agent.guided.drafts import GuidedMemory
from workstation.agent.guided.turn import GuidedTurn
from workstation.agent.history import Message
from workstation.agent.outcome import TurnFailed
from workstation.agent.protocols import ReplyCalls, is_context_overflow, is_tool_refusal, step_down
from workstation.agent.tool_set import ToolSet
from workstation.agent.token_account import TokenAccount
from workstation.agent.turn import condense, stream_turn
from workstation.core import agent_events as ev
from workstation.core.agent_events import AgentState, ToolProtocol
from workstation.engine.chat_client import ChatClient, EngineHTTPError, EngineUnreachable, Usage


class ModelTurns:
    def __init__(self, session_id: str, client: ChatClient, *, root: Path, task: str,
                 config: Callable[[], AgentConfig],
                 slot: Callable[[], contextlib.AbstractAsyncContextManager[object]] | None,
                 messages: Callable[[], list[Message]], protocol: Callable[[], ToolProtocol | None],
                 switch_protocol: Callable[[ToolProtocol, str], None], tools: Callable[[], ToolSet],
                 work: Callable[[], WorkLog], append: Callable[[Message], None],
                 replace_history: Callable[[list[Message]], None],
                 set_state: Callable[..., None], emit: Callable[[ev.AgentEvent], None]) -> None:
        """``slot``: the fleet's generation slot held around each turn (None: no cap);
        ``tools``: the run's tool set; ``work``: what the session's calls did (told to the
        model when the conversation is condensed)."""
        self._session_id = session_id
        self._client = client
        self._root = root
        self._task = task
        self._config = config
        self._slot = slot
        self._messages = messages
        self._protocol = protocol
        self._switch_protocol = switch_protocol
        self._tools = tools
        self._work = work
        self._append = append
        self._replace_history = replace_history
        self._set_state = set_state
        self._emit = emit
        self.turns = 0
        """Model turns of the session, over every run (the snapshot keeps it)."""
        self.run_turns = 0
        """Model turns of the current run (the turn budget)."""
        self.last_finish = ""
        """How the last turn finished, as the server said (``length``: its reply was cut off)."""
        self.tokens = TokenAccount()
        self.guided = GuidedMemory()
        """Guided protocol: files as first read, drafts drawn but not tried yet."""

    def new_run(self) -> None:
        self.run_turns = 0
        self.tokens.new_run()

    def estimate_context(self) -> int:
        protocol = self._protocol()
        tools = self._tools().definition_tokens if protocol not in (ToolProtocol.TEXT, ToolProtocol.GUIDED) else 0
        return self.tokens.estimate_context(self._messages(), tools)

    def _max_tokens(self) -> int:
        config = self._config()
        room = config.context_window_tokens - self.estimate_context() - 64
        return max(256, min(config.max_tokens_per_turn, room))

    async def take(self) -> ReplyCalls:
        """One model turn, its reply appended; :class:`TurnFailed` when the retries are spent."""
        cfg = self._config()
        attempt = 0
        condensed_for_overflow = False
        while True:
            self._set_state(AgentState.WAITING_SLOT if self._slot else AgentState.GENERATING)
            try:
                slot = self._slot() if self._slot is not None else contextlib.nullcontext()
                async with slot:
                    self._set_state(AgentState.GENERATING)
                    return await self._stream_turn()
            except EngineHTTPError as exc:
                status, text = exc.status, str(exc)
                protocol = self._protocol()
                nxt = step_down(protocol) if protocol else None
                if is_tool_refusal(status, text, protocol) and nxt is not None:
                    self._switch_protocol(nxt, f"the server refused the {protocol.value} request: {text[:160]}")
                    continue
                if is_context_overflow(status, text) and not condensed_for_overflow:
                    condensed_for_overflow = True
                    await self.condense(force=True)
                    continue
                retryable = exc.retryable or status is None
            except EngineUnreachable as exc:
                text, retryable = str(exc), True
            if not retryable or attempt >= cfg.max_retries:
                self._emit(ev.ErrorOccurred(self._session_id, text, retrying=False))
                raise TurnFailed(text)
            attempt += 1
            self._emit(ev.ErrorOccurred(self._session_id, text, retrying=True))
            await asyncio.sleep(cfg.retry_backoff_s * (2 ** (attempt - 1)))

    async def _stream_turn(self) -> ReplyCalls:
        protocol = self._protocol()
        assert protocol is not None
        turn = self.turns + 1
        sid = self._session_id
        config = self._config()
        if protocol is ToolProtocol.GUIDED:
            guided = GuidedTurn(self._client, self._messages(), root=self._root, task=self._task, config=config,
                                session_id=sid, turn=turn, max_tokens=self._max_tokens(), emit=self._emit,
                                memory=self.guided)
            try:
                result = await guided.run()
            except BaseException:
                # its finished requests (a choice, drafts) cost tokens though the turn failed
                self._count_usage(turn, guided.spent.usage(), replied=False)
                raise
        else:
            result = await stream_turn(self._client, self._messages(), protocol, session_id=sid, turn=turn,
                                       max_tokens=self._max_tokens(), temperature=config.temperature,
                                       emit=self._emit, tools=self._tools().openai)
        self.turns = turn
        self.run_turns += 1
        self._append(result.reply.message)
        self._count_usage(turn, result.usage, replied=True)
        self._emit(ev.TurnFinished(sid, turn, result.finish_reason or "stop", result.content,
                                   len(result.reply.calls)))
        self.last_finish = result.finish_reason
        return result.reply

    def _count_usage(self, turn: int, usage: Usage | None, *, replied: bool) -> None:
        """A turn's tokens into the run's totals and out as ``UsageReported``; ``replied``: its
        reply was appended, so the usage also measures the context (a failed turn's does not)."""
        if usage is None:
            return
        self.tokens.count(usage, history_len=len(self._messages()) if replied else None)
        self._emit(ev.UsageReported(self._session_id, turn, usage.prompt_tokens, usage.completion_tokens,
                                    usage.cached_tokens, self.tokens.context_tokens,
                                    self._config().context_window_tokens, self._client.model_name))

    async def condense(self, *, force: bool = False) -> None:
        """Replace the history by a summary of its older part (``turn.condense``), telling the
        model what the session's calls did."""
        messages = self._messages()
        before_tokens, before_len = self.estimate_context(), len(messages)
        self._set_state(AgentState.GENERATING, "condensing the conversation")
        work = self._work()
        facts = facts_summary(work.files_read, work.files_changed, work.commands_run)
        result = await condense(self._client, messages, self._config(), facts, force=force, slot=self._slot)
        if result is None:
            return
        self._replace_history(result.messages)
        if result.summary is not None:
            self._emit(ev.ContextCondensed(self._session_id, before_tokens, before_len, len(self._messages()),
                                           result.summary))
