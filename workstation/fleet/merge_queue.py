"""The merge queue: sessions marked ready, merged (or rebased) one by one onto a target
branch, each followed by the repository's test command as a gate.

It works in a temporary worktree of its own, detached at the target's tip: the user's
checkout and the target branch are not touched while it runs. Each ready session's branch
is merged there (``git merge --no-ff``, or with ``rebase`` its commits replayed by
``git rebase --onto``), then the gate runs there, inside the sandbox. The queue stops at the
first session whose worktree has uncommitted changes, whose branch conflicts, or whose gate
fails, and then **nothing moves**: the target stays where it was (the report says what
passed before the stop). Only when every session merged and passed is the target moved —
by a fast-forward to the queue's result (``review.move_branch``: refused when the target's
checkout has uncommitted changes, or when the target moved meanwhile). The temporary
worktree is removed at the end, whatever happened; one queue runs per repository at a time
(a lock file beside the temporary worktrees, across processes).

A session whose branch has nothing the target lacks is skipped (named in the report).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workstation.core.errors import UserError
from workstation.fleet import review
from workstation.fleet.bootstrap import Bootstrap, bootstrap_of, place_files
from workstation.fleet.gitproc import GitRunner
from workstation.fleet.session import SessionRecord
from workstation.fleet.workspace_ops import workspace_of
from workstation.fleet.worktrees import remove_worktree

log = logging.getLogger(__name__)

GATE_OUTPUT_MAX_CHARS = 40_000
DEFAULT_GATE_TIMEOUT_S = 1800.0


@dataclass(frozen=True, slots=True)
class QueueItem:
    """One ready session, as the queue needs it."""

    session_id: str
    name: str
    workspace: review.Workspace
    bootstrap: Bootstrap = Bootstrap()


@dataclass(frozen=True, slots=True)
class QueueEvent:
    """What the queue is doing, for a printer or a pane."""

    kind: str
    """``merging``, ``merged``, ``skipped``, ``gate``, ``output``, ``gate_done``, ``stopped``, ``landed``."""
    session: str
    """The session's name ('' for the queue as a whole)."""
    text: str = ""
    exit_code: int | None = None


@dataclass(slots=True)
class MergeReport:
    into: str
    merged: list[str] = field(default_factory=list)
    """Sessions now in the target branch, in order (empty when the queue stopped)."""
    passed: list[str] = field(default_factory=list)
    """Sessions that merged and passed the gate in the trial, before a stop."""
    skipped: list[str] = field(default_factory=list)
    stopped_at: str | None = None
    kind: str | None = None
    """Why it stopped: ``uncommitted``, ``conflict``, ``gate``, ``target`` (the target could
    not be moved), ``error``; None when everything landed."""
    reason: str | None = None
    """The stop in a sentence."""
    conflicts: tuple[str, ...] = ()
    gate_exit: int | None = None
    gate_output: str = ""
    commit: str | None = None
    """The target's tip afterwards (unchanged when it stopped)."""

    @property
    def ok(self) -> bool:
        return self.kind is None

    def to_json(self) -> dict[str, Any]:
        return {"merged": self.merged, "stopped_at": self.stopped_at, "reason": self.reason,
                "kind": self.kind, "into": self.into, "commit": self.commit, "passed": self.passed,
                "skipped": self.skipped, "conflicts": list(self.conflicts), "gate_exit": self.gate_exit}


def item_of(rec: SessionRecord) -> QueueItem:
    return QueueItem(rec.session_id, rec.name, workspace_of(rec), bootstrap_of(rec.spec))


def pick_ready(records: Sequence[SessionRecord], names: Sequence[str] = ()) -> list[SessionRecord]:
    """The queue's sessions: those named (by name or id, in that order), or else every session
    marked ready, in the order they were marked. Each must be marked ready and not working."""
    if names:
        by_key = {r.name: r for r in records} | {r.session_id: r for r in records}
        missing = [n for n in names if n not in by_key]
        if missing:
            raise UserError(f"no session named {', '.join(missing)}")
        chosen = [by_key[n] for n in names]
        unready = [r.name for r in chosen if not r.ready_at]
        if unready:
            raise UserError(f"not marked ready: {', '.join(unready)}",
                            hint=f"mark it first: workstation ready {' '.join(unready)}")
    else:
        chosen = sorted((r for r in records if r.ready_at), key=lambda r: r.ready_at)
        if not chosen:
            raise UserError("no session is marked ready", hint="workstation ready NAME … (or the pane's menu)")
    busy = [r.name for r in chosen if r.state.is_working]
    if busy:
        raise UserError(f"still working: {', '.join(busy)}", hint="pause or stop them before merging")
    return chosen


async def commit_for_ready(git: GitRunner, rec: SessionRecord, message: str | None = None) -> str | None:
    """What marking a session ready does to its worktree: its uncommitted work is committed on
    its branch (the queue merges branches). Returns the new commit, None when it was clean."""
    ws = workspace_of(rec)
    if not await review.uncommitted_paths(git, ws):
        return None
    first = rec.spec.task.strip().splitlines()[0] if rec.spec.task.strip() else rec.name
    result = await review.commit_session(git, ws, message or f"{rec.name}: {first}"[:200])
    return result.commit


class _Stop(Exception):
    def __init__(self, item: QueueItem | None, kind: str, reason: str, **extra: Any) -> None:
        super().__init__(reason)
        self.item, self.kind, self.reason, self.extra = item, kind, reason, extra


def queue_root(data_dir: Path, repo_path: Path) -> Path:
    digest = hashlib.sha1(os.path.realpath(repo_path).encode()).hexdigest()[:8]
    return data_dir / "merge-queue" / f"{repo_path.name}-{digest}"


async def run_queue(
    git: GitRunner,
    items: Sequence[QueueItem],
    *,
    into: str,
    gate: str,
    data_dir: Path,
    sandbox: Any,
    rebase: bool = False,
    attended: bool = True,
    gate_timeout_s: float = DEFAULT_GATE_TIMEOUT_S,
    on_event: Callable[[QueueEvent], None] | None = None,
    require_gate: bool = True,
) -> MergeReport:
    """Merge ``items`` in order onto ``into``, gate each, and move ``into`` only if all passed.

    ``gate`` runs in the trial worktree under ``sandbox`` (a ``SandboxPolicy``; None refuses
    to run it); ``attended``: a person asked for this gate just now (the CLI, the window).
    Mistakes in the request (no items, several repositories, unknown target, empty gate)
    raise ``UserError`` before anything happens; everything after ends in the report. With
    ``require_gate=False`` an empty gate merges without one (a person chose that, for one
    session, in the window's merge dialog).
    """
    say = on_event or (lambda _e: None)
    if not items:
        raise UserError("no sessions to merge", hint="mark sessions ready first: workstation ready NAME …")
    if not gate.strip() and require_gate:
        raise UserError("the merge queue needs a gate: the repository's test command (--gate \"CMD\")")
    repo_path = items[0].workspace.repo_path
    common = await _common_dir(git, repo_path)
    for item in items[1:]:
        if await _common_dir(git, item.workspace.repo_path) != common:
            raise UserError(f"{item.name} belongs to another repository ({item.workspace.repo_path}); "
                            f"one queue merges into one repository")
    if len({i.session_id for i in items}) != len(items):
        raise UserError("a session is named twice in the queue")
    start = await git.rev(f"refs/heads/{into}^{{commit}}", cwd=repo_path)
    if start is None:
        raise UserError(f"target branch {into!r} does not exist in {repo_path}")
    report = MergeReport(into, commit=start)
    root = queue_root(data_dir, repo_path)
    root.mkdir(parents=True, exist_ok=True)
    with _queue_lock(root):
        await _clear_leftovers(git, repo_path, root)
        trial = root / f"{_slug(into)}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
        async with git.repo_lock(common):
            await git.run(["worktree", "add", "--quiet", "--detach", str(trial), start], cwd=repo_path,
                          timeout_s=1800)
        try:
            await _place_bootstrap(git, repo_path, trial, items)
            head = await _trial(git, items, trial, report, gate=gate, sandbox=sandbox, rebase=rebase,
                                attended=attended, gate_timeout_s=gate_timeout_s, say=say)
            try:
                await review.move_branch(git, repo_path, into, start, head, why="the merge queue")
            except UserError as exc:
                raise _Stop(None, "target", f"could not move {into}: {exc}") from exc
            report.merged = list(report.passed)
            report.commit = head
            say(QueueEvent("landed", "", f"{into} is now {head[:10]} ({len(report.merged)} merged)"))
        except _Stop as stop:
            report.stopped_at = stop.item.name if stop.item is not None else None
            report.kind, report.reason = stop.kind, stop.reason
            report.conflicts = tuple(stop.extra.get("conflicts", ()))
            report.gate_exit = stop.extra.get("gate_exit")
            report.gate_output = stop.extra.get("gate_output", "")
            say(QueueEvent("stopped", report.stopped_at or "", stop.reason))
        finally:
            await remove_worktree(git, repo_path, trial, branch=None)
    return report


async def _trial(git: GitRunner, items: Sequence[QueueItem], trial: Path, report: MergeReport, *,
                 gate: str, sandbox: Any, rebase: bool, attended: bool, gate_timeout_s: float,
                 say: Callable[[QueueEvent], None]) -> str:
    """Merge and gate every item in the trial worktree; returns its final commit."""
    for item in items:  # everything the queue can check up front, before any merge
        ws = item.workspace
        if not ws.worktree_path.is_dir():
            raise _Stop(item, "uncommitted", f"the worktree of {item.name} is gone ({ws.worktree_path})")
        dirty = await review.uncommitted_paths(git, ws)
        if dirty:
            raise _Stop(item, "uncommitted", f"{item.name} has uncommitted changes ({len(dirty)} file(s), "
                                             f"e.g. {dirty[0]}); mark it ready again to commit them")
        if await git.rev(f"refs/heads/{ws.branch}^{{commit}}", cwd=ws.repo_path) is None:
            raise _Stop(item, "error", f"the branch {ws.branch} of {item.name} no longer exists")
    ident = await git.identity_args(trial)
    head = await git.out(["rev-parse", "HEAD"], cwd=trial)
    for item in items:
        ws = item.workspace
        tip = await git.rev(f"refs/heads/{ws.branch}^{{commit}}", cwd=ws.repo_path)
        assert tip is not None
        ahead = await git.run(["merge-base", "--is-ancestor", tip, head], cwd=trial, check=False)
        if ahead.ok:
            report.skipped.append(item.name)
            say(QueueEvent("skipped", item.name, f"{ws.branch} has nothing {report.into} lacks"))
            continue
        say(QueueEvent("merging", item.name, f"{'rebasing' if rebase else 'merging'} {ws.branch}"))
        head = await _apply(git, ident, trial, head, tip, item, into=report.into, rebase=rebase)
        say(QueueEvent("merged", item.name, head))
        if gate.strip():
            await _gate(item, trial, gate, sandbox=sandbox, attended=attended, timeout_s=gate_timeout_s, say=say)
        report.passed.append(item.name)
    return head


async def _apply(git: GitRunner, ident: list[str], trial: Path, head: str, tip: str, item: QueueItem, *,
                 into: str, rebase: bool) -> str:
    """Merge the session's tip into the trial's ``head`` (or replay its commits onto it);
    a conflict is aborted and stops the queue."""
    if rebase:
        base = await git.out(["merge-base", head, tip], cwd=trial)
        verb, args = "rebase", ["rebase", "--quiet", "--no-autostash", "--onto", head, base, tip]
    else:
        msg = f"Merge {item.workspace.branch} into {into} (merge queue)"
        verb, args = "merge", ["merge", "--no-ff", "--no-edit", "-m", msg, tip]
    res = await git.run([*ident, *args], cwd=trial, check=False, timeout_s=600)
    if not res.ok:
        paths = await _conflicted(git, trial)
        await git.run([verb, "--abort"], cwd=trial, check=False)
        if paths:
            raise _Stop(item, "conflict", f"{verb[:-1]}ing {item.name} conflicts in {_list(paths)}",
                        conflicts=paths)
        raise _Stop(item, "error", f"git could not {verb} {item.name}: {_tail(res)}")
    return await git.out(["rev-parse", "HEAD"], cwd=trial)


async def _gate(item: QueueItem, trial: Path, gate: str, *, sandbox: Any, attended: bool, timeout_s: float,
                say: Callable[[QueueEvent], None]) -> None:
    from workstation.agent.commands import run_command
    from workstation.agent.tool_api import ToolError

    if sandbox is None:
        raise _Stop(item, "gate", "the gate was not run: no sandbox policy was given")
    say(QueueEvent("gate", item.name, gate))
    try:
        result = await run_command(gate, str(trial), timeout_s=timeout_s, max_output_chars=GATE_OUTPUT_MAX_CHARS,
                                   on_output=lambda text: say(QueueEvent("output", item.name, text)),
                                   sandbox=sandbox, attended=attended)
    except ToolError as exc:
        raise _Stop(item, "gate", f"the gate was not run for {item.name}: {exc}") from exc
    say(QueueEvent("gate_done", item.name, result.output, result.exit_code))
    if result.timed_out:
        raise _Stop(item, "gate", f"the gate `{gate}` timed out after {timeout_s:g} s on {item.name}",
                    gate_output=result.output)
    if result.exit_code != 0:
        raise _Stop(item, "gate", f"the gate `{gate}` failed on {item.name} (exit status {result.exit_code})",
                    gate_exit=result.exit_code, gate_output=result.output)


async def _place_bootstrap(git: GitRunner, repo_path: Path, trial: Path, items: Sequence[QueueItem]) -> None:
    """The trial worktree gets the repository's bootstrap files (the gate may need ``.env``
    or linked dependencies); the setup command is not run (put it in the gate if needed)."""
    boot = items[0].bootstrap
    if boot.paths:
        try:
            await git.blocking(place_files, repo_path, trial, Bootstrap(copy=boot.copy, link=boot.link))
        except UserError as exc:
            raise _Stop(None, "error", f"could not prepare the trial worktree: {exc}") from exc


async def _clear_leftovers(git: GitRunner, repo_path: Path, root: Path) -> None:
    """Trial worktrees an interrupted queue left (we hold the lock: none is in use)."""
    for old in sorted(p for p in root.iterdir() if p.is_dir()):
        log.info("removing the merge queue's leftover worktree %s", old)
        await remove_worktree(git, repo_path, old, branch=None)


@contextlib.contextmanager
def _queue_lock(root: Path):  # type: ignore[no-untyped-def]
    path = root.parent / f"{root.name}.lock"
    fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise UserError("another merge queue is running on this repository",
                            hint="wait for it to finish") from None
        yield
    finally:
        os.close(fd)


async def _common_dir(git: GitRunner, path: Path) -> str:
    if not path.is_dir():
        raise UserError(f"the repository {path} is gone")
    out = await git.out(["rev-parse", "--path-format=absolute", "--git-common-dir"], cwd=path)
    return os.path.realpath(out)


async def _conflicted(git: GitRunner, cwd: Path) -> list[str]:
    res = await git.run(["diff", "--name-only", "--diff-filter=U"], cwd=cwd, check=False)
    return res.stdout.split()


def _list(paths: Sequence[str]) -> str:
    return ", ".join(paths[:6]) + (f" and {len(paths) - 6} more" if len(paths) > 6 else "")


def _tail(res: Any) -> str:
    lines = (res.stderr or res.stdout).strip().splitlines()
    return lines[-1] if lines else f"exit status {res.returncode}"


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text)[:40] or "target"
