"""The calls a small model may make next, and the regular expression that makes every
reply one of them.

The state of the task narrows the choice (read before edit, run the tests after an edit,
finish only once they pass); every argument is an enum of what exists (files in the
worktree, functions in a file that was read, the project's test command) or a new path
in an existing folder. A call that just succeeded and would change nothing is never
offered again, so the repeated-call guard never has to stop a guided session.

The reply is a hermes ``<tool_call>`` block, the format the chat template renders past
calls in, so the model sees its history and its next call in one format.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from workstation.agent.guided.state import GuidedState
from workstation.agent.guided.symbols import WHOLE_FILE, new_function_target
from workstation.agent.guided.workspace import Workspace

NEW_NAME_PATTERN = r"[A-Za-z0-9_][A-Za-z0-9_-]{0,40}\.(py|md|txt|toml|json|cfg|ini|yaml|yml|js|ts|rs|go|sh)"


@dataclass(frozen=True, slots=True)
class Arg:
    name: str
    values: tuple[str, ...] = ()
    """The allowed values (an enum)."""
    pattern: str = ""
    """Or: a regular expression for the value (already escaped for a JSON string)."""


@dataclass(frozen=True, slots=True)
class Option:
    tool: str
    args: tuple[Arg, ...] = ()


@dataclass(frozen=True, slots=True)
class Choice:
    options: tuple[Option, ...]
    hint: str
    """One line for the model: what the next step is."""

    @property
    def tools(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(o.tool for o in self.options))


def choose(state: GuidedState, ws: Workspace, targets: dict[str, list[str]]) -> Choice:
    """What may come next. ``targets``: path → edit targets of each file the model has
    read (functions of Python files, else just the whole file)."""
    testing = ws.test_command is not None and not state.tests_refused  # a refused command is not asked again
    if state.changed_since_test and testing:
        return Choice((_run_tests(ws),), "You changed the code. Next: run the tests.")
    if state.changed_any and (state.last_test_passed or not testing):
        done = "The tests may not run here" if state.tests_refused else "The tests pass"
        return Choice((Option("attempt_completion"),), f"{done}. Next: attempt_completion.")
    options: list[Option] = []
    named = [p for p in ws.mentioned if not state.shown_current(p)]
    unread = tuple(named) if ws.mentioned else tuple(p for p in ws.files if not state.shown_current(p))
    edits = [Option("replace_in_file", (Arg("path", (path,)), Arg("target", tuple(names))))
             for path, names in narrow_targets(targets, ws).items() if names]
    if unread:
        options.append(Option("read_file", (Arg("path", unread),)))
    if not named:  # what the task names is read first; then it may be changed
        options.extend(edits)
        if ws.new_paths or (ws.wants_new_file and state.reads):
            options.append(_create(ws))
        if testing and state.test_runs == 0 and not ws.mentioned:
            options.append(_run_tests(ws))
    if state.last_test_passed and not state.changed_any:
        options.append(Option("attempt_completion"))
    if not options:
        options.append(Option("attempt_completion"))
    if not state.reads:
        hint = "Next: read the file the task is about."
    elif state.last_test_passed is False:
        hint = ("The tests failed. Next: rewrite the function the task is about with replace_in_file "
                "(the test output says what is wrong), or read another file.")
    else:
        hint = "Next: rewrite the function the task is about with replace_in_file, or read another file."
    return Choice(tuple(options), hint)


def is_test_file(path: str) -> bool:
    name = path.rsplit("/", 1)[-1]
    return name.startswith("test_") or name.endswith(("_test.py", ".test.js", ".test.ts", ".spec.ts")) \
        or "/tests/" in f"/{path}" or "/test/" in f"/{path}"


def functions_to_add(targets: dict[str, list[str]], ws: Workspace) -> list[str]:
    """The signatures of the functions the task asks to add that no Python file read has yet."""
    defined = {t.rsplit(".", 1)[-1] for names in targets.values() for t in names}
    return [f for f in ws.new_functions if f.split("(", 1)[0] not in defined]


def narrow_targets(targets: dict[str, list[str]], ws: Workspace) -> dict[str, list[str]]:
    """The edit targets worth offering: a new function where the task adds one no file has
    (in the Python files it names, else in the code files read); else the functions the task
    names, where it names any; else every target, leaving out test files while other files
    were read."""
    if adding := functions_to_add(targets, ws):
        hosts = [p for p in (ws.mentioned or targets)
                 if p.endswith(".py") and p in targets and not is_test_file(p)]
        if hosts:
            return {p: [new_function_target(adding[0])] for p in hosts}
    named = {path: [t for t in names if t.rsplit(".", 1)[-1] in ws.words or t in ws.words]
             for path, names in targets.items()}
    for path, names in named.items():  # a named method, not its whole class
        named[path] = [t for t in names if not any(o.startswith(t + ".") for o in names)]
    if any(named.values()):
        return {path: names for path, names in named.items() if names}
    code = {path: names for path, names in targets.items() if not is_test_file(path)}
    return code or targets


def _run_tests(ws: Workspace) -> Option:
    assert ws.test_command is not None
    return Option("execute_command", (Arg("command", (ws.test_command,)),))


def _create(ws: Workspace) -> Option:
    if ws.new_paths:
        return Option("write_to_file", (Arg("path", ws.new_paths),))
    folders = [f for f in ws.folders if f != "."]
    prefix = "(" + "|".join(regex_escape(json_text(f) + "/") for f in folders) + ")?" if folders else ""
    return Option("write_to_file", (Arg("path", pattern=prefix + NEW_NAME_PATTERN),))


# ----- the reply format -----
def json_text(value: str) -> str:
    """``value`` as it appears between the quotes of a JSON string."""
    return json.dumps(value, ensure_ascii=False)[1:-1]


_REGEX_SPECIAL = set("\\.^$|?*+()[]{}/-\"")


def regex_escape(text: str) -> str:
    """Escape ``text`` for the engine's regular expressions (xgrammar's dialect)."""
    out: list[str] = []
    for ch in text:
        if ch in _REGEX_SPECIAL:
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif ch == "\r":
            out.append("\\r")
        else:
            out.append(ch)
    return "".join(out)


def arguments_json(args: dict[str, str]) -> str:
    """Arguments as the reply writes them (and as the history stores them)."""
    return json.dumps(args, ensure_ascii=False)


def call_text(tool: str, args: dict[str, str]) -> str:
    return f'<tool_call>\n{{"name": "{tool}", "arguments": {arguments_json(args)}}}\n</tool_call>'


def _option_regex(option: Option) -> str:
    head = regex_escape(f'<tool_call>\n{{"name": "{option.tool}", "arguments": {{')
    parts: list[str] = []
    for index, arg in enumerate(option.args):
        sep = ", " if index else ""
        if arg.values:
            value = "(" + "|".join(regex_escape(json_text(v)) for v in arg.values) + ")"
        else:
            value = "(" + arg.pattern + ")"
        parts.append(regex_escape(f'{sep}"{arg.name}": "') + value + regex_escape('"'))
    return head + "".join(parts) + regex_escape("}}\n</tool_call>")


def choice_regex(choice: Choice) -> str:
    """One alternative per option: the reply is exactly one of the allowed calls."""
    return "(" + "|".join(_option_regex(o) for o in choice.options) + ")"


def parse_call(text: str) -> tuple[str, dict[str, str]] | None:
    """(tool, arguments) of a reply in the format above; None when it is not one."""
    body = text.strip()
    if not (body.startswith("<tool_call>") and body.endswith("</tool_call>")):
        return None
    body = body[len("<tool_call>"): -len("</tool_call>")].strip()
    try:
        data = json.loads(body)
    except ValueError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("name"), str):
        return None
    args = data.get("arguments") or {}
    if not isinstance(args, dict):
        return None
    return data["name"], {str(k): str(v) for k, v in args.items()}


def edit_targets(symbols: list[str] | None) -> list[str]:
    """What a read file offers to rewrite: its symbols, then the whole file."""
    return [*(symbols or ()), WHOLE_FILE]
