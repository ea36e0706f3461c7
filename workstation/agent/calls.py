"""Running one tool call of the agent: validation, Plan-mode and repeat guards, the
interaction tools, approvals, the tool itself (its spec's runner), its result in the
history and the checkpoint after a change.

:class:`ToolCallRunner` owns what calls leave behind — the session's :class:`WorkLog` and the
repeat guard — and takes everything else as explicit collaborators: the toolbox, the
checkpoint store, the approver, and callbacks into the agent (``emit``, ``append``,
``set_state``, ``between_steps``, ``message_count``). What a call means for the loop (a
mistake, progress, the task completed, a question) comes back as a :class:`CallOutcome`;
the loop keeps its own state.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from workstation.agent import prompts
from workstation.agent.approvals import request_approval
from workstation.agent.checkpoints import CheckpointError, CheckpointStore
from workstation.agent.config import AgentConfig
from workstation.agent.history import Message, valid_text
from workstation.agent.protocols import tool_result_message
from workstation.agent.sandbox_notices import notices, unattended_message
from workstation.agent.sandbox_status import Confinement, sandbox_status
from workstation.agent.tool_set import BUILTIN, ToolSet
from workstation.agent.tool_specs import (
    COMPLETION_TOOL, QUESTION_TOOL, ToolArgumentError, ToolError, ToolSpec, normalize_arguments, summarize_call,
)
from workstation.agent.toolbox import Toolbox
from workstation.agent.toolcalls import RawCall
from workstation.core import agent_events as ev
from workstation.core.agent_events import AgentMode, AgentState, ToolProtocol
from workstation.core.approvals import ApprovalDecision, ApprovalRequest, ToolCategory

log = logging.getLogger("workstation.agent.loop")

Approver = Callable[[ApprovalRequest], Awaitable[ApprovalDecision]]


@dataclass(slots=True)
class WorkLog:
    """What the session's calls did so far: kept across runs (the snapshot) and told to the
    model when the conversation is condensed."""

    files_read: list[str] = field(default_factory=list)
    files_changed: list[str] = field(default_factory=list)
    commands_run: list[str] = field(default_factory=list)

    def note(self, entry: str, args: dict[str, Any]) -> None:
        if entry == "read":
            self.files_read.append(args["path"])
        elif entry == "changed":
            self.files_changed.append(args["path"])
        elif entry == "command":
            self.commands_run.append(args["command"])


@dataclass(frozen=True, slots=True)
class CallOutcome:
    """What one call means for the loop."""

    status: str
    """``ok``, ``error`` or ``denied``: after a call that is not ok, the reply's other calls are skipped."""
    mistake: str | None = None
    """Counts toward the consecutive-mistakes limit, with this message."""
    progress: bool = False
    """A real step forward: the consecutive-mistakes count starts again."""
    completed: str | None = None
    """The task is complete, with this result."""
    question: tuple[str, str, tuple[str, ...]] | None = None
    """``(call id, question, options)``: the agent now waits for the user's answer."""
    repeated: bool = False
    """The model repeated the call that just succeeded: not a mistake but a sign it is lost
    (the loop's recovery step narrows its next calls)."""


class ToolCallRunner:
    def __init__(
        self,
        session_id: str,
        config: AgentConfig,
        toolbox: Toolbox,
        checkpoints: CheckpointStore | None,
        approver: Approver | None,
        *,
        emit: Callable[[ev.AgentEvent], None],
        append: Callable[[Message], None],
        set_state: Callable[[AgentState, str], None],
        between_steps: Callable[[], Awaitable[None]],
        message_count: Callable[[], int],
    ) -> None:
        self.session_id = session_id
        self.config = config
        self.toolbox = toolbox
        self.checkpoints = checkpoints
        self._approver = approver
        self._emit = emit
        self._append = append
        self._set_state = set_state
        self._between_steps = between_steps
        self._message_count = message_count
        self.work = WorkLog()
        self.tools: ToolSet = BUILTIN
        """The run's tools (the built-in ones and its MCP servers'); the agent sets it per run."""
        self._last_ok_call: tuple[str, dict[str, Any]] | None = None

    def forget_last_call(self) -> None:
        """The user spoke: the same call may be right again (the repeat guard starts over)."""
        self._last_ok_call = None

    # ----- results -----
    def finish(self, call: RawCall, args: dict[str, Any], status: str, text: str, protocol: ToolProtocol,
               started: float | None = None, exit_code: int | None = None) -> None:
        """The call's result into the history, and ``ToolCallFinished``."""
        text = valid_text(text)
        self._append(tool_result_message(protocol, call, args, text))
        duration = time.monotonic() - started if started is not None else 0.0
        self._emit(ev.ToolCallFinished(self.session_id, call.id, call.name, status, text, duration, exit_code))

    def skip(self, call: RawCall, protocol: ToolProtocol) -> None:
        """A call after a failed one in the same reply: not run."""
        self.finish(call, {}, "skipped", prompts.SKIPPED_RESULT, protocol)

    def _fail(self, call: RawCall, args: dict[str, Any], message: str, protocol: ToolProtocol, *,
              mistake: bool = True, started: float | None = None) -> CallOutcome:
        self.finish(call, args, "error", f"[ERROR] {message}", protocol, started)
        return CallOutcome("error", mistake=message if mistake else None)

    # ----- one call -----
    async def run(self, call: RawCall, *, protocol: ToolProtocol, mode: AgentMode, cut_off: bool,
                  incomplete: bool = False) -> CallOutcome:
        """Run ``call`` of a reply. ``cut_off``: the reply ended at the token limit;
        ``incomplete``: its tool block was cut (text protocol)."""
        unusable = self.tools.translate(call)
        if unusable is not None:
            return self._fail(call, {}, unusable, protocol)
        spec = self.tools.spec(call.name)
        if spec is None:
            return self._fail(call, {}, f"unknown tool '{call.name}'. The tools are: {', '.join(self.tools.names())}.",
                              protocol)
        name = call.name = spec.name
        if incomplete and cut_off:
            return self._fail(call, {}, f"your {name} was cut off (the reply hit the token limit); "
                                        f"send shorter content, or split the work", protocol)
        try:
            args = normalize_arguments(spec, call.parsed_arguments())
        except (ValueError, ToolArgumentError) as exc:
            extra = " Your reply was cut off by the token limit." if cut_off else ""
            return self._fail(call, {}, f"{exc}{extra}", protocol)
        summary = summarize_call(name, args)
        self._emit(ev.ToolCallStarted(self.session_id, call.id, name, args, summary))
        started = time.monotonic()
        if mode is AgentMode.PLAN and not spec.in_plan_mode:
            return self._fail(call, args, prompts.plan_mode_refusal(name), protocol, started=started)
        if (name, args) == self._last_ok_call and spec.category is not ToolCategory.INTERACTION:
            self.finish(call, args, "error", f"[ERROR] {prompts.REPEATED_CALL}", protocol, started)
            return CallOutcome("error", repeated=True)
        self._last_ok_call = None
        if name == COMPLETION_TOOL:
            self.finish(call, args, "ok", prompts.COMPLETION_ACK, protocol, started)
            self._emit(ev.TaskCompleted(self.session_id, args["result"], args.get("command", "")))
            return CallOutcome("ok", progress=True, completed=args["result"])
        if name == QUESTION_TOOL:
            options = tuple(args.get("options") or ())
            if not self.config.user_present:
                self.finish(call, args, "ok", prompts.HEADLESS_ANSWER, protocol, started)
                return CallOutcome("ok", progress=True)
            self._emit(ev.QuestionAsked(self.session_id, call.id, args["question"], options))
            return CallOutcome("ok", progress=True, question=(call.id, args["question"], options))
        approval_note = ""
        subject = args.get(spec.approval_subject) if spec.approval_subject else None
        reason = self.config.approval.reason_to_ask(spec.category, subject)
        sandbox = None
        if spec.shell:  # fail closed: no sandbox, no unattended commands
            sandbox = await sandbox_status(self.config.sandbox)
            if sandbox.confinement is Confinement.REFUSED:
                return self._fail(call, args, sandbox.refusal, protocol, mistake=False, started=started)
            if sandbox.needs_person:
                reason = "; ".join(r for r in (sandbox.approval_reason, reason) if r)
        attended = False
        if reason:
            preview = await self._preview(spec, args) if self._approver is not None else ""
            decision = await request_approval(
                self._approver, self._emit, session_id=self.session_id, call_id=call.id, tool=name,
                category=spec.category, arguments=args, summary=summary, reason=reason, preview=preview,
                on_wait=lambda: self._set_state(AgentState.AWAITING_APPROVAL, summary))
            if decision is None:
                if sandbox is not None and sandbox.needs_person:
                    notices.say("unattended", unattended_message(sandbox.reason))
                self.finish(call, args, "denied", prompts.headless_refusal(reason), protocol, started)
                return CallOutcome("denied")
            if not decision.approved:
                self.finish(call, args, "denied", prompts.denied_result(decision.feedback), protocol, started)
                return CallOutcome("denied")
            if decision.arguments is not None:
                try:
                    args = normalize_arguments(spec, decision.arguments)
                except ToolArgumentError as exc:
                    return self._fail(call, args, f"the user's edit is invalid: {exc}", protocol, mistake=False,
                                      started=started)
                approval_note = "\n[The user edited this action before approving it.]"
            if decision.feedback:
                approval_note += f"\n[User's note: {decision.feedback}]"
            attended = True  # a person approved this very call
        await self._between_steps()
        self._set_state(AgentState.RUNNING_TOOL, summary)
        on_output = None
        if spec.logs == "command":
            self.work.note("command", args)
        if spec.streams_output:
            on_output = lambda text: self._emit(ev.CommandOutputStreamed(self.session_id, call.id, text))  # noqa: E731
        if spec.run is None:
            return self._fail(call, args, f"{name} cannot run here", protocol, started=started)
        try:
            run = await self.toolbox.run(spec.run, args, on_output=on_output, attended=attended)
        except ToolError as exc:
            return self._fail(call, args, str(exc), protocol, mistake=exc.mistake, started=started)
        if spec.logs in ("read", "changed"):
            self.work.note(spec.logs, args)
        self.finish(call, args, "ok", run.text + approval_note, protocol, started, run.exit_code)
        self._last_ok_call = (name, args)
        if run.changed_files:
            await self.checkpoint(summary)
        return CallOutcome("ok", progress=True)

    async def _preview(self, spec: ToolSpec, args: dict[str, Any]) -> str:
        """The change an edit would make, for the person who approves it (never fatal)."""
        if spec.preview is None:
            return ""
        try:
            return await self.toolbox.in_thread(spec.preview, self.toolbox.jail, args)
        except (OSError, ValueError) as exc:  # the file changed under it, an odd encoding…
            log.warning("edit preview of %s failed: %s", spec.name, exc)
            return ""

    async def checkpoint(self, label: str) -> None:
        """A checkpoint of the worktree at this point of the conversation (failures are told,
        never fatal)."""
        if self.checkpoints is None:
            return
        try:
            cp = await self.checkpoints.create(label, self._message_count())
        except (CheckpointError, OSError) as exc:
            log.warning("checkpoint of %s failed: %s", self.session_id, exc)
            self._emit(ev.ErrorOccurred(self.session_id, f"checkpoint failed: {exc}"))
            return
        if cp is not None:
            self._emit(ev.CheckpointCreated(self.session_id, cp.commit, cp.message_index, cp.label))
