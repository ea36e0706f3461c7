"""The window and the fleet's scheduling: each pane shows its cost at the chosen paid API and
the status bar the fleet's; a session over its budget reads "budget reached" and its pane's
menu raises the budget; a queued pane says why it waits; the focus view puts its session
first; the menu marks a session background."""

from __future__ import annotations

from typing import Any

import pytest

from tests.ui.conftest import FleetUI
from workstation.core.admission import Priority
from workstation.core.cost import ApiPrice
from workstation.core.fleet_events import SessionWaitChanged
from workstation.core.session_state import SessionState as S
from workstation.fleet.session import SessionSpec
from workstation.ui.panes.session_pane import PaneInfo, money, state_text

pytestmark = pytest.mark.gui

PRICE = ApiPrice("p", "m1", input_usd_per_m=10.0, cached_input_usd_per_m=1.0, output_usd_per_m=40.0)


@pytest.fixture
def fleet_options(settings) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    return {"price": PRICE}


def test_state_words_and_money() -> None:
    assert state_text(PaneInfo("s", "n", state=S.QUEUED, detail="engine full: KV 97 %")) == "engine full: KV 97 %"
    assert state_text(PaneInfo("s", "n", state=S.QUEUED)) == "queued"
    assert state_text(PaneInfo("s", "n", state=S.BUDGET_REACHED, detail="budget reached: 10 of 5 tokens")) \
        == "budget reached"
    assert [money(v) for v in (0.0312, 1.244, 12_345.6)] == ["$0.031", "$1.24", "$12,346"]
    # a first turn's few hundred tokens at a cheap API's prices: not "$0.000", which reads as free
    assert [money(v) for v in (0.0003, 0.00049, 0.0005, 0.0)] == ["<$0.001", "<$0.001", "$0.001", "$0.000"]


def test_cost_budget_focus_and_background_in_the_window(qtbot, fleet_ui: FleetUI) -> None:  # type: ignore[no-untyped-def]
    ui = fleet_ui

    async def body() -> None:
        made = await ui.fleet.create_sessions(SessionSpec(task="Fix add() in calc.py", repo=str(ui.repo),
                                                          auto_approve=("read", "edit"), budget_tokens=50), 1,
                                              start=True)
        sid = made[0].session_id
        await ui.wait(lambda: sid in ui.window.panes and ui.state(sid) is S.BUDGET_REACHED)
        pane = ui.window.panes[sid]
        assert state_text(pane.info) == "budget reached" and "of 50 tokens" in pane.info.detail
        await ui.wait(lambda: (pane.info.cost_usd or 0) > 0)  # the stats tick brings the cost
        assert pane.info.cost_usd == pytest.approx(ui.fleet.summary(sid).cost_usd)
        await ui.wait(lambda: " · $" in ui.window.summary_label.text() and "at m1 prices" in ui.window.summary_label.text())
        # the pane's menu: Budget… lifts the budget, and the session goes on to the end
        menu = ui.window.session_actions.open_menu(pane)
        assert [a.data() for a in menu.actions() if a.data() in ("background", "budget")] == ["background", "budget"]
        dialog = ui.window.session_actions.open_budget(sid)
        assert dialog is not None and dialog.tokens.value() == 50
        dialog.tokens.setValue(0)  # no token budget
        dialog._set()
        await ui.wait(lambda: ui.state(sid) is S.DONE)
        assert ui.fleet.record(sid).spec.budget_tokens is None
        # the focus view: its session goes first while it is shown
        ui.window.show_focus(pane)
        assert ui.fleet.admission.priority_of(sid) is Priority.FOREGROUND
        ui.window.show_grid()
        assert ui.fleet.admission.priority_of(sid) is Priority.NORMAL
        # background, from the menu; the header says so
        ui.window.session_actions.run(sid, "background")
        await ui.wait(lambda: pane.info.background)
        assert "background" in pane.info.where()
        assert ui.fleet.admission.priority_of(sid) is Priority.BACKGROUND
        # a queued pane shows why it waits
        ui.window.update_session(PaneInfo(sid, pane.info.name, state=S.QUEUED))
        ui.bridge.handle_fleet_event(SessionWaitChanged(sid, "engine full: KV 97 %"))
        assert state_text(pane.info) == "engine full: KV 97 %"

    ui.play(body)
