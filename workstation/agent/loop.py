"""The agent: system prompt + task → model turn → tool calls → results → next turn.

See the package docstring (``workstation/agent/__init__.py``) for the API in one page.
``Agent`` keeps the history, the protocol, the mode and the run's control (pause, stop) and
composes collaborators that own the rest: the :class:`~workstation.agent.calls.ToolCallRunner`
(one tool call), the :class:`~workstation.agent.inbox.UserInbox` (what the user said that the
model has not seen yet, the pending question) and :class:`~workstation.agent.model_turns.ModelTurns`
(one model turn, its tokens, condensing).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

from workstation.agent import prompts
from workstation.agent.calls import CallOutcome, ToolCallRunner, WorkLog
from workstation.agent.checkpoints import Checkpoint, CheckpointError, CheckpointStore
from workstation.agent.config import AgentConfig
from workstation.agent.history import (
    AgentSnapshot, Message, message_json, messages_json, repair_history,
    valid_message,
)
from workstation.agent.inbox import UserInbox
from workstation.agent.model_turns import ModelTurns
from workstation.agent.images import MAX_IMAGES, ImageAttachment, user_content
from workstation.agent.images import refusal as images_refusal
from workstation.agent.jail import JailError, PathJail
from workstation.agent.mcp.hub import McpHub
from workstation.agent.opening import first_protocol, session_rules, system_base, why_not_guided
from workstation.agent.outcome import STATE_AFTER, AgentOutcome, TurnFailed, protocol_of
from workstation.agent.protocols import ReplyCalls
from workstation.agent.tool_set import BUILTIN, ToolSet
from workstation.agent.toolbox import Toolbox
from workstation.core import agent_events as ev
from workstation.core.agent_events import AgentMode, AgentState, RunStatus, SlotRefused, ToolProtocol
from workstation.core.approvals import ApprovalDecision, ApprovalRequest
from workstation.core.errors import UserError
from workstation.engine.chat_client import ChatClient

log = logging.getLogger(__name__)

Approver = Callable[[ApprovalRequest], Awaitable[ApprovalDecision]]
"""Decides one approval request; may take as long as a person needs."""
SlotFactory = Callable[[], AbstractAsyncContextManager[Any]]
"""Returns an async context manager held around each model turn (the fleet's cap; it may refuse: SlotRefused)."""

class Agent:
    """One coding agent working in ``root`` on ``task``. See the package docstring."""

    def __init__(
        self,
        session_id: str,
        root: str | Path,
        task: str,
        client: ChatClient,
        config: AgentConfig | None = None,
        *,
        on_event: Callable[[ev.AgentEvent], None] | None = None,
        approver: Approver | None = None,
        generation_slot: SlotFactory | None = None,
        snapshot: AgentSnapshot | None = None,
        history: list[Message] | None = None,
        task_images: Sequence[ImageAttachment] = (),
    ) -> None:
        self.session_id = session_id
        self.task = task
        self.task_images = tuple(task_images)
        """Images that go with the task (``images.py``): only to a model that takes them."""
        self.client = client
        self.config = config or AgentConfig()
        try:
            self.jail = PathJail(root)
        except JailError as exc:
            raise UserError(str(exc)) from None
        self.root = self.jail.root
        self._on_event = on_event
        self._approver = approver
        self._toolbox = Toolbox(self.jail, self.config)
        self.checkpoints: CheckpointStore | None = (
            CheckpointStore(self.root, session_id, exclude=self.config.environment_paths)
            if self.config.checkpoints else None
        )
        self._calls = ToolCallRunner(
            session_id, self.config, self._toolbox, self.checkpoints, approver, emit=self._emit,
            append=self._append, set_state=self._set_state, between_steps=self._between_steps,
            message_count=lambda: len(self._messages),
        )
        self._state = AgentState.IDLE
        self._mode = self.config.mode
        self._protocol: ToolProtocol | None = None
        self._messages: list[Message] = []
        self._mistakes = 0
        self._no_tool_streak = 0
        self._completed = False
        self._needs_input = False
        self._last_result = ""
        self._inbox = UserInbox(session_id, emit=self._emit, append=self._append)
        """Queued user notes and the pending question (``inbox.py``)."""
        self._model_turns = ModelTurns(
            session_id, client, root=self.root, task=task, config=lambda: self.config, slot=generation_slot,
            messages=lambda: self._messages, protocol=lambda: self._protocol, switch_protocol=self._switch_protocol,
            tools=lambda: self._calls.tools, work=lambda: self._calls.work, append=self._append,
            replace_history=self._replace_history, set_state=self._set_state, emit=self._emit)
        """Model turns, their tokens and condensing (``model_turns.py``)."""
        self._pause_requested = False
        self._resumed = asyncio.Event()
        self._resumed.set()
        self._stop_requested = False
        self._run_task: asyncio.Task[Any] | None = None
        self._takes_messages = False
        """True while a message can still reach this run's model (queued, then delivered before
        a model turn, or settled into the history when the run ends)."""
        self._idle = asyncio.Event()
        self._idle.set()
        self._baseline_done = False
        if self.task_images:
            self._check_images(self.task_images)
        self._needs_repair = False
        if snapshot is not None:
            self._load(snapshot)
        elif history:
            self._load(AgentSnapshot(session_id, list(history), mode=self._mode,
                                     protocol=protocol_of(history)))

    # ------------------------------------------------------------------ public API
    @property
    def state(self) -> AgentState:
        return self._state

    @property
    def mode(self) -> AgentMode:
        return self._mode

    @property
    def protocol(self) -> ToolProtocol | None:
        return self._protocol

    @property
    def messages(self) -> list[Message]:
        """A copy of the history the agent sends (OpenAI chat messages)."""
        return [dict(m) for m in self._messages]

    @property
    def running(self) -> bool:
        return self._run_task is not None

    @property
    def takes_messages(self) -> bool:
        """Whether :meth:`reply` now reaches this run (a fleet hands a working session's
        follow-up here); False while a run winds down."""
        return self._takes_messages

    @property
    def context_tokens(self) -> int:
        return self._model_turns.estimate_context()

    async def run(self) -> AgentOutcome:
        """Work until completed, a question, the mistakes limit, a budget, stop or failure."""
        if self._run_task is not None:
            raise RuntimeError(f"agent {self.session_id} is already running")
        task = asyncio.current_task()
        assert task is not None
        self._run_task = task
        self._idle.clear()
        self._stop_requested = False
        self._model_turns.new_run()
        hub: McpHub | None = None
        try:
            try:
                if self.config.mcp_servers:
                    hub = McpHub(self.session_id, self.root, self.config.mcp_servers, self.config.sandbox,
                                 user_present=self.config.user_present, emit=self._emit,
                                 max_result_chars=self.config.result_char_cap(),
                                 start_timeout_s=self.config.mcp_start_timeout_s)
                    self._calls.tools = ToolSet(await hub.start())
                self._takes_messages = True
                outcome = await self._run()
                while outcome.status in (RunStatus.COMPLETED, RunStatus.NEEDS_INPUT) and self._inbox.has_unsent:
                    # the user wrote during the turn that ended the run: answered now, not left behind
                    self._inbox.settle(self._protocol)
                    self._heard_user()
                    outcome = await self._run()
            except asyncio.CancelledError:
                if not self._stop_requested:
                    self._repair_tail()
                    raise
                task.uncancel()
                self._repair_tail()
                outcome = self._outcome(RunStatus.STOPPED, "stopped by the user")
            except (TurnFailed, SlotRefused) as exc:  # refused: the fleet holds the next turn back
                outcome = self._outcome(exc.status if isinstance(exc, SlotRefused) else RunStatus.FAILED, str(exc))
            except Exception as exc:  # a bug must end this session, not the app
                log.exception("agent %s crashed", self.session_id)
                self._repair_tail()
                outcome = self._outcome(RunStatus.FAILED, f"internal error: {exc!r}")
        finally:
            self._takes_messages = False
            if self._inbox.has_unsent:  # stopped, paused or failed first: the next run sees them
                self._inbox.settle(self._protocol)
            if hub is not None:
                await hub.aclose()  # in the run's own task: the servers' clients were entered here
                self._calls.tools = BUILTIN
            self._run_task = None
            self._idle.set()
        self._set_state(STATE_AFTER[outcome.status], outcome.message)
        self._emit(ev.RunFinished(self.session_id, outcome.status, outcome.message, outcome.turns,
                                  outcome.prompt_tokens, outcome.completion_tokens))
        return outcome

    def pause(self) -> None:
        """Pause at the next step boundary (before a model turn or a tool call)."""
        self._pause_requested = True
        self._resumed.clear()

    def resume(self) -> None:
        """Continue after :meth:`pause`."""
        self._pause_requested = False
        self._resumed.set()

    def stop(self) -> None:
        """Stop now: cancel the model turn, kill running commands' process groups.

        ``run()`` then returns ``stopped``; the history stays consistent (a tool call cut
        short gets an "interrupted" result).
        """
        self._stop_requested = True
        self._resumed.set()
        if self._run_task is not None and not self._run_task.done():
            self._run_task.cancel()

    async def aclose(self) -> None:
        """Stop and wait until ``run()`` has returned."""
        self.stop()
        await self._idle.wait()

    def reply(self, text: str, images: Sequence[ImageAttachment] = ()) -> None:
        """The user's answer to a question, or feedback (with images, for a model that takes
        them: else :class:`UserError`); call ``run()`` again to continue.

        While the agent runs, the text is queued and sent before its next model turn; when
        the turn under way ends the run (a finish, a question), the run goes on with it; when
        the run is stopped first, it is in the history for the next one.
        """
        images = tuple(images)
        if images:
            self._check_images(images)
        if self._takes_messages or not self._messages:
            self._inbox.queue(text, images)
            return
        if self._needs_repair:
            self._repair_tail()
        self._inbox.answer(text, images, self._protocol)
        self._heard_user()

    def _heard_user(self) -> None:
        """The user spoke: the mistakes, a finish or a wait for them are behind."""
        self._mistakes = 0
        self._needs_input = False
        self._completed = False
        self._calls.forget_last_call()

    def set_mode(self, mode: AgentMode) -> None:
        """Switch Plan/Act; the model is told before its next turn."""
        if mode is self._mode:
            return
        self._mode = mode
        self._emit(ev.ModeChanged(self.session_id, mode))
        if self._messages:
            self._inbox.queue_note(prompts.mode_switch_message(mode))

    def snapshot(self) -> AgentSnapshot:
        """What to persist to resume this agent later (see :class:`AgentSnapshot`)."""
        return AgentSnapshot(
            session_id=self.session_id, messages=self.messages, mode=self._mode,
            protocol=self._protocol, turns=self._model_turns.turns, pending_question_call=self._inbox.pending_question,
            completed=self._completed, needs_input=self._needs_input,
            context_tokens=self._model_turns.estimate_context(), files_read=list(self._calls.work.files_read),
            files_changed=list(self._calls.work.files_changed), commands_run=list(self._calls.work.commands_run),
        )

    async def list_checkpoints(self) -> list[Checkpoint]:
        return await self.checkpoints.list() if self.checkpoints else []

    async def restore_checkpoint(self, commit: str, *, files: bool = True, conversation: bool = True) -> None:
        """Restore the files, the conversation, or both, to a checkpoint (not while running)."""
        if self._run_task is not None:
            raise RuntimeError("stop or wait for the agent before restoring a checkpoint")
        if self.checkpoints is None or not await self.checkpoints.available():
            raise UserError("this session has no checkpoints (not a git repository, or disabled)")
        try:
            cp = await self.checkpoints.get(commit)
            if files:
                await self.checkpoints.restore_files(cp.commit, len(self._messages))
        except CheckpointError as exc:
            raise UserError(str(exc)) from None
        if conversation:
            repaired = repair_history(self._messages[: cp.message_index], self._protocol)
            self._replace_history(repaired.messages)
            self._inbox.pending_question = repaired.pending_question_call
            self._completed = self._needs_input = False
            self._mistakes = 0
        elif files:
            self._append({"role": "user", "content": prompts.restored_files_message(cp.label)})
        self._emit(ev.CheckpointRestored(self.session_id, cp.commit, files, conversation))

    def _check_images(self, images: Sequence[ImageAttachment]) -> None:
        if self.config.takes_images is not True:
            raise UserError(images_refusal(self.client.endpoint.model, self.config.takes_images))
        if len(images) > MAX_IMAGES:
            raise UserError(f"{len(images)} images attached; at most {MAX_IMAGES} go with one message")

    # ------------------------------------------------------------------ internals: plumbing
    def _emit(self, event: ev.AgentEvent) -> None:
        if self._on_event is None:
            return
        try:
            self._on_event(event)
        except Exception:  # a broken listener must not break the agent
            log.exception("agent event listener failed on %s", type(event).__name__)

    def _set_state(self, new: AgentState, detail: str = "") -> None:
        old = self._state
        if new is old:
            return
        self._state = new
        self._emit(ev.AgentStateChanged(self.session_id, old, new, detail))

    def _append(self, message: Message) -> None:
        message = valid_message(message)  # a file name that is not UTF-8 must not break JSON
        self._messages.append(message)
        self._emit(ev.MessageAppended(self.session_id, len(self._messages) - 1, message["role"],
                                      message_json(message)))

    def _replace_history(self, messages: list[Message]) -> None:
        self._messages = list(messages)
        self._model_turns.tokens.forget_context()
        self._emit(ev.HistoryReplaced(self.session_id, messages_json(self._messages)))

    def _outcome(self, status: RunStatus, message: str, **kw: Any) -> AgentOutcome:
        tokens = self._model_turns.tokens
        return AgentOutcome(status, message, turns=self._model_turns.run_turns, prompt_tokens=tokens.run_prompt,
                            completion_tokens=tokens.run_completion, **kw)

    def _load(self, snap: AgentSnapshot) -> None:
        self._mode = snap.mode
        self._protocol = snap.protocol
        self._model_turns.turns = snap.turns
        self._completed = snap.completed
        self._needs_input = snap.needs_input
        self._calls.work = WorkLog(list(snap.files_read), list(snap.files_changed), list(snap.commands_run))
        self._messages = [dict(m) for m in snap.messages]
        self._inbox.pending_question = snap.pending_question_call
        self._baseline_done = bool(snap.messages)
        if not self._completed and self._messages and self._messages[-1].get("content") == prompts.COMPLETION_ACK:
            self._completed = True
        self._needs_repair = True  # done (with events) when the agent is first used

    def _repair_tail(self) -> None:
        """Give every tool call without a result an "interrupted" result (with events)."""
        self._needs_repair = False
        repaired = repair_history(self._messages, self._protocol)
        if repaired.messages[: len(self._messages)] == self._messages:
            for message in repaired.messages[len(self._messages):]:
                self._append(message)
        else:
            self._replace_history(repaired.messages)
        for cid in repaired.interrupted:
            self._emit(ev.ToolCallFinished(self.session_id, cid, "", "interrupted", prompts.INTERRUPTED_RESULT))
        if repaired.interrupted:
            log.info("agent %s: %d interrupted tool call(s) reported to the model",
                     self.session_id, len(repaired.interrupted))
        if repaired.pending_question_call and self._inbox.pending_question is None and not self._stop_requested:
            self._inbox.pending_question = repaired.pending_question_call

    async def _between_steps(self) -> None:
        """Honour pause (and a stop that came while paused) at a step boundary."""
        if self._pause_requested and not self._stop_requested:
            before = self._state
            self._set_state(AgentState.PAUSED, "paused by the user")
            await self._resumed.wait()
            self._set_state(before)

    # ------------------------------------------------------------------ internals: the loop
    async def _run(self) -> AgentOutcome:
        if self._needs_repair:
            self._repair_tail()
        if self._protocol is None:
            self._protocol, why = first_protocol(self.config, self.client.endpoint, self.task_images)
            self._emit(ev.ProtocolSelected(self.session_id, self._protocol, why))
        if not self._messages:
            await self._start_conversation()
        if not self._inbox:
            if self._inbox.pending_question is not None:
                question, options = self._inbox.question
                return self._outcome(RunStatus.NEEDS_INPUT, "waiting for the answer to a question",
                                     question=question, options=options)
            if self._completed:
                return self._outcome(RunStatus.COMPLETED, "the task is complete", result=self._last_result)
            if self._needs_input:
                return self._outcome(RunStatus.NEEDS_INPUT, "waiting for the user after repeated mistakes")
        if not self._baseline_done:
            self._baseline_done = True
            await self._calls.checkpoint("session start")
        cfg = self.config
        while True:
            await self._between_steps()
            self._inbox.deliver()
            if self._model_turns.run_turns >= cfg.max_turns:
                return self._outcome(RunStatus.BUDGET_EXHAUSTED, f"reached the limit of {cfg.max_turns} model turns")
            if cfg.max_total_tokens is not None and self._model_turns.tokens.run_total >= cfg.max_total_tokens:
                return self._outcome(RunStatus.BUDGET_EXHAUSTED, f"reached the token budget of {cfg.max_total_tokens:,}")
            if self._protocol is not ToolProtocol.GUIDED and \
                    self._model_turns.estimate_context() > cfg.condense_at_fraction * cfg.context_window_tokens:
                # (a guided turn sends a bounded view of the history, so it never needs condensing)
                await self._model_turns.condense()
            reply = await self._model_turns.take()
            outcome = await self._handle_reply(reply)
            if outcome is not None:
                return outcome

    async def _start_conversation(self) -> None:
        assert self._protocol is not None
        listing = await self._toolbox.environment_listing(self.config.environment_listing_entries)
        rules = await asyncio.to_thread(session_rules, self.config, self.root)
        self._emit(ev.RulesLoaded(self.session_id, tuple(f.path for f in rules.files), rules.cut, rules.left_out,
                                  rules.skipped, sum(f.chars for f in rules.files)))
        content = system_base(self._protocol, self._calls.tools)
        if rules.section:
            content += "\n\n" + rules.section  # after the constant part: one repository, one prefix
        self._append({"role": "system", "content": content})
        task = prompts.task_message(self.task, self._mode, listing)
        self._append({"role": "user", "content": user_content(task, self.task_images)})
        self._inbox.images_attached(self.task_images, with_task=True)

    def _switch_protocol(self, new: ToolProtocol, why: str) -> None:
        old = self._protocol
        self._protocol = new
        self._emit(ev.ProtocolSelected(self.session_id, new, why))
        tools = self._calls.tools
        if old is not None and system_base(old, tools) != system_base(new, tools) and self._messages:
            current, before = str(self._messages[0].get("content") or ""), system_base(old, tools)
            tail = current[len(before):] if current.startswith(before) else ""  # the rules stay
            self._replace_history([{"role": "system", "content": system_base(new, tools) + tail},
                                   *self._messages[1:]])

    # ------------------------------------------------------------------ internals: a reply
    def _count_mistake(self, message: str) -> None:
        self._mistakes += 1
        self._emit(ev.MistakeCounted(self.session_id, self._mistakes, self.config.max_consecutive_mistakes, message))

    def _mistakes_outcome(self) -> AgentOutcome | None:
        if self._mistakes < self.config.max_consecutive_mistakes:
            return None
        self._needs_input = True
        return self._outcome(
            RunStatus.NEEDS_INPUT,
            f"made {self._mistakes} mistakes in a row; waiting for the user's guidance",
        )

    async def _handle_reply(self, reply: ReplyCalls) -> AgentOutcome | None:
        assert self._protocol is not None
        if not reply.calls:
            if self._protocol is ToolProtocol.NATIVE:
                self._no_tool_streak += 1
                if self._no_tool_streak >= self.config.escalate_after_text_turns:
                    self._switch_protocol(ToolProtocol.TOOL_ONLY, "the model answered without tools; tools are now required")
            self._append({"role": "user", "content": prompts.NO_TOOL_USED})
            self._count_mistake("the reply used no tool")
            return self._mistakes_outcome()
        self._no_tool_streak = 0
        failed = False
        for call in reply.calls:
            if failed:
                self._calls.skip(call, self._protocol)
                continue
            result = await self._calls.run(call, protocol=self._protocol, mode=self._mode,
                                           cut_off=self._model_turns.last_finish == "length",
                                           incomplete=reply.incomplete)
            outcome = self._after_call(result)
            if outcome is not None:
                return outcome
            failed = result.status != "ok"
        return self._mistakes_outcome()

    def _after_call(self, result: CallOutcome) -> AgentOutcome | None:
        """What a call means for the run: mistakes, completion, a question for the user."""
        if result.mistake is not None:
            self._count_mistake(result.mistake)
        if result.progress:
            self._mistakes = 0
        if result.repeated and self._protocol in (ToolProtocol.NATIVE, ToolProtocol.TOOL_ONLY) \
                and not why_not_guided(self.config, self.task_images):
            # the recovery step: a model that repeats itself gets its next calls narrowed
            self._switch_protocol(ToolProtocol.GUIDED, "the model repeated a call that had succeeded; "
                                                       "its next steps are guided")
        if result.completed is not None:
            self._completed = True
            self._last_result = result.completed
            return self._outcome(RunStatus.COMPLETED, "the task is complete", result=result.completed)
        if result.question is not None:
            call_id, question, options = result.question
            self._inbox.asked(call_id, question, options)
            return self._outcome(RunStatus.NEEDS_INPUT, "the agent asked a question",
                                 question=question, options=options)
        return None
