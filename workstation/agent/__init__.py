"""The coding agent: loop, tools, protocols, approvals, checkpoints, context. No Qt.

API in one page (for the fleet, the UI and the CLI)
===================================================

::

    from workstation.agent import Agent, AgentConfig, AgentOutcome, ApprovalBroker
    from workstation.core.agent_events import RunStatus, AgentMode        # events + enums
    from workstation.core.approvals import ApprovalPolicy, ApprovalDecision

    agent = Agent(
        session_id, root, task,                # root: the session's worktree (the path jail)
        client,                                # engine.chat_client.ChatClient (shared httpx client)
        AgentConfig(mode=AgentMode.ACT,
                    approval=ApprovalPolicy.parse("read,edit"),
                    context_window_tokens=8192),   # see agent/config.py for every knob
        on_event=callback,                     # sync, called on the loop thread, never raises into the agent
        approver=broker.request,               # async (ApprovalRequest) -> ApprovalDecision; None = headless
        generation_slot=fleet_slot,            # optional: () -> async CM held around each model turn
        snapshot=AgentSnapshot.from_json(s),   # optional: resume from persisted state, or
        history=messages,                      #   from the bare message list (MessageAppended events)
    )
    agent.reply(user_message)                  # optional: an answer / follow-up before (re)starting
    outcome = await agent.run()                # AgentOutcome(status: RunStatus, message, result, question…)

``run()`` returns when the agent

- ``completed``: called ``attempt_completion`` (``outcome.result``);
- ``needs_input``: asked a question (``outcome.question``/``options``) or made
  ``max_consecutive_mistakes`` mistakes in a row — call ``agent.reply(text)`` then ``run()``
  again (a reply while running is queued for the next turn);
- ``stopped``: ``agent.stop()`` was called (cancels the stream, kills command process groups);
- ``budget_exhausted``: ``max_turns`` / ``max_total_tokens`` of this run were used;
- ``failed``: an engine error that ``max_retries`` retries did not cure (message says why).

Control while it runs (all plain methods, safe from the loop thread): ``pause()`` /
``resume()`` (takes effect at the next step boundary: before a model turn or a tool call),
``stop()``, ``await aclose()``, ``set_mode(AgentMode.PLAN)``, ``reply(text)``.
Checkpoints (not while running): ``await list_checkpoints()``,
``await restore_checkpoint(commit, files=True, conversation=True)``.
Persistence: ``agent.snapshot().to_json()`` at any time; the events ``MessageAppended`` /
``HistoryReplaced`` tell when the history changed. A resumed history whose last tool call
has no result gets an "interrupted" result (the call is not re-run); a pending
``ask_followup_question`` stays pending.

Events (``workstation.core.agent_events``): state changes (``AgentState``, names match the
fleet's ``SessionState`` where they overlap), streamed text / tool-call pieces, usage per
turn, tool call started / finished, command output, approvals requested / resolved,
questions, mistakes, checkpoints, condensing, errors, completion, ``RunFinished``.
``transcript.TranscriptBuilder`` folds them into a readable transcript.

Approvals: ``ApprovalBroker`` keeps pending requests as futures; the UI calls
``broker.resolve(request_id, ApprovalDecision.approve() | .deny(feedback) | .edit(args))``.
Without an approver, actions that need approval are refused with feedback to the model.

Sessions that start together: ``await protocols.prime_prefix_cache(client, protocol)`` once
per endpoint makes the engine compute the shared system prompt + tools before they race.

Protocols (``protocols.py``): native tool calls (with recovery of ``<tool_call>`` text),
tool-only (``tool_choice: "required"``, for weak models such as SmolLM2) and an XML text
protocol; chosen from the endpoint and model, stepping down when a server refuses tools.
The system prompt and tool definitions are constants, byte-identical in every session.
"""

from workstation.agent.approvals import ApprovalBroker
from workstation.agent.config import AgentConfig, ProtocolChoice
from workstation.agent.history import AgentSnapshot
from workstation.agent.loop import Agent, Approver, SlotFactory
from workstation.agent.outcome import AgentOutcome

__all__ = [
    "Agent", "AgentConfig", "AgentOutcome", "AgentSnapshot", "ApprovalBroker", "Approver",
    "ProtocolChoice", "SlotFactory",
]
