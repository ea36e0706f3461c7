"""The agent's tools as data: names and arguments as Cline's, JSON schemas, categories, and
what each tool is beyond its schema — its runner, what it records in the session's work log,
the argument the always-ask rules read, its mark in a pane, the lines an edit adds and
removes. A new tool is one entry here (plus its runner, in ``tool_runners.py``).

Tool definitions are built once at import and never change, so every request of every
session carries byte-identical ``tools`` (vLLM's prefix cache then hits across sessions).
Plan and Act use the same definitions; the mode is enforced when a call runs.

:func:`normalize_arguments` turns what a model sent into clean arguments: it coerces
types (``"true"`` → ``True``, ``"12"`` → ``12``), ignores unknown extra arguments, and
raises :class:`ToolArgumentError` with a message the model can act on.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import orjson

from workstation.agent import tool_runners as runners
from workstation.agent.diff_blocks import count_changed_lines
from workstation.agent.edit_preview import replace_preview, write_preview
from workstation.agent.jail import PathJail
from workstation.agent.tool_api import ToolArgumentError, ToolError, ToolRun, ToolRunner
from workstation.core.approvals import ToolCategory

__all__ = [
    "COMPLETION_TOOL", "OPENAI_TOOLS", "QUESTION_TOOL", "SPECS_BY_NAME", "TOOL_NAMES", "TOOL_SPECS", "Param",
    "ToolArgumentError", "ToolError", "ToolRun", "ToolSpec", "canonical_tool_name", "example_call",
    "normalize_arguments", "summarize_call", "text_protocol_description",
]

WorkLogEntry = Literal["", "read", "changed", "command"]


@dataclass(frozen=True, slots=True)
class Param:
    name: str
    type: str
    """JSON schema type: ``string``, ``integer``, ``number``, ``boolean`` or ``array``."""
    description: str
    required: bool = True
    example: str = ""
    advertised: bool = True
    """False: accepted when sent, but left out of the schema (weak models fill every
    optional field they see; SmolLM2 sent ``end_line: 1`` to read_file)."""


@dataclass(frozen=True, slots=True)
class ToolSpec:
    name: str
    category: ToolCategory
    description: str
    params: tuple[Param, ...]
    in_plan_mode: bool
    run: ToolRunner | None = None
    """Runs one call (``tool_runners.py``); None for the interaction tools, which the agent answers."""
    logs: WorkLogEntry = ""
    """What a successful call adds to the session's work log: the ``path`` it read or
    changed, or the ``command`` it ran (kept for resume and told to the model when condensing)."""
    approval_subject: str = ""
    """The argument the always-ask rules are matched against (a command line)."""
    streams_output: bool = False
    """The call's output streams to the pane as it comes (``CommandOutputStreamed``)."""
    shell: bool = False
    """Runs commands in a shell: only under the sandbox policy, fail closed
    (``agent/sandbox_status.py``)."""
    mark: str = "•"
    """The mark before the call's line in a pane's transcript."""
    line_counts: Callable[[dict[str, Any]], tuple[int, int]] | None = None
    """An edit: the (added, removed) lines its arguments propose."""
    preview: Callable[[PathJail, dict[str, Any]], str] | None = None
    """An edit: the unified diff it would make, shown with its approval (``edit_preview.py``;
    blocking file reads)."""
    input_schema: dict[str, Any] | None = None
    """A tool that brings its own JSON schema (an MCP server's): offered as is (not strict) and
    its arguments passed through, checked only for being an object with the required keys."""

    def edit_line_counts(self, arguments: dict[str, Any]) -> tuple[int, int] | None:
        """(+added, −removed) lines the call proposes; None for a tool that is not an edit."""
        return self.line_counts(arguments) if self.line_counts is not None else None

    def param(self, name: str) -> Param | None:
        for p in self.params:
            if p.name == name:
                return p
        return None

    def schema(self) -> dict[str, Any]:
        props: dict[str, Any] = {}
        for p in self.params:
            if not p.advertised:
                continue
            prop: dict[str, Any] = {"type": p.type, "description": p.description}
            if p.type == "array":
                prop["items"] = {"type": "string"}
            props[p.name] = prop
        return {
            "type": "object",
            "properties": props,
            "required": [p.name for p in self.params if p.required and p.advertised],
            "additionalProperties": False,
        }

    def openai(self) -> dict[str, Any]:
        if self.input_schema is not None:
            return {"type": "function", "function": {
                "name": self.name, "description": self.description, "parameters": self.input_schema}}
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.schema(),
                "strict": True,
            },
        }


QUESTION_TOOL = "ask_followup_question"
"""The interaction tool that asks the user (the agent then needs input)."""
COMPLETION_TOOL = "attempt_completion"
"""The interaction tool that finishes the task."""


def _content_lines(arguments: dict[str, Any]) -> tuple[int, int]:
    content = str(arguments.get("content", ""))
    return content.count("\n") + (0 if content.endswith("\n") or not content else 1), 0


R, E, C, I = ToolCategory.READ, ToolCategory.EDIT, ToolCategory.COMMAND, ToolCategory.INTERACTION
PATH = "Path relative to the project root"

TOOL_SPECS: tuple[ToolSpec, ...] = (
    ToolSpec("read_file", R, "Read a text file. A long file comes in parts: the result says how to "
             "read on (start_line).", (
        Param("path", "string", PATH, example="src/app.py"),
        Param("start_line", "integer", "First line to read (1-based)", required=False, example="1",
              advertised=False),
        Param("end_line", "integer", "Last line to read", required=False, example="40", advertised=False),
    ), True, run=runners.read_file, logs="read", mark="▸"),
    ToolSpec("write_to_file", E, "Create or overwrite a file with the complete new content.", (
        Param("path", "string", PATH, example="src/hello.py"),
        Param("content", "string", "The complete file content", example="print('hello')\n"),
    ), False, run=runners.write_to_file, logs="changed", mark="✎", line_counts=_content_lines,
        preview=write_preview),
    ToolSpec("replace_in_file", E,
             "Edit a file with SEARCH/REPLACE blocks. Each block:\n------- SEARCH\n<exact lines "
             "from the file>\n=======\n<new lines>\n+++++++ REPLACE", (
        Param("path", "string", PATH, example="src/app.py"),
        Param("diff", "string", "One or more SEARCH/REPLACE blocks",
              example="------- SEARCH\nold line\n=======\nnew line\n+++++++ REPLACE"),
    ), False, run=runners.replace_in_file, logs="changed", mark="✎",
        line_counts=lambda a: count_changed_lines(str(a.get("diff", ""))), preview=replace_preview),
    ToolSpec("search_files", R, "Search files under a directory for a regular expression.", (
        Param("path", "string", "Directory to search, relative to the project root", example="."),
        Param("regex", "string", "Regular expression (Python syntax)", example="def main"),
        Param("file_pattern", "string", "Glob of the files to search (optional)",
              required=False, example="*.py"),
    ), True, run=runners.search_files, mark="⌕"),
    ToolSpec("list_files", R, "List files and directories in a directory.", (
        Param("path", "string", "Directory relative to the project root", example="."),
        Param("recursive", "boolean", "List subdirectories too (optional)", required=False,
              example="false"),
    ), True, run=runners.list_files, mark="▸"),
    ToolSpec("list_code_definition_names", R,
             "List classes and functions defined in a source file or in the files of a directory.", (
        Param("path", "string", "File or directory relative to the project root", example="src"),
    ), True, run=runners.list_code_definition_names, mark="▸"),
    ToolSpec("execute_command", C, "Run a shell command in the project root (not interactive).", (
        Param("command", "string", "The shell command", example="python -m pytest -q"),
        Param("requires_approval", "boolean", "True for risky commands (optional)", required=False,
              example="false"),
    ), False, run=runners.execute_command, logs="command", approval_subject="command", streams_output=True,
        shell=True, mark="$"),
    ToolSpec(QUESTION_TOOL, I, "Ask the user a question when you cannot go on without an answer.", (
        Param("question", "string", "The question", example="Which file should I change?"),
        Param("options", "array", "Possible answers (optional)", required=False,
              example='["a.py", "b.py"]'),
    ), True, mark="?"),
    ToolSpec(COMPLETION_TOOL, I, "Finish: call this when the task is done.", (
        Param("result", "string", "What you did, in one or two sentences", example="Added hello.py."),
        Param("command", "string", "A command that shows the result (optional)", required=False,
              example="python hello.py"),
    ), True, mark="✓"),
)

SPECS_BY_NAME: dict[str, ToolSpec] = {s.name: s for s in TOOL_SPECS}
TOOL_NAMES: tuple[str, ...] = tuple(SPECS_BY_NAME)
OPENAI_TOOLS: tuple[dict[str, Any], ...] = tuple(s.openai() for s in TOOL_SPECS)
"""The ``tools`` field of every native request: built once, never mutated."""


def canonical_tool_name(name: str) -> str | None:
    """Map what a model called a tool (``functions.read_file``, ``Read-File``) to a tool name."""
    text = name.strip().strip("`\"'")
    for prefix in ("functions.", "function.", "tools.", "tool."):
        if text.lower().startswith(prefix):
            text = text[len(prefix):]
    text = text.replace("-", "_").replace(" ", "_").lower()
    return text if text in SPECS_BY_NAME else None


_TRUE = {"true", "yes", "1", "on", "y"}
_FALSE = {"false", "no", "0", "off", "n", ""}


def _coerce(tool: str, p: Param, value: Any) -> Any:
    bad = ToolArgumentError(
        f"argument '{p.name}' of {tool} must be {'an' if p.type[0] in 'aei' else 'a'} {p.type}, "
        f"got {orjson.dumps(value).decode()[:80]}"
    )
    if p.type == "string":
        if isinstance(value, str):
            return value
        if isinstance(value, (int, float, bool)):
            return str(value)
        if isinstance(value, (dict, list)) and p.name in ("content", "result", "diff"):
            return orjson.dumps(value, option=orjson.OPT_INDENT_2).decode()
        raise bad
    if p.type == "integer":
        if isinstance(value, bool):
            raise bad
        if isinstance(value, int):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str) and value.strip().lstrip("-").isdigit():
            return int(value.strip())
        raise bad
    if p.type == "number":
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        try:
            return float(str(value).strip())
        except ValueError:
            raise bad from None
    if p.type == "boolean":
        if isinstance(value, bool):
            return value
        if isinstance(value, (int, float)):
            return bool(value)
        if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
            return value.strip().lower() in _TRUE
        raise bad
    if p.type == "array":
        if isinstance(value, list):
            return [str(v) for v in value]
        if isinstance(value, str):
            text = value.strip()
            if text.startswith("["):
                try:
                    parsed = orjson.loads(text)
                except orjson.JSONDecodeError:
                    parsed = None
                if isinstance(parsed, list):
                    return [str(v) for v in parsed]
            return [line.strip() for line in text.splitlines() if line.strip()]
        raise bad
    raise bad


def normalize_arguments(spec: ToolSpec, raw: Any) -> dict[str, Any]:
    """Clean arguments for ``spec`` from what the model sent, or :class:`ToolArgumentError`."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ToolArgumentError(
            f"the arguments of {spec.name} must be a JSON object like {example_call(spec)}"
        )
    if spec.input_schema is not None:
        required = [k for k in spec.input_schema.get("required") or () if isinstance(k, str)]
        missing = [k for k in required if k not in raw]
        if missing:
            names = ", ".join(f"'{m}'" for m in missing)
            raise ToolArgumentError(f"{spec.name} is missing the required argument{'s' if len(missing) > 1 else ''} "
                                    f"{names}. Its parameters: {orjson.dumps(spec.input_schema).decode()[:600]}")
        return dict(raw)
    out: dict[str, Any] = {}
    for p in spec.params:
        value = raw.get(p.name)
        if value is None:
            continue
        out[p.name] = _coerce(spec.name, p, value)
    missing = [p.name for p in spec.params if p.required and p.name not in out]
    if missing:
        names = ", ".join(f"'{m}'" for m in missing)
        raise ToolArgumentError(
            f"{spec.name} is missing the required argument{'s' if len(missing) > 1 else ''} {names}. "
            f"Call it like: {example_call(spec)}"
        )
    return out


def example_call(spec: ToolSpec) -> str:
    if spec.input_schema is not None:
        args = {k: "…" for k in spec.input_schema.get("required") or () if isinstance(k, str)}
        return orjson.dumps({"name": spec.name, "arguments": args}).decode()
    args = {p.name: p.example for p in spec.params if p.required}
    return orjson.dumps({"name": spec.name, "arguments": args}).decode()


def summarize_call(tool: str, args: dict[str, Any]) -> str:
    """One line for people: ``read_file app.py``, ``execute_command: pytest -q``."""
    if tool == "execute_command":
        return f"$ {args.get('command', '')}"
    if tool == "search_files":
        return f"search_files /{args.get('regex', '')}/ in {args.get('path', '.')}"
    if tool == QUESTION_TOOL:
        return f"question: {args.get('question', '')}"
    if tool == COMPLETION_TOOL:
        return f"done: {args.get('result', '')}"
    if tool.startswith("mcp__"):
        shown = orjson.dumps(args).decode() if args else ""
        return f"{tool} {shown[:120] + ('…' if len(shown) > 120 else '')}".rstrip()
    path = args.get("path")
    return f"{tool} {path}" if path is not None else tool


def text_protocol_description() -> str:
    """The tools in the XML-style format of Cline's classic prompt (text protocol)."""
    parts: list[str] = []
    for spec in TOOL_SPECS:
        lines = [f"## {spec.name}", f"Description: {spec.description}", "Parameters:"]
        for p in spec.params:
            if not p.advertised:
                continue
            need = "required" if p.required else "optional"
            lines.append(f"- {p.name}: ({need}) {p.description}")
        lines.append("Usage:")
        lines.append(f"<{spec.name}>")
        for p in (p for p in spec.params if p.advertised):
            lines.append(f"<{p.name}>{p.example}</{p.name}>")
        lines.append(f"</{spec.name}>")
        parts.append("\n".join(lines))
    return "\n\n".join(parts)
