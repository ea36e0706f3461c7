"""The stop guard names what a waiting session waits for from the sessions' commands (the
fleet's approvals desk behind ``SessionCommands.waiting_actions``), never from a pane's text;
without commands it still asks, naming no action. The window's parts it reads are stand-ins
here (the guard's ``GuardedWindow`` protocol); ``test_session_lifecycle.py`` drives the real
window over a real fleet."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from workstation.core.session_state import SessionState as S
from workstation.ui.panes.session_pane import PaneInfo
from workstation.ui.stop_guard import StopGuard

pytestmark = pytest.mark.gui


@dataclass
class Pane:
    info: PaneInfo


@dataclass
class Asked:
    """What ``Confirmations.ask`` was given."""

    calls: list[dict[str, Any]] = field(default_factory=list)

    def ask(self, on_yes, **what):  # type: ignore[no-untyped-def]
        self.calls.append(what)


class Commands:
    def __init__(self, actions: dict[str, str]) -> None:
        self.actions = actions

    def waiting_actions(self) -> dict[str, str]:
        return dict(self.actions)


@dataclass
class Window:
    panes: dict[str, Pane]
    commands: Commands | None
    confirmations: Asked = field(default_factory=Asked)
    generating: int = 0
    closed: int = 0

    def engine_verb(self, verb, call) -> None:  # type: ignore[no-untyped-def]
        raise AssertionError("no engine verb here")

    def close(self) -> bool:
        self.closed += 1
        return True


def _panes() -> dict[str, Pane]:
    return {"a": Pane(PaneInfo("a", "fix-add", state=S.AWAITING_APPROVAL)),
            "b": Pane(PaneInfo("b", "docs", state=S.NEEDS_INPUT)),
            "c": Pane(PaneInfo("c", "tests", state=S.DONE))}


def test_quitting_names_the_action_the_approvals_desk_holds() -> None:
    window = Window(_panes(), Commands({"a": "run_command pytest -q  — with a dash"}))
    guard = StopGuard(window)  # type: ignore[arg-type]
    assert guard.close_may_go_on() is False
    (asked,) = window.confirmations.calls
    assert asked["headline"] == "Quit with 2 waiting for you?"
    assert asked["items"] == ["fix-add: waits for approval of run_command pytest -q  — with a dash",
                              "docs: waits for your answer"]


def test_without_the_sessions_commands_it_still_asks_naming_no_action() -> None:
    window = Window(_panes(), None)
    guard = StopGuard(window)  # type: ignore[arg-type]
    assert guard.close_may_go_on() is False
    assert window.confirmations.calls[0]["items"][0] == "fix-add: waits for approval of an action"
    guard._quit()  # the user said yes: the next close goes through without asking
    assert window.closed == 1 and guard.close_may_go_on() is True and len(window.confirmations.calls) == 1


def test_with_nothing_working_or_waiting_nothing_is_asked() -> None:
    window = Window({"c": Pane(PaneInfo("c", "tests", state=S.DONE))}, Commands({}))
    assert StopGuard(window).close_may_go_on() is True  # type: ignore[arg-type]
    assert window.confirmations.calls == []
