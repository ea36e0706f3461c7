"""Every text the agent sends the model, in one place.

The system prompts are constants: no paths, no dates, no task, no mode — so they are
byte-identical across all sessions and turns and vLLM's prefix cache shares them. What
varies (the task, the mode, a file listing) goes into the first user message.
Kept short on purpose: the embedded model (SmolLM2-135M) has an 8k window and little
attention to spare.
"""

from __future__ import annotations

from workstation.agent.tool_specs import text_protocol_description
from workstation.core.agent_events import AgentMode

_RULES = """\
Rules:
- Work step by step. Use exactly one tool in each reply.
- Paths are relative to the project root. Files outside the project cannot be reached.
- Read a file before you change it.
- write_to_file writes the complete content of a file. replace_in_file changes part of a \
file with SEARCH/REPLACE blocks:
------- SEARCH
exact lines from the file
=======
new lines
+++++++ REPLACE
- execute_command runs a shell command in the project root. It cannot ask for input.
- In PLAN mode you may only read and search. In ACT mode you may also edit files and run commands.
- If only the user can answer something, use ask_followup_question.
- When the task is done, use attempt_completion with a short result."""

SYSTEM_PROMPT_NATIVE = (
    "You are a coding agent. You complete the user's task in their project by calling tools.\n\n"
    + _RULES
)
"""System prompt of the native and tool-only protocols (tools travel in ``tools``)."""

SYSTEM_PROMPT_TEXT = (
    "You are a coding agent. You complete the user's task in their project by using tools.\n\n"
    "To use a tool, write its name as an XML tag with each parameter as a tag inside it:\n"
    "<read_file>\n<path>src/app.py</path>\n</read_file>\n"
    "Write the tool use at the end of your reply; the result comes in the next message.\n\n"
    + _RULES
    + "\n\n# Tools\n\n"
    + text_protocol_description()
)
"""System prompt of the text protocol (endpoints without tool support)."""


def task_message(task: str, mode: AgentMode, listing: str) -> str:
    return (
        f"<task>\n{task.strip()}\n</task>\n\n"
        f"<environment_details>\nMode: {mode.value.upper()}\n"
        f"Files in the project root:\n{listing}\n</environment_details>"
    )


def mode_switch_message(mode: AgentMode) -> str:
    if mode is AgentMode.PLAN:
        return "[The user switched to PLAN mode: from now on only read and search, do not edit or run commands.]"
    return "[The user switched to ACT mode: you may now edit files and run commands.]"


NO_TOOL_USED = (
    "[ERROR] You did not use a tool. Every reply must use exactly one tool. "
    "If the task is done, use attempt_completion. If you need the user, use ask_followup_question."
)

INTERRUPTED_RESULT = (
    "[INTERRUPTED] This tool call was interrupted before it finished (the session stopped). "
    "It was not completed and will not be re-run; check the current state before you retry it."
)

HEADLESS_ANSWER = (
    "No user is available to answer questions in this session. Decide yourself with the "
    "information you have, say what you assumed in your final result, and continue."
)

COMPLETION_ACK = "The result was shown to the user."

REPEATED_CALL = (
    "you just made exactly this call (same tool, same arguments) and it succeeded; its result "
    "is above, so it was not run again. Next step: the next part of the task, or "
    "attempt_completion with a short result if the task is done."
)

SKIPPED_RESULT = "[SKIPPED] Not run: an earlier tool call in the same reply failed or was refused."


def plan_mode_refusal(tool: str) -> str:
    return (
        f"{tool} is not allowed in PLAN mode: only read and search. "
        f"Use ask_followup_question to propose the change, or attempt_completion with your plan."
    )


def denied_result(feedback: str) -> str:
    text = "[DENIED] The user refused this action."
    return f"{text} Their feedback: {feedback}" if feedback else text


def headless_refusal(reason: str) -> str:
    return (
        f"[REFUSED] This action needs approval ({reason}), but no one can approve actions in this "
        f"session, so it was not run. Find another way that needs no approval, or finish with "
        f"attempt_completion and explain what is left to do."
    )


FEEDBACK_OPEN = "<feedback>\n"
"""How a user's reply or follow-up opens in the history (the guided protocol's state reads it)."""


def user_feedback(text: str) -> str:
    return f"{FEEDBACK_OPEN}{text}\n</feedback>"


IMAGES_WITH_ANSWER = "[The user's answer came with these images.]"


def question_answer(text: str) -> str:
    return f"<answer>\n{text}\n</answer>"


def text_tool_result(tool: str, args: dict, result: str) -> str:
    target = args.get("path") or args.get("command") or ""
    label = f"[{tool} for '{target}']" if target else f"[{tool}]"
    return f"{label} Result:\n{result}"


CONDENSE_REQUEST = (
    "Summarize the conversation so far for yourself, to continue the task with a shorter "
    "history. Say: what the task is, what you have done (files read, files changed and how, "
    "commands run and their outcome), what you found, and what is left to do. Be brief and "
    "concrete. Do not use tools."
)


def condensed_message(summary: str) -> str:
    return (
        "[Earlier turns of this conversation were condensed to save space. Summary:]\n"
        f"{summary.strip()}\n[Continue the task from here.]"
    )


def restored_files_message(label: str) -> str:
    return (f"[The user restored the project files to the checkpoint '{label}'. Changes made "
            f"after it are gone; read files again before editing them.]")
