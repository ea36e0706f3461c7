"""One model turn of the guided protocol: look at the worktree, narrow the next call, let
the model choose it (held to a regular expression, so it is valid by construction), and
for an edit let it write the new code of the one function it chose (held to a code block
that starts where the function starts).

A step with only one possible call (run the tests after an edit, finish once they pass)
is taken without asking the model. The result is an ordinary :class:`ReplyCalls` of real
tool calls (``read_file``, ``replace_in_file``, ``write_to_file``, ``execute_command``,
``attempt_completion``), so approvals, the sandbox, checkpoints and the transcript work
as for any other protocol.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from workstation.agent.config import AgentConfig
from workstation.agent.guided import actions, texts
from workstation.agent.guided.actions import Choice
from workstation.agent.guided.checks import (
    Checked, EditSite, check_draw, check_queue, edit_site, edit_targets_of, off_loop,
)
from workstation.agent.guided.drafts import Draft, GuidedMemory, code_regex, extract_code, max_draft_tokens
from workstation.agent.guided.state import GuidedState, failure_summary, read_state, request_view
from workstation.agent.guided.symbols import WHOLE_FILE, indent_code, symbol_lines
from workstation.agent.guided.workspace import Workspace, look, mentioned_paths
from workstation.agent.history import Message, estimate_tokens
from workstation.agent.protocols import ReplyCalls
from workstation.agent.toolbox import tool_executor
from workstation.agent.toolcalls import RawCall, new_call_id
from workstation.agent.turn import TurnResult
from workstation.core import agent_events as ev
from workstation.engine.chat_client import ChatClient, Usage

log = logging.getLogger(__name__)

CHOICE_MAX_TOKENS = 120
CODE_MAX_TOKENS = 1024
_LANGUAGES = {".py": "python", ".js": "javascript", ".ts": "typescript", ".rs": "rust", ".go": "go",
              ".sh": "bash", ".toml": "toml", ".json": "json", ".md": "markdown", ".yaml": "yaml",
              ".yml": "yaml", ".ini": "ini", ".cfg": "ini"}
_MARKERS = re.compile(r"^\s*(-{7} SEARCH|={7}|\+{7} REPLACE)\s*$", re.M)


@dataclass(slots=True)
class _Spent:
    prompt: int = 0
    completion: int = 0
    cached: int = 0

    def add(self, usage: Usage | None) -> None:
        if usage is not None:
            self.prompt += usage.prompt_tokens
            self.completion += usage.completion_tokens
            self.cached += usage.cached_tokens

    def usage(self) -> Usage | None:
        if not (self.prompt or self.completion):
            return None
        return Usage(self.prompt, self.completion, self.cached)


def language_of(path: str) -> str:
    return _LANGUAGES.get(Path(path).suffix.lower(), "")


def _read_texts(root: Path, paths: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for rel in paths:
        try:
            out[rel] = (root / rel).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
    return out


async def _blocking(fn: Callable[..., Any], *args: Any) -> Any:
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(tool_executor(), functools.partial(fn, *args))


def with_named_in_files(ws: Workspace, texts_now: dict[str, str], root: Path) -> Workspace:
    """``ws`` plus the new files that the files read name ("write hello.py"), where their
    folder exists: a task can live in a file."""
    extra = [p for text in texts_now.values() for p in mentioned_paths(text)
             if p not in ws.files and p not in ws.new_paths and not (root / p).exists()
             and Path(p).parent.as_posix() in ws.folders]
    if not extra:
        return ws
    return replace(ws, new_paths=tuple(dict.fromkeys((*ws.new_paths, *extra)))[:20])


MAX_DRAFT_TEMPERATURE = 1.2


def draft_temperature(base: float, failed: int) -> float:
    """Sampling temperature of new drafts after ``failed`` drafts of the function did not do:
    from ``base`` up by 0.05 a draft, to at most :data:`MAX_DRAFT_TEMPERATURE` (a small model's
    drafts at one temperature soon repeat each other)."""
    return round(min(MAX_DRAFT_TEMPERATURE, max(base, base + 0.05 * failed)), 2)


def _shown(session_id: str, turn: int, text: str) -> ev.TextStreamed:
    """Text the protocol shows that the engine did not generate now (a note, a blank line,
    a draft drawn in an earlier turn): no tokens, so a pane that counts shown text (where
    the chat clients report no generated tokens) does not count it."""
    return ev.TextStreamed(session_id, turn, text, tokens=0)


def _forced(choice: Choice) -> tuple[str, dict[str, str]] | None:
    """The call itself when the choice leaves exactly one."""
    if len(choice.options) != 1:
        return None
    option = choice.options[0]
    args: dict[str, str] = {}
    for arg in option.args:
        if len(arg.values) != 1:
            return None
        args[arg.name] = arg.values[0]
    return option.tool, args


@dataclass(slots=True)
class _Edit:
    tool: str
    args: dict[str, str]
    text: str
    """The code block as the model wrote it (shown in the pane)."""


class GuidedTurn:
    """One turn; built per turn (it holds only what this turn looked at)."""

    def __init__(self, client: ChatClient, messages: list[Message], *, root: Path, task: str,
                 config: AgentConfig, session_id: str, turn: int, max_tokens: int,
                 emit: Callable[[ev.AgentEvent], None], memory: GuidedMemory | None = None) -> None:
        self.client = client
        self.memory = memory
        self.messages = messages
        self.root = Path(root)
        self.task = task
        self.config = config
        self.session_id = session_id
        self.turn = turn
        self.max_tokens = max_tokens
        self.emit = emit
        self.spent = _Spent()
        self.view: list[Message] = messages

    async def run(self) -> TurnResult:
        self.emit(ev.TurnStarted(self.session_id, self.turn))
        shown = ""
        try:
            ws: Workspace = await _blocking(look, self.root, self.task)
            state = read_state(self.messages, ws.test_command)
            if self.memory is not None:  # the first reads outlive a history that lost them
                for path, text in state.first_reads.items():
                    self.memory.originals.setdefault(path, text)
                state.first_reads = {**state.first_reads, **self.memory.originals}
            self.view = request_view(self.messages)
            # room after the view (the loop reckons with the whole history, which is not sent)
            self.max_tokens = max(256, min(self.config.max_tokens_per_turn, self.config.context_window_tokens
                                           - estimate_tokens(self.view) - 600))
            now: dict[str, str] = await _blocking(_read_texts, self.root, list(state.reads))
            ws = with_named_in_files(ws, now, self.root)
            # the check process gets the texts it parses: the state and the listing besides (every
            # file as first read, the last test output) were 2-2.5x the bytes a turn, measured
            readable = {path: now[path] for path in state.reads if path in now and path in ws.files}
            choice = actions.choose(state, ws, await off_loop(edit_targets_of, readable))
            picked = _forced(choice)
            if picked is None:
                picked_text = await self._choose(choice)
                picked = actions.parse_call(picked_text)
                if picked is None:
                    return TurnResult(ReplyCalls({"role": "assistant", "content": picked_text}, []),
                                      picked_text, "stop", self.spent.usage())
            tool, args = picked
            if tool in ("replace_in_file", "write_to_file"):
                edit = await self._write_code(tool, args, state, ws, now)
                tool, args, shown = edit.tool, edit.args, edit.text
            elif tool == "attempt_completion":
                args = {"result": texts.completion_result(sorted(state.changes), ws.test_command,
                                                          state.last_test_passed, state.tests_refused)}
        except BaseException:
            self.emit(ev.TurnFinished(self.session_id, self.turn, "error", shown, 0))
            raise
        call = RawCall(new_call_id(), tool, actions.arguments_json(args))
        message: Message = {"role": "assistant", "content": None, "tool_calls": [call.as_message_entry()]}
        return TurnResult(ReplyCalls(message, [call]), shown, "tool_calls", self.spent.usage())

    # ----- requests -----
    async def _stream(self, messages: list[Message], regex: str, *, max_tokens: int,
                      temperature: float, show: bool, n: int = 1) -> list[str]:
        """The reply's text (``n`` of them: one request, its choices decoded as a batch);
        the first choice streams into the pane when ``show``."""
        parts: dict[int, list[str]] = {0: []}
        usage: Usage | None = None
        extra: dict[str, Any] = {"structured_outputs": {"regex": regex}}
        if n > 1:
            extra["n"] = n
        # aclosing: an emit that raises ends the request now, not when the generator is collected
        async with contextlib.aclosing(self.client.stream_chat(
                messages, max_tokens=max_tokens, temperature=temperature, extra=extra)) as deltas:
            async for delta in deltas:
                if delta.content:
                    parts.setdefault(delta.index, []).append(delta.content)
                    if show and delta.index == 0:  # the engine's tokens, as the delta counts them
                        self.emit(ev.TextStreamed(self.session_id, self.turn, delta.content, delta.events or 1))
                usage = delta.usage or usage
        self.spent.add(usage)
        return ["".join(p) for _, p in sorted(parts.items())]

    def _choice_temperature(self) -> float:
        return self.config.temperature if self.config.temperature is not None else 0.0

    async def _choose(self, choice: Choice) -> str:
        request = [*self.view, {"role": "user", "content": texts.step_hint(choice.hint)}]
        replies = await self._stream(request, actions.choice_regex(choice), max_tokens=CHOICE_MAX_TOKENS,
                                     temperature=self._choice_temperature(), show=False)
        return replies[0]

    async def _write_code(self, tool: str, args: dict[str, str], state: GuidedState, ws: Workspace,
                          now: dict[str, str]) -> _Edit:
        path = args["path"]
        current = now.get(path)
        new_file = tool == "write_to_file" and current is None
        site = await off_loop(edit_site, path, args.get("target", WHOLE_FILE), current,
                              state.first_reads.get(path, current or ""), new_file)
        failure = failure_summary(state.last_test_output) if state.last_test_passed is False else ""
        ask = texts.code_request(path=path, target=site.target, task=self.task, before=site.before,
                                 language=language_of(path), failure=failure, new_file=new_file)
        picked = actions.call_text(tool, {"path": path} if new_file else {"path": path, "target": site.target})
        request = [*self.view, {"role": "assistant", "content": picked}, {"role": "user", "content": ask}]
        regex = code_regex(language_of(path), site.header, site.kind)
        memory = self.memory if self.memory is not None and self.memory.key == site.key else None

        chosen: Draft | None = None
        if memory is not None and memory.waiting:  # drafts an earlier turn drew and did not try yet
            for candidate in await off_loop(check_queue, site, list(memory.waiting), frozenset(memory.tried)):
                taken = memory.take(site.key)
                assert taken == candidate.text, "the queue changed while its drafts were checked"
                if candidate.problem is None:
                    chosen = candidate
                    self.emit(_shown(self.session_id, self.turn, candidate.text))
        rest: list[Draft] = []
        if chosen is None:
            checked = await self._draw(request, regex, site, first=state.attempts(path, site.target) == 0,
                                       tried=frozenset(memory.tried) if memory is not None else frozenset())
            drafts, ranked = checked.drafts, checked.ranked
            chosen = ranked[0] if ranked else drafts[0]
            rest = ranked[1:]
            if len(drafts) > 1:
                self.emit(_shown(self.session_id, self.turn, f"\n[{len(drafts)} drafts, {len(ranked)} usable; "
                                                             f"trying the best first]"))
            log.info("guided %s turn %d: %d drafts of %s, %d usable", self.session_id, self.turn,
                     len(drafts), site.target, len(ranked))
        if self.memory is not None:
            self.memory.keep(site.key, chosen.text, [d.text for d in rest])
        text, new_text = chosen.text, chosen.new_text
        sym_now = site.sym_now
        if sym_now is not None and current is not None and not _MARKERS.search(new_text):
            search = "\n".join(symbol_lines(current, sym_now))
            replace = "\n".join(indent_code(extract_code(text), sym_now.indent))
            diff = f"------- SEARCH\n{search}\n=======\n{replace}\n+++++++ REPLACE"
            return _Edit("replace_in_file", {"path": path, "target": site.target, "diff": diff}, text)
        fields = {"path": path, "content": new_text} if new_file else {"path": path, "target": site.target,
                                                                         "content": new_text}
        return _Edit("write_to_file", fields, text)

    async def _draw(self, request: list[Message], regex: str, site: EditSite, *, first: bool,
                    tried: frozenset[str]) -> Checked:
        """New drafts: a function's first edit draws a greedy draft (shown as it comes) and, at
        the same time, sampled ones; later edits draw sampled ones, hotter the more drafts of it
        were ``tried``. Drawn again, hotter still, while none is usable (twice at most). Each
        draw's drafts are checked in one call off the loop."""
        limit = max_draft_tokens(site.before or site.original, min(CODE_MAX_TOKENS, self.max_tokens))
        many = max(1, self.config.guided_drafts)
        drafts: list[Draft] = []
        ranked: list[Draft] = []
        for again in range(3):
            if again and ranked:
                break
            temperature = draft_temperature(self.config.guided_retry_temperature, len(tried) + again * many)
            if again:
                self.emit(_shown(self.session_id, self.turn, "\n"))
            asks = [self._stream(request, regex, max_tokens=limit, temperature=temperature,
                                 show=not (first and not again), n=many)]
            if first and not again:
                asks.insert(0, self._stream(request, regex, max_tokens=limit, temperature=0.0, show=True))
            # every request runs to its end (its tokens count) before one's error is raised
            texts_drawn: list[str] = []
            for drawn in await asyncio.gather(*asks, return_exceptions=True):
                if isinstance(drawn, BaseException):
                    raise drawn
                texts_drawn.extend(drawn)
            checked = await off_loop(check_draw, site, texts_drawn, self.task, tried)
            drafts += checked.drafts
            ranked = checked.ranked  # the draws before had none usable, or this one would not be
        return Checked(drafts, ranked)


__all__ = ["GuidedTurn"]
