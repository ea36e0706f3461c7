"""Running one tool call of the agent: validation, Plan-mode and repeat guards, the
interaction tools, approvals, the tool itself, its result in the history and the
checkpoint after a change. A part of :class:`workstation.agent.loop.Agent`, kept apart so
the loop reads as the loop; it uses the agent's state and helpers (``_emit``,
``_append``, ``_count_mistake`` …)."""

from __future__ import annotations

import logging
import time
from typing import Any

from workstation.agent import prompts
from workstation.agent.approvals import request_approval
from workstation.agent.checkpoints import CheckpointError
from workstation.agent.history import valid_text
from workstation.agent.outcome import AgentOutcome
from workstation.agent.protocols import ReplyCalls, tool_result_message
from workstation.agent.sandbox_notices import notices, unattended_message
from workstation.agent.sandbox_status import Confinement, sandbox_status
from workstation.agent.tool_specs import (
    SPECS_BY_NAME, TOOL_NAMES, ToolArgumentError, ToolError, canonical_tool_name, normalize_arguments,
    summarize_call,
)
from workstation.agent.toolcalls import RawCall
from workstation.core import agent_events as ev
from workstation.core.agent_events import AgentMode, AgentState, RunStatus
from workstation.core.approvals import ToolCategory

log = logging.getLogger("workstation.agent.loop")


class ToolCallRunner:
    """Mixin of :class:`~workstation.agent.loop.Agent`: one tool call, start to result."""

    def _finish_call(self, call: RawCall, args: dict[str, Any], status: str, text: str,
                     started: float | None = None) -> None:
        assert self._protocol is not None
        text = valid_text(text)
        self._append(tool_result_message(self._protocol, call, args, text))
        duration = time.monotonic() - started if started is not None else 0.0
        self._emit(ev.ToolCallFinished(self.session_id, call.id, call.name, status, text, duration))

    def _fail_call(self, call: RawCall, args: dict[str, Any], message: str, *, mistake: bool = True,
                   started: float | None = None) -> str:
        self._finish_call(call, args, "error", f"[ERROR] {message}", started)
        if mistake:
            self._count_mistake(message)
        return "error"

    async def _run_call(self, call: RawCall, reply: ReplyCalls) -> tuple[str, AgentOutcome | None]:
        name = canonical_tool_name(call.name)
        if name is None:
            return self._fail_call(call, {}, f"unknown tool '{call.name}'. The tools are: {', '.join(TOOL_NAMES)}."), None
        call.name = name
        spec = SPECS_BY_NAME[name]
        if reply.incomplete and self._last_finish == "length":
            return self._fail_call(call, {}, f"your {name} was cut off (the reply hit the token limit); "
                                             f"send shorter content, or split the work"), None
        try:
            args = normalize_arguments(spec, call.parsed_arguments())
        except (ValueError, ToolArgumentError) as exc:
            extra = " Your reply was cut off by the token limit." if self._last_finish == "length" else ""
            return self._fail_call(call, {}, f"{exc}{extra}"), None
        summary = summarize_call(name, args)
        self._emit(ev.ToolCallStarted(self.session_id, call.id, name, args, summary))
        started = time.monotonic()
        if self._mode is AgentMode.PLAN and not spec.in_plan_mode:
            return self._fail_call(call, args, prompts.plan_mode_refusal(name), started=started), None
        if (name, args) == self._last_ok_call and spec.category is not ToolCategory.INTERACTION:
            return self._fail_call(call, args, prompts.REPEATED_CALL, started=started), None
        self._last_ok_call = None
        if name == "attempt_completion":
            self._finish_call(call, args, "ok", prompts.COMPLETION_ACK, started)
            self._mistakes = 0
            self._completed = True
            self._last_result = args["result"]
            self._emit(ev.TaskCompleted(self.session_id, args["result"], args.get("command", "")))
            return "ok", self._outcome(RunStatus.COMPLETED, "the task is complete", result=args["result"])
        if name == "ask_followup_question":
            self._mistakes = 0
            options = tuple(args.get("options") or ())
            if not self.config.user_present:
                self._finish_call(call, args, "ok", prompts.HEADLESS_ANSWER, started)
                return "ok", None
            self._pending_question = call.id
            self._question = (args["question"], options)
            self._emit(ev.QuestionAsked(self.session_id, call.id, args["question"], options))
            return "ok", self._outcome(RunStatus.NEEDS_INPUT, "the agent asked a question",
                                       question=args["question"], options=options)
        approval_note = ""
        reason = self.config.approval.reason_to_ask(spec.category, args.get("command") if name == "execute_command" else None)
        sandbox = None
        if name == "execute_command":  # fail closed: no sandbox, no unattended commands
            sandbox = await sandbox_status(self.config.sandbox)
            if sandbox.confinement is Confinement.REFUSED:
                return self._fail_call(call, args, sandbox.refusal, mistake=False, started=started), None
            if sandbox.needs_person:
                reason = "; ".join(r for r in (sandbox.approval_reason, reason) if r)
        attended = False
        if reason:
            decision = await request_approval(
                self._approver, self._emit, session_id=self.session_id, call_id=call.id, tool=name,
                category=spec.category, arguments=args, summary=summary, reason=reason,
                on_wait=lambda: self._set_state(AgentState.AWAITING_APPROVAL, summary))
            if decision is None:
                if sandbox is not None and sandbox.needs_person:
                    notices.say("unattended", unattended_message(sandbox.reason))
                self._finish_call(call, args, "denied", prompts.headless_refusal(reason), started)
                return "denied", None
            if not decision.approved:
                self._finish_call(call, args, "denied", prompts.denied_result(decision.feedback), started)
                return "denied", None
            if decision.arguments is not None:
                try:
                    args = normalize_arguments(spec, decision.arguments)
                except ToolArgumentError as exc:
                    return self._fail_call(call, args, f"the user's edit is invalid: {exc}", mistake=False,
                                           started=started), None
                approval_note = "\n[The user edited this action before approving it.]"
            if decision.feedback:
                approval_note += f"\n[User's note: {decision.feedback}]"
            attended = True  # a person approved this very call
        await self._between_steps()
        self._set_state(AgentState.RUNNING_TOOL, summary)
        on_output = None
        if name == "execute_command":
            self._commands_run.append(args["command"])
            on_output = lambda text: self._emit(ev.CommandOutputStreamed(self.session_id, call.id, text))  # noqa: E731
        try:
            run = await self._toolbox.run(name, args, on_output=on_output, attended=attended)
        except ToolError as exc:
            status = self._fail_call(call, args, str(exc), mistake=exc.mistake, started=started)
            return status, None
        if name == "read_file":
            self._files_read.append(args["path"])
        elif name in ("write_to_file", "replace_in_file"):
            self._files_changed.append(args["path"])
        self._mistakes = 0
        self._finish_call(call, args, "ok", run.text + approval_note, started)
        self._last_ok_call = (name, args)
        if run.changed_files:
            await self._checkpoint(summary)
        return "ok", None

    async def _checkpoint(self, label: str) -> None:
        if self.checkpoints is None:
            return
        try:
            cp = await self.checkpoints.create(label, len(self._messages))
        except (CheckpointError, OSError) as exc:
            log.warning("checkpoint of %s failed: %s", self.session_id, exc)
            self._emit(ev.ErrorOccurred(self.session_id, f"checkpoint failed: {exc}"))
            return
        if cp is not None:
            self._emit(ev.CheckpointCreated(self.session_id, cp.commit, cp.message_index, cp.label))
