"""The life of one fleet session as a state machine: states and their legal transitions.

Pure data and rules; the fleet service (``workstation.fleet``) drives it and
emits :class:`workstation.core.fleet_events.SessionStateChanged` for every change.

::

    PREPARING ─▶ READY ─▶ QUEUED ⇄ RUNNING ─▶ DONE
        │          │        │   ╲    │ ▲ ╲
        ▼          ▼        ▼    ╲   ▼ │  ▶ AWAITING_APPROVAL / NEEDS_INPUT
      FAILED    STOPPED   PAUSED  ▶ ENGINE_WAIT (engine gone; back to QUEUED when it returns)
                                     BUDGET_REACHED (its token or money budget is used up;
                                                     back to QUEUED when the user raises it)

``QUEUED`` means "wants to generate, waiting for a slot" (the fleet's cap on sessions
generating at once); a running session goes back to ``QUEUED`` between model turns
when no slot is free. ``DONE``, ``FAILED`` and ``STOPPED`` end a run but are not final:
a follow-up task, a retry or a resume moves the session to ``QUEUED`` again.
"""

from __future__ import annotations

from enum import Enum


class SessionState(str, Enum):
    PREPARING = "preparing"
    """Repository being attached (clone, worktree); not startable yet."""
    READY = "ready"
    """Worktree in place, task set, not started."""
    QUEUED = "queued"
    """Wants to generate; waiting in the fleet's fair queue for a generation slot."""
    RUNNING = "running"
    """Generating or running tools."""
    AWAITING_APPROVAL = "awaiting_approval"
    """An action waits for the user's approve / deny / edit."""
    NEEDS_INPUT = "needs_input"
    """The agent asked a question, or gave up after repeated mistakes, and waits for the user."""
    PAUSED = "paused"
    """Paused by the user; resumes where it stopped."""
    ENGINE_WAIT = "engine_wait"
    """Its engine endpoint stopped answering; continues by itself when the engine is back."""
    BUDGET_REACHED = "budget_reached"
    """Its budget (tokens, or money at the chosen API's prices) is used up: paused before its
    next model turn; continues when the user raises or clears the budget."""
    DONE = "done"
    """The agent finished its task (``attempt_completion``)."""
    FAILED = "failed"
    """Ended by an error (budget exhausted, repository gone, unrecoverable engine error)."""
    STOPPED = "stopped"
    """Stopped by the user."""

    @property
    def is_active(self) -> bool:
        """Has an agent task alive (or about to have one)."""
        return self in _ACTIVE

    @property
    def is_working(self) -> bool:
        """Generating, about to, or about to again on its own (its engine is back): its files
        may change any moment. A session waiting for a person is not working."""
        return self in (SessionState.QUEUED, SessionState.RUNNING, SessionState.ENGINE_WAIT)

    @property
    def is_finished(self) -> bool:
        """A run ended here (done, failed, stopped); the session can be started again."""
        return self in _FINISHED

    @property
    def wants_user(self) -> bool:
        """Waits for a person (approval or an answer)."""
        return self in (SessionState.AWAITING_APPROVAL, SessionState.NEEDS_INPUT)

    @property
    def label(self) -> str:
        return self.value.replace("_", " ")


S = SessionState

_ACTIVE = frozenset({S.QUEUED, S.RUNNING, S.AWAITING_APPROVAL, S.NEEDS_INPUT, S.ENGINE_WAIT})
_FINISHED = frozenset({S.DONE, S.FAILED, S.STOPPED})

LEGAL_TRANSITIONS: dict[SessionState, frozenset[SessionState]] = {
    S.PREPARING: frozenset({S.READY, S.FAILED}),
    S.READY: frozenset({S.QUEUED, S.STOPPED, S.FAILED}),
    S.QUEUED: frozenset({S.RUNNING, S.PAUSED, S.STOPPED, S.FAILED, S.ENGINE_WAIT, S.BUDGET_REACHED}),
    S.RUNNING: frozenset(
        {S.QUEUED, S.AWAITING_APPROVAL, S.NEEDS_INPUT, S.PAUSED, S.ENGINE_WAIT,
         S.DONE, S.FAILED, S.STOPPED, S.BUDGET_REACHED}
    ),
    S.AWAITING_APPROVAL: frozenset(
        {S.RUNNING, S.QUEUED, S.PAUSED, S.STOPPED, S.FAILED, S.ENGINE_WAIT}
    ),
    S.NEEDS_INPUT: frozenset({S.QUEUED, S.RUNNING, S.PAUSED, S.STOPPED, S.FAILED, S.DONE}),
    S.PAUSED: frozenset({S.QUEUED, S.STOPPED, S.FAILED}),
    S.ENGINE_WAIT: frozenset({S.QUEUED, S.RUNNING, S.PAUSED, S.STOPPED, S.FAILED}),
    S.BUDGET_REACHED: frozenset({S.QUEUED, S.STOPPED, S.FAILED}),
    S.DONE: frozenset({S.QUEUED}),
    S.FAILED: frozenset({S.QUEUED, S.STOPPED}),
    S.STOPPED: frozenset({S.QUEUED}),
}
"""``old -> {new, …}``. Staying in the same state is never a transition."""

RESUMABLE_AFTER_RESTART: frozenset[SessionState] = frozenset(
    {S.QUEUED, S.RUNNING, S.AWAITING_APPROVAL, S.ENGINE_WAIT}
)
"""States a session was in when the app died that mean "it was working": after a restart
it is queued again and its agent resumes from the persisted history."""


class IllegalTransition(ValueError):
    """A state change the machine does not allow (a bug in the caller, or a stale command)."""

    def __init__(self, old: SessionState, new: SessionState) -> None:
        allowed = ", ".join(sorted(s.value for s in LEGAL_TRANSITIONS[old])) or "nothing"
        super().__init__(f"a session cannot go from {old.value} to {new.value} (allowed: {allowed})")
        self.old = old
        self.new = new


def check_transition(old: SessionState, new: SessionState) -> SessionState:
    """Return ``new`` if ``old -> new`` is legal, else raise :class:`IllegalTransition`."""
    if new not in LEGAL_TRANSITIONS[old]:
        raise IllegalTransition(old, new)
    return new


RESUMED_AFTER_RESTART = "resumed after a restart"
"""The reason of the state change of a session the app resumes when it starts again."""


def state_after_restart(persisted: SessionState) -> SessionState:
    """Where a session stands when the app starts again, given its persisted state.

    Working sessions are queued again (their agent resumes from history); a session that
    was still preparing lost its half-done attach and is failed (the fleet cleans up what it
    left); everything else keeps its state.
    """
    if persisted in RESUMABLE_AFTER_RESTART:
        return S.QUEUED
    if persisted is S.PREPARING:
        return S.FAILED
    return persisted
