"""The window on the real vLLM engine (SmolLM2 on the CPU build): a fleet session runs a real
agent turn into its pane."""

from __future__ import annotations

import pytest

from tests.ui.conftest import run, wait_until
from workstation.core.session_state import SessionState as S
from workstation.ui.bridge import TOOL_MARK
from workstation.ui.panes.transcript_doc import LineStyle

pytestmark = [pytest.mark.gui, pytest.mark.engine, pytest.mark.slow]


def test_fleet_session_on_the_real_engine(qtbot, smollm2_engine, qloop, settings, calc_repo) -> None:  # type: ignore[no-untyped-def]
    from workstation.engine.http import make_http_client
    from workstation.fleet.agent_bridge import real_agent_factory
    from workstation.fleet.service import Fleet
    from workstation.fleet.session import SessionSpec
    from workstation.ui.bridge import FleetBridge
    from workstation.ui.main_window import MainWindow

    http = make_http_client()
    fleet = Fleet(data_dir=settings.data_dir, endpoints=[smollm2_engine], agent_factory=real_agent_factory(http),
                  http=http, max_generating=4)
    window = MainWindow(settings)
    window.show()
    bridge = FleetBridge(fleet, window)

    async def body() -> None:
        await fleet.start()
        await bridge.load_existing()
        (summary,) = await fleet.create_sessions(
            SessionSpec(task="List the files of the project.", repo=str(calc_repo), auto_approve=("all",),
                        max_steps=2), 1, start=True)
        pane = window.panes[summary.session_id]
        await wait_until(lambda: pane.info.state in (S.DONE, S.FAILED, S.NEEDS_INPUT), 240)
        window.flush()
        styles = {line.style for line in pane.doc.lines}
        assert LineStyle.USER in styles  # the task
        marks = tuple(TOOL_MARK.values())
        did = [line for line in pane.doc.lines if line.text.startswith(marks) or line.style is LineStyle.TEXT]
        assert did, pane.doc.text()  # tool calls (ok or failed) or text: what the model did
        await wait_until(lambda: pane.info.tokens > 0, 10)  # the totals publish at the stats' next tick

    try:
        run(qloop, body())
    finally:
        run(qloop, fleet.aclose())
        bridge.close()
        run(qloop, http.aclose())
        window.allow_close()
        window.close()
