"""What the guided protocol tells a small model: short, directive, one step at a time.

The system prompt is a constant (byte-identical in every session, so the prefix cache
holds it); the per-turn step hint and the request for code go at the end of a request
and are not kept in the history.
"""

from __future__ import annotations

from workstation.agent.guided.symbols import new_function_signature

SYSTEM_PROMPT_GUIDED = """\
You are a coding agent. You fix small problems in a project. Each reply is one tool call.

<tools>
{"name": "read_file", "description": "Show a file.", "parameters": {"path": "the file"}}
{"name": "replace_in_file", "description": "Rewrite one function (target) of a file you have read; you write its new code next.", "parameters": {"path": "the file", "target": "the function"}}
{"name": "write_to_file", "description": "Create a new file; you write its content next.", "parameters": {"path": "the new file"}}
{"name": "execute_command", "description": "Run the project's tests.", "parameters": {"command": "the test command"}}
{"name": "attempt_completion", "description": "The task is done and the tests pass.", "parameters": {}}
</tools>

Steps: read the file the task names, rewrite the function it names, run the tests. If they \
fail, rewrite it again. When they pass, call attempt_completion.
A call looks like this:
<tool_call>
{"name": "read_file", "arguments": {"path": "src/app.py"}}
</tool_call>"""


def step_hint(hint: str) -> str:
    return f"[{hint}]"


def code_request(*, path: str, target: str, task: str, before: str, language: str,
                 failure: str, new_file: bool) -> str:
    """Ask for the new code of one target (the reply is held to a ``` block)."""
    if (signature := new_function_signature(target)) is not None:
        what = f"the new function `{signature}` to add to {path}"
    else:
        what = f"the content of the new file {path}" if new_file else (
            f"the whole new {path}" if target.startswith("(") else f"the new code of `{target}` in {path}")
    parts = [f"Write {what}.", f"The task: {task.strip()}"]
    if before:
        parts.append(f"It is now:\n```{language}\n{before.rstrip()}\n```")
    if failure:
        parts.append(f"The tests failed with:\n{failure.rstrip()}")
    parts.append(f"Reply with the complete new code in one ```{language} block, nothing else.")
    return "\n\n".join(parts)


def completion_result(changed: list[str], test_command: str | None, passed: bool | None,
                      tests_refused: str = "") -> str:
    """The result of a guided session, written from what happened (not by the model)."""
    files = ", ".join(changed) if changed else "no files"
    if test_command and tests_refused:  # nothing runs after a refusal: the last change is untested
        return f"Changed {files}; `{test_command}` was not allowed to run, so the change is untested."
    if test_command and passed:
        return f"Changed {files}; `{test_command}` passes."
    if test_command and passed is False:
        return f"Changed {files}; `{test_command}` still fails."
    return f"Changed {files}."
