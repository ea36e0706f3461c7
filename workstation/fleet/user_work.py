"""What of a session is the user's own work: what a person did in it that its agent did not
(Qt-free). The demo keeps such sessions instead of replacing them; the answer is the list of
reasons, empty where nothing of the user's was found.

Read only from what the app keeps, and cautious: where it cannot be told, the session counts
as the user's.

- The transcript (the store's events): a message the user sent (``UserMessageAdded``; the task
  itself is not one), an approval a person answered (``ApprovalResolved`` by ``user``; one
  refused because nobody could answer is by ``nobody``), a checkpoint restored, a mode switched
  (``ModeChanged`` comes only from ``Fleet.set_mode``).
- The record: a new name (the spec keeps the name it was made with), the ready mark, the
  archive (merged, discarded, archived), the background mark, a budget.
- Git: the session's branch no longer at the commit it started from (the agent's checkpoints
  live on a private ref, never on the branch, so any commit there is one somebody made on
  purpose), another branch or a detached HEAD in its worktree, and files that differ from the
  agent's latest checkpoint (tracked and new, not ignored: what a checkpoint holds) where no
  step of the agent explains them. A checkpoint holds everything written before it; what
  differs from the latest one was changed later, by a person or by a tool call that ended
  after it without a checkpoint of its own (interrupted, failed, or the app quit before the
  checkpoint was taken — at a demo's ``--duration`` that is common): a file last written
  before the last such call ended is the agent's, a later one the user's, and with no such
  call every difference is the user's; a deletion cannot be dated and counts as the user's.
  Without any checkpoint (checkpoints off) the worktree is compared with its HEAD and every
  step of the agent dates its files. Missed: a file the user changes while the agent is
  still running tools after its last checkpoint.

Not counted: pausing, stopping, resuming, watching a session in the focus view — they leave
nothing behind to lose; ignored files — git does not see them and neither does a checkpoint;
the session's environment (shared links, bootstrap copies and links) — the fleet put it there.

:func:`repository_work` asks the same of a sample repository the demo made (a session merged
into its ``main`` or a bug's branch, a commit or a branch made there by hand, a changed file
in its checkout):
its folder is deleted only when nothing there is the user's.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from workstation.agent.checkpoints import ref_for
from workstation.agent.worktree_snapshot import excluding, worktree_tree
from workstation.fleet.gitproc import GitCommandError, GitRunner
from workstation.fleet.session import SessionRecord
from workstation.fleet.store import Store, StoredEvent

SAMPLE_AUTHOR_EMAIL = "demo@workstation.invalid"
"""Who made every commit of a sample repository (``sample_repos._AUTHOR``)."""
_SAMPLE_BRANCHES = ("refs/heads/main", "refs/heads/bug/")
_NOBODY = "no one can approve in this session"
"""The feedback of an approval refused because nobody could answer it."""
_SHOWN_FILES = 3


async def user_work(store: Store, git: GitRunner, rec: SessionRecord) -> tuple[str, ...]:
    """Why ``rec`` holds work of the user's ("you sent it 2 messages", …); empty for none.
    Reads the session's stored events and its worktree; changes nothing (the worktree's tree
    is written through a temporary index, as a checkpoint is: ``worktree_snapshot``)."""
    events = await store.load_events(rec.session_id)
    reasons = [*transcript_reasons(events), *record_reasons(rec)]
    worktree = Path(rec.worktree_path) if rec.worktree_path else None
    if worktree is None or not worktree.is_dir():
        return tuple(reasons)  # nothing on disk to lose
    try:
        reasons += await _git_reasons(git, rec, worktree, events)
    except (GitCommandError, OSError) as exc:
        reasons.append(f"its worktree could not be read ({exc}), so it counts as yours")
    return tuple(reasons)


async def repository_work(git: GitRunner, repo: Path) -> tuple[str, ...]:
    """Why the sample repository ``repo`` holds work of the user's: commits on its branches
    that the sample did not make, branches besides ``main`` and the bugs' (a session's ``ws/``
    branch counts: the sessions' own are gone by the time this is asked), changed or new
    files in its checkout. A repository git cannot read counts as the user's."""
    try:
        authors = await git.run(["log", "--branches", "--format=%ae"], cwd=repo)
        heads = await git.run(["for-each-ref", "--format=%(refname)", "refs/heads"], cwd=repo)
        status = await git.run(["status", "--porcelain", "-z", "--untracked-files=all"], cwd=repo)
    except (GitCommandError, OSError) as exc:
        return (f"it could not be read ({exc}), so it counts as yours",)
    reasons = []
    made = sum(1 for email in authors.stdout.split() if email != SAMPLE_AUTHOR_EMAIL)
    if made:
        reasons.append(f"{_count(made, 'commit')} the sample did not make")
    other = [ref.removeprefix("refs/heads/") for ref in heads.stdout.split()
             if ref != _SAMPLE_BRANCHES[0] and not ref.startswith(_SAMPLE_BRANCHES[1])]
    if other:
        reasons.append(f"branch {', '.join(other[:_SHOWN_FILES])}{' …' if len(other) > _SHOWN_FILES else ''}")
    changed = [entry for entry in status.stdout.split("\0") if len(entry) > 3]
    if changed:
        reasons.append(f"{_count(len(changed), 'changed file')} in its checkout")
    return tuple(reasons)


def transcript_reasons(events: Sequence[StoredEvent]) -> list[str]:
    messages = sum(1 for e in events if e.kind == "UserMessageAdded")
    answered = sum(1 for e in events if e.kind == "ApprovalResolved" and _answered_by_user(e.payload))
    reasons = []
    if messages:
        reasons.append(f"you sent it {_count(messages, 'message')}")
    if answered:
        reasons.append(f"you answered {_count(answered, 'approval')}")
    if any(e.kind == "CheckpointRestored" for e in events):
        reasons.append("you restored a checkpoint")
    if any(e.kind == "ModeChanged" for e in events):
        reasons.append("you switched its mode")
    return reasons


def record_reasons(rec: SessionRecord) -> list[str]:
    reasons = []
    if rec.spec.name and rec.name != rec.spec.name:
        reasons.append(f"you renamed it (from {rec.spec.name})")
    if rec.ready_at:
        reasons.append("you marked it ready to merge")
    if rec.archived:
        reasons.append(f"it is in the archive ({rec.archived})")
    if rec.spec.background:
        reasons.append("you marked it background")
    if rec.spec.budget_tokens is not None or rec.spec.budget_usd is not None:
        reasons.append("you gave it a budget")
    return reasons


def _answered_by_user(payload: dict) -> bool:
    by = payload.get("by")
    if by is not None:
        return by == "user"
    return payload.get("feedback") != _NOBODY  # written before the field: the refusal's own words


def agent_wrote_until(events: Sequence[StoredEvent], *, checkpointed: bool) -> float:
    """Until when the agent's own steps may have written files that its latest checkpoint
    lacks (Unix time; 0.0: none). ``checkpointed``: the session has a checkpoint to compare
    with: a checkpoint holds everything written before it, so only the tool calls that ended
    after the latest one count (one that changed files and whose checkpoint never came: the
    app quit in between, the call failed or was interrupted); without one, every call counts."""
    until = 0.0
    open_calls: set[str] = set()
    for e in events:
        if e.kind == "ToolCallStarted":
            open_calls.add(str(e.payload.get("call_id", "")))
        elif e.kind == "ToolCallFinished":
            open_calls.discard(str(e.payload.get("call_id", "")))
            until = max(until, e.ts)
        elif e.kind == "CheckpointCreated":
            until = 0.0 if checkpointed else max(until, e.ts)
        elif e.kind == "ErrorOccurred" and str(e.payload.get("message", "")).startswith("checkpoint failed"):
            until = max(until, e.ts)
    if open_calls and events:  # a call that never finished (the app died in it): all it could
        until = max(until, events[-1].ts)
    return until


async def _git_reasons(git: GitRunner, rec: SessionRecord, worktree: Path,
                       events: Sequence[StoredEvent]) -> list[str]:
    reasons = []
    head = await git.run(["symbolic-ref", "-q", "HEAD"], cwd=worktree, check=False)  # 1: detached
    if head.returncode not in (0, 1):
        raise GitCommandError(head)
    if rec.branch and head.stdout.strip() != f"refs/heads/{rec.branch}":
        other = head.stdout.strip().removeprefix("refs/heads/")
        reasons.append(f"its worktree has {other} checked out" if other else "its worktree has a detached HEAD")
    if rec.branch and rec.start_commit:
        tip = await git.rev(f"refs/heads/{rec.branch}^{{commit}}", cwd=worktree, strict=True)
        if tip is not None and tip != rec.start_commit:
            ahead = int((await git.run(["rev-list", "--count", f"{rec.start_commit}..{tip}"], cwd=worktree)).stdout)
            reasons.append(f"its branch {rec.branch} has {_count(ahead, 'commit')} of its own" if ahead
                           else f"its branch {rec.branch} was moved")
    changed = await changed_files(git, rec, worktree, events)
    if changed:
        shown = ", ".join(changed[:_SHOWN_FILES]) + (" …" if len(changed) > _SHOWN_FILES else "")
        reasons.append(f"{_count(len(changed), 'file')} changed in its worktree after its agent's last step ({shown})")
    return reasons


async def changed_files(git: GitRunner, rec: SessionRecord, worktree: Path,
                        events: Sequence[StoredEvent]) -> list[str]:
    """The worktree's files (paths relative to it) that differ from the agent's latest
    checkpoint and that no step of the agent explains; the session's environment (shared
    links, bootstrap files: ``SessionSpec.environment_paths``) is not among them."""
    checkpoint = await git.rev(f"{ref_for(rec.session_id)}^{{tree}}", cwd=worktree, strict=True)
    base = checkpoint or await git.rev("HEAD^{tree}", cwd=worktree, strict=True)
    if base is None:
        return []
    now = await worktree_tree(lambda args, env: git.out(args, cwd=worktree, env=dict(env)),
                              blocking=git.blocking)
    if now == base:
        return []
    # the environment the fleet put there (shared links, bootstrap files) is left out of the
    # comparison, not of the tree: checkpoints leave it out, but HEAD and older checkpoints may hold it
    environment = excluding(rec.spec.environment_paths) if rec.spec.environment_paths else []
    out = (await git.run(["diff-tree", "-r", "-z", "--no-renames", "--name-status", base, now, *environment],
                         cwd=worktree)).stdout
    fields = out.split("\0")
    entries = [(fields[i], fields[i + 1]) for i in range(0, len(fields) - 1, 2) if fields[i]]
    until = agent_wrote_until(events, checkpointed=checkpoint is not None)
    written = await git.blocking(_mtimes, worktree, [path for status, path in entries if status != "D"])
    return [path for status, path in entries if status == "D" or written.get(path, float("inf")) > until]


def _mtimes(worktree: Path, paths: list[str]) -> dict[str, float]:
    found = {}
    for path in paths:
        try:
            found[path] = os.lstat(worktree / path).st_mtime
        except OSError:
            continue  # gone meanwhile: it cannot be dated, so it counts
    return found


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"
