"""How a ``workstation run`` ended, session by session: why each one stopped, where its work
is (branch, worktree, changed files), and what the exit status means.

:class:`EndReasons` listens to the fleet while the run goes (the last state change's reason,
the completion's result); :func:`session_details` adds each session's changed files from its
diff; :func:`render_endings` and :func:`exit_meaning` are the words the terminal gets, and
``sessions_detail`` in the JSON line is :func:`session_details` as is.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from workstation.core import agent_events as ev
from workstation.core import fleet_events as fe
from workstation.core.errors import UserError
from workstation.core.session_state import SessionState as S
from workstation.fleet.gitproc import GitCommandError

EXIT_MEANINGS = {
    0: "every session finished its task",
    1: "not every session finished its task",
    2: "a usage mistake; nothing ran",
    130: "interrupted; sessions keep their state (continue with --resume)",
}

_PLAIN = {
    S.DONE: "finished its task",
    S.FAILED: "failed",
    S.NEEDS_INPUT: "waits for a person",
    S.STOPPED: "stopped",
    S.PAUSED: "paused",
    S.ENGINE_WAIT: "waits for its engine",
    S.AWAITING_APPROVAL: "waits for an approval",
    S.QUEUED: "still queued when the run ended",
    S.RUNNING: "still working when the run ended",
    S.READY: "never started",
    S.PREPARING: "never got its worktree",
}

CHANGED_FILES_SHOWN = 6


class EndReasons:
    """The last reason each session's state changed for, and its completion's result, heard
    from the fleet's events (``fleet.changed`` / ``fleet.agent_event``) while the run goes."""

    def __init__(self, fleet: Any) -> None:
        self._fleet = fleet
        self.reasons: dict[str, str] = {}
        self.results: dict[str, str] = {}
        fleet.changed.connect(self._on_changed)
        fleet.agent_event.connect(self._on_agent_event)

    def close(self) -> None:
        self._fleet.changed.disconnect(self._on_changed)
        self._fleet.agent_event.disconnect(self._on_agent_event)

    def _on_changed(self, event: object) -> None:
        if isinstance(event, fe.SessionStateChanged) and event.reason:
            self.reasons[event.session_id] = event.reason

    def _on_agent_event(self, item: fe.SessionAgentEvent) -> None:
        event = item.event
        if isinstance(event, ev.TaskCompleted):
            self.results[item.session_id] = event.result

    def reason(self, summary: fe.SessionSummary) -> str:
        """Why the session stands where it does, in plain words."""
        plain = _PLAIN.get(summary.state, summary.state.label)
        if summary.state is S.DONE:
            result = self.results.get(summary.session_id, "").strip()
            return f"{plain}: {_first_line(result)}" if result else plain
        detail = summary.error or self.reasons.get(summary.session_id, "")
        if detail and detail not in ("starting", "generating", summary.state.value):
            return f"{plain}: {_first_line(detail)}"
        return plain


async def session_details(fleet: Any, summaries: Sequence[fe.SessionSummary], reasons: EndReasons
                          ) -> list[dict[str, Any]]:
    """Per session: ``name``, ``state``, ``reason``, ``branch``, ``changed_files`` (what its
    diff against its base touches; empty when the worktree is gone), and where to look."""
    out = []
    for s in summaries:
        try:
            diff = await fleet.diff(s.session_id)
            changed = [f.path for f in diff.files]
        except (UserError, GitCommandError):  # its worktree is gone, or git cannot read it
            changed = []
        out.append({
            "name": s.name, "state": s.state.value, "reason": reasons.reason(s), "branch": s.branch,
            "changed_files": changed, "base_branch": s.base_branch, "repo": s.repo_path,
            "worktree": s.worktree_path,
        })
    return out


def render_endings(details: Iterable[dict[str, Any]]) -> list[str]:
    """Two lines per session: why it ended; its branch, where, and what it changed."""
    lines: list[str] = []
    for d in details:
        lines.append(f"{d['name']}: {d['reason']}")
        files = d["changed_files"]
        if files:
            shown = ", ".join(files[:CHANGED_FILES_SHOWN]) + (
                f" and {len(files) - CHANGED_FILES_SHOWN} more" if len(files) > CHANGED_FILES_SHOWN else "")
            what = f"{len(files)} file{'s' if len(files) != 1 else ''} changed ({shown})"
        else:
            what = "no changes"
        lines.append(f"  branch {d['branch']} in {d['repo']} (worktree {d['worktree']}): {what}")
        if files:
            lines.append(f"  see it: git -C {d['worktree']} diff {d['base_branch']}")
    return lines


def exit_meaning(code: int, details: Sequence[dict[str, Any]]) -> str:
    """``exit status 1: 2 of 3 sessions did not finish their task (1 failed, 1 needs input)``."""
    meaning = EXIT_MEANINGS.get(code, "")
    if code == 1 and details:
        unfinished: dict[str, int] = {}
        for d in details:
            if d["state"] != S.DONE.value:
                word = S(d["state"]).label
                unfinished[word] = unfinished.get(word, 0) + 1
        n = sum(unfinished.values())
        if n:
            parts = ", ".join(f"{k} {w}" for w, k in sorted(unfinished.items()))
            meaning = f"{n} of {len(details)} session{'s' if len(details) != 1 else ''} did not finish their task ({parts})"
        elif not details:
            meaning = "no session ran"
    elif code == 1:
        meaning = "no session ran"
    return f"exit status {code}: {meaning}" if meaning else f"exit status {code}"


def _first_line(text: str, max_chars: int = 160) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= max_chars else line[: max_chars - 1] + "…"
