"""The checks of a guided edit's drafts, run in a process of their own.

Each draft of a turn (up to 19 with redraws) is applied to the file and checked: it must
parse, use no name the file as read does not leave undefined (pyflakes), not copy a
neighbour's body (a new function), not be the code as read or a draft tried before, not be
cut off; then the usable ones are ranked. On a 500-line file that was some 10 ms of CPU a
draft (``benchmarks/guided_draft_checks.py``): on the app's one loop, the GUI thread and
every session stood still for 120-210 ms a turn, and on a machine without a GPU it is CPU
its engine needs: the checks run cheapest first (a draft cut off is not parsed), and a draft
of one function is looked up alone against the module's names (:mod:`.names`), not by
pyflakes over the whole file. A turn hands each batch of work (the targets of the files
read, the edit's site, one draw's drafts, the queue an earlier turn left) to
:func:`off_loop` in one call, and the functions here are pure: they take texts and
immutable data and return new :class:`Draft` objects in the order of the texts; the
session's :class:`GuidedMemory` stays on the loop, which passes what it holds as snapshots.

A pool of processes, not threads: on a thread the loop still stopped for ~95 ms at a time
(measured), because the syntax trees of 19 drafts of a 500-line file make Python run full
garbage collections of the app's whole heap, and a collection holds the GIL throughout; the
GIL itself cost every loop wake-up up to a switch interval (5 ms). In a child process
neither reaches the loop (blocks of 4-6 ms, measured). The children are started with
``spawn`` (forking a process with Qt and threads is unsafe), ignore Ctrl-C (the app's to
handle), end when the process that started them does (:func:`_exit_with_parent`) and import this package once (~1 s, ~80 MB each, at the first guided turn: even a
read asks for the files' edit targets); each keeps its own caches (:mod:`.symbols`). As with any ``spawn``, a
child imports the main script again (as ``__mp_main__``): a script that runs guided sessions
keeps its work under ``if __name__ == "__main__":`` (``python -m`` modules are not imported).
"""

from __future__ import annotations

import ast
import asyncio
import functools
import multiprocessing
import os
import select
import signal
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, replace
from typing import TypeVar

from workstation.agent.guided import actions
from workstation.agent.guided.drafts import Draft, extract_code, layout_key, rank, same_code
from workstation.agent.guided.names import draft_undefined_names, parses_in_place
from workstation.agent.guided.symbols import (
    WHOLE_FILE, Symbol, append_function, find_symbol, header_line, new_function_signature, new_undefined_names,
    parsed, program_key, python_symbols, replace_symbol, symbol_source, twin_function,
)
from workstation.core.errors import UserError

T = TypeVar("T")

CHECK_PROCESSES = 2
"""Processes of the check pool: two let one session's small batch pass another's large one
(and a fleet's checks use two cores) without a process per session."""

_pool: ProcessPoolExecutor | None = None
_pool_lock = threading.Lock()


class DraftChecksFailed(UserError):
    """The process that checks drafts died twice in a row (killed, out of memory)."""


PARENT_POLL_S = 0.5
"""How often a check process looks for its parent where it cannot wait on it (no pidfd)."""


def _child_setup(parent_pid: int) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C stops the app, which stops the pool
    _exit_with_parent(parent_pid)


def _exit_with_parent(parent_pid: int) -> None:
    """End this check process as soon as ``parent_pid`` (the process that made the pool)
    has ended, however it ended.

    A parent stopped by SIGTERM or SIGKILL runs no exit handler and no shut-down stage, and
    its children wait on the pool's call queue for ever: each holds that pipe's write end
    too, so none sees it close. ``prctl(PR_SET_PDEATHSIG)`` does not fit: it fires when the
    *thread* that started the child ends, and the pool starts its processes from whichever
    thread submits work (a loop in a thread, the pool's manager replacing a dead one). So a
    daemon thread here waits on the parent: on a pidfd (Linux), else by looking at
    ``getppid()`` every :data:`PARENT_POLL_S`; the process then exits at once (a check
    changes nothing, so there is nothing to finish)."""
    if os.getppid() != parent_pid:  # it ended while this process was starting
        os._exit(1)
    try:
        pidfd = os.pidfd_open(parent_pid)
    except (AttributeError, OSError):  # not Linux, or a kernel before 5.3
        pidfd = None
    if os.getppid() != parent_pid:  # it ended before the pidfd was opened (a pid reused since)
        os._exit(1)

    def wait() -> None:
        if pidfd is not None:
            select.select([pidfd], [], [])  # readable once the process has ended
        else:
            while os.getppid() == parent_pid:
                time.sleep(PARENT_POLL_S)
        os._exit(1)

    threading.Thread(target=wait, name="check-parent-watch", daemon=True).start()


def check_pool() -> ProcessPoolExecutor:
    """The pool (started at the first call; its processes start as work comes)."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ProcessPoolExecutor(max_workers=CHECK_PROCESSES, mp_context=multiprocessing.get_context("spawn"),
                                        initializer=_child_setup, initargs=(os.getpid(),))
        return _pool


def close_check_pool() -> None:
    """Stop the pool's processes (work queued is dropped); a later check starts a new pool."""
    global _pool
    with _pool_lock:
        pool, _pool = _pool, None
    if pool is not None:
        pool.shutdown(wait=True, cancel_futures=True)


def _forget(pool: ProcessPoolExecutor) -> None:
    global _pool
    with _pool_lock:
        if _pool is pool:
            _pool = None
    pool.shutdown(wait=False, cancel_futures=True)


async def off_loop(work: Callable[..., T], *args: object) -> T:
    """``work(*args)`` in the check pool (``work`` a module-level function, its arguments
    picklable). Cancelled, the call is dropped: not run if it waits its turn, its answer
    thrown away if it runs (it has copies of what it needs and changes nothing); no task is
    left behind. A pool whose process died is replaced, once."""
    loop = asyncio.get_running_loop()
    for attempt in range(2):
        pool = check_pool()
        try:
            return await loop.run_in_executor(pool, functools.partial(work, *args))
        except BrokenProcessPool as exc:
            _forget(pool)
            if attempt:
                raise DraftChecksFailed(f"the process that checks drafts stopped: {exc}") from exc
    raise AssertionError("unreachable")


def edit_targets_of(texts: dict[str, str]) -> dict[str, list[str]]:
    """Path → edit targets of each file (path → its text now), in order; the Python ones parsed."""
    out: dict[str, list[str]] = {}
    for path, text in texts.items():
        names = None
        if path.endswith(".py"):
            symbols = python_symbols(text)
            names = [s.name for s in symbols] if symbols is not None else None
        out[path] = actions.edit_targets(names)
    return out


@dataclass(frozen=True, slots=True)
class FunctionPlace:
    """Where a draft goes that may be checked alone as one function (:mod:`.names`)."""

    text: str
    """The file as it is now."""
    symbol: Symbol | None
    """The symbol the draft replaces (:mod:`.names` answers for a ``def`` only); None: a new
    function, appended."""


@dataclass(frozen=True, slots=True)
class EditSite:
    """Where an edit's drafts go and what they are compared with (immutable: sent to a
    check process as it is, while the loop goes on)."""

    path: str
    target: str
    """The symbol rewritten, a new function, or :data:`WHOLE_FILE`."""
    current: str | None
    """The file now (None: a new file, or unreadable)."""
    original: str
    """The file as first read (the code before this session's edits)."""
    new_file: bool
    sym_now: Symbol | None = None
    sym_then: Symbol | None = None
    before: str = ""
    """The code the drafts rewrite, as the model was shown it (empty for a new function or file)."""
    header: str | None = None
    """The first line every draft starts with (None: a whole file)."""
    kind: str = "file"

    @property
    def python(self) -> bool:
        return self.path.endswith(".py")

    @property
    def signature(self) -> str | None:
        """``sub(a, b)`` when the drafts are a new function appended to the file."""
        return new_function_signature(self.target) if self.current is not None and self.python else None

    @property
    def alone(self) -> FunctionPlace | None:
        """Where a draft goes in the file as it is now, for checking it alone; None where
        only the whole file answers (a whole file, a new file, a symbol the file does not
        hold now: it does not parse)."""
        if self.current is None:
            return None
        if self.signature is not None:
            return FunctionPlace(self.current, None)
        return FunctionPlace(self.current, self.sym_now) if self.sym_now is not None else None

    @property
    def key(self) -> tuple[str, str, str]:
        """What the session's queue of drafts is for."""
        return (self.path, self.target, self.before)

    def apply(self, code: str) -> str:
        """The whole file with the draft's ``code`` in place."""
        if self.signature is not None and self.current is not None:
            return append_function(self.current, code)
        if self.new_file or self.sym_then is None:
            return code
        if self.sym_now is not None and self.current is not None:
            return replace_symbol(self.current, self.sym_now, code)
        # the file does not parse now (an earlier draft broke it): rebuild from the version read first
        return replace_symbol(self.original, self.sym_then, code)


def edit_site(path: str, target: str, current: str | None, original: str, new_file: bool) -> EditSite:
    """Find the target in the file now and as first read (parses both)."""
    site = EditSite(path, target, current, original, new_file)
    if site.signature is not None:  # written under the task's signature
        return EditSite(path, target, current, original, new_file, header=f"def {site.signature}:", kind="function")
    if target != WHOLE_FILE and current is not None:
        sym_now = find_symbol(current, target)
        read_then = find_symbol(original, target)
        sym_then = read_then or sym_now
        if sym_then is not None:
            base = original if read_then else current
            return EditSite(path, target, current, original, new_file, sym_now, sym_then,
                            symbol_source(base, sym_then), header_line(base, sym_then), sym_then.kind)
    return EditSite(path, WHOLE_FILE, current, original, new_file, before="" if new_file else original)


class _Checker:
    """The checks of one batch: what every draft is compared with, worked out once."""

    def __init__(self, site: EditSite, tried: Iterable[str], *, queued: bool = False) -> None:
        self.site = site
        self.queued = queued
        """Checking drafts of the queue: each is in ``tried`` (taken), which does not count."""
        self.before_ident = self.ident_of(site.before) if site.before else None
        self.tried: dict[str, str] = {t: self.ident(t) for t in tried}
        """Drafts tried before (text → ident)."""
        self.seen: dict[str, Draft] = {}
        """The drafts of this batch checked so far (text → draft)."""

    def ident_of(self, code: str) -> str:
        return (program_key(code) if self.site.python else None) or layout_key(code)

    def ident(self, text: str) -> str:
        return self.ident_of(extract_code(text))

    def draft(self, text: str) -> Draft:
        """The draft checked, cheapest check first: a draft cut off is that whatever else
        it is, so it is neither parsed in the file nor looked up (the reasons are what they
        were when every check ran: the first that applies, in the order below)."""
        if not self.queued and (seen := self.seen.get(text)) is not None:
            return replace(seen)  # drawn twice in one batch: the same checks, the same answer
        site = self.site
        code = extract_code(text)
        new_text = site.apply(code)
        mine = self.ident_of(code)
        problem = None
        if not text.rstrip().endswith("```") or text.count("\n") < 2:
            problem = "cut off"  # the token limit ended it before its closing fence
        else:
            if same_code(new_text, site.current):
                problem = "changes nothing"
            elif site.python:
                problem = self.python_problem(code, new_text)
            if site.signature is not None and problem is None and site.current and (
                    twin := twin_function(code, site.current)):
                problem = f"does what {twin} does"  # a new function copied from its neighbour
            if self.before_ident is not None and mine == self.before_ident:
                problem = problem or "the code as read"  # what the task says is wrong (but for docstrings)
        if any(ident == mine for other, ident in self.tried.items() if not (self.queued and other == text)):
            problem = problem or "tried before"  # that draft, or one that does the same
        draft = Draft(text, new_text, problem, ident=mine)
        if not self.queued:
            self.seen[text] = replace(draft)
        return draft

    def python_problem(self, code: str, new_text: str) -> str | None:
        """Why the Python file ``new_text`` (``code`` applied) cannot be kept, or None: its
        syntax error, else the names it uses that nothing defines and the file did not leave
        undefined before (garbage, or an import it cannot add)."""
        tree, problem = self.syntax(code, new_text)
        if problem is not None:
            return problem
        unknown = self.undefined_names(code, new_text, tree)
        return f"uses names nothing defines: {', '.join(unknown[:5])}" if unknown else None

    def syntax(self, code: str, new_text: str) -> tuple[ast.Module | None, str | None]:
        """(the file's syntax tree, None), or (None, its syntax error); (None, None) where
        ``code`` is one function known to parse in its place (:func:`parses_in_place`):
        the file is not parsed."""
        alone = self.site.alone
        if alone is not None and parses_in_place(alone.text, code, alone.symbol):
            return None, None
        return parsed(new_text)

    def undefined_names(self, code: str, new_text: str, tree: ast.Module | None) -> list[str]:
        """The names ``new_text`` uses that nothing defines and the file did not leave
        undefined: the function alone against the module's names where that answers
        (:mod:`.names`), else pyflakes over the whole file (``tree``, or the file parsed
        here where :meth:`syntax` did not need to)."""
        alone = self.site.alone
        if alone is not None and (found := draft_undefined_names(alone.text, code, alone.symbol)) is not None:
            return found
        return new_undefined_names(self.site.current or self.site.original, new_text if tree is None else tree)


@dataclass(frozen=True, slots=True)
class Checked:
    drafts: list[Draft]
    """The drafts checked, in the order drawn."""
    ranked: list[Draft]
    """The usable ones, best first (:func:`rank`)."""


def check_draw(site: EditSite, texts: list[str], task: str, tried: frozenset[str]) -> Checked:
    """One draw's drafts checked, in order, and ranked. ``tried``: the drafts of this edit
    tried before."""
    checker = _Checker(site, tried)
    drafts = [checker.draft(text) for text in texts]
    return Checked(drafts, rank(drafts, site.before, task))


def check_queue(site: EditSite, waiting: list[str], tried: frozenset[str]) -> list[Draft]:
    """The drafts an earlier turn left waiting (:attr:`GuidedMemory.waiting`, in the order
    the memory hands them out), checked in that order up to the first usable one, each one
    checked one tried before for the next; the caller takes as many from the memory."""
    checker = _Checker(site, tried, queued=True)
    out: list[Draft] = []
    for text in waiting:
        checker.tried[text] = checker.ident(text)
        out.append(checker.draft(text))
        if out[-1].problem is None:
            break
    return out


__all__ = ["Checked", "DraftChecksFailed", "EditSite", "FunctionPlace", "check_draw", "check_pool", "check_queue",
           "close_check_pool", "edit_site", "edit_targets_of", "off_loop"]
