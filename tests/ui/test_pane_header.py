"""The pane header at 32 panes on a 1920-px screen: why a session waits stays readable, the
left side gives way first, and the tooltip holds every word."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QEvent, QPoint
from PySide6.QtGui import QFontMetrics, QHelpEvent
from PySide6.QtWidgets import QApplication, QToolTip

from workstation.core.session_state import SessionState as S
from workstation.ui.panes.header_line import (
    NAME_GAP_PX,
    SEPARATOR,
    FirstLine,
    WherePart,
    fit_first_line,
    fit_where,
    short_forms,
    short_reason,
)
from workstation.ui.panes.session_pane import PaneInfo, SessionPane
from workstation.ui.panes.tile_grid import TileGrid
from workstation.ui.panes.transcript_doc import TranscriptDoc

pytestmark = pytest.mark.gui

REASON = "engine near full: holding at 24 generating"


def _grid_of_32(qtbot) -> tuple[TileGrid, list[SessionPane]]:  # type: ignore[no-untyped-def]
    """The demo's 32 sessions in a grid the size of a 1920×1080 window's tile area."""
    grid = TileGrid()
    qtbot.addWidget(grid)
    panes = []
    for i in range(32):
        info = PaneInfo(f"s{i}", f"fix-roman-range-{i}", repo="inventory", branch=f"ws/fix-roman-range-{i}",
                        mode="Act", protocol="guided", state=S.RUNNING)
        pane = SessionPane(info, TranscriptDoc())
        grid.add_pane(pane)
        panes.append(pane)
    grid.resize(1920, 960)
    grid.show()
    qtbot.waitExposed(grid)
    QApplication.processEvents()
    return grid, panes


def test_at_32_panes_the_wait_reason_reads_whole_in_short_form_and_the_tooltip_in_full(qtbot):
    grid, panes = _grid_of_32(qtbot)
    assert (grid.shape.cols, grid.shape.rows) == (8, 4)
    pane = panes[9]
    assert 220 <= pane.header.width() <= 240  # an 8-column tile on 1920 px
    pane.set_info(PaneInfo(pane.info.session_id, pane.info.name, repo="inventory", branch=pane.info.branch,
                           mode="Act", protocol="guided", state=S.QUEUED, detail=REASON))
    header = pane.header
    fm = QFontMetrics(header.font())
    line = header.second_line()
    # the reason's headline, not cut: before, it read "engine near full: h…"
    assert line.state == "engine near full" == short_reason(REASON)
    assert "…" not in line.state
    # the left side gave way (the branch first) and still names the repository; both fit
    assert line.where.startswith("inventory") and "ws/" not in line.where and "guided" in line.where
    assert fm.horizontalAdvance(line.where) + fm.horizontalAdvance(line.state) + 8 <= header.width() - 10
    # the full text on hover
    QToolTip.hideText()
    QApplication.sendEvent(header, QHelpEvent(QEvent.Type.ToolTip, QPoint(20, 20), header.mapToGlobal(QPoint(20, 20))))
    tip = QToolTip.text()
    assert REASON in tip and pane.info.where() in tip and pane.info.name in tip
    QToolTip.hideText()


def test_a_reason_that_fits_whole_shows_whole_and_a_running_pane_keeps_its_line(qtbot):
    _grid, panes = _grid_of_32(qtbot)
    pane = panes[0]
    assert pane.header.second_line().state == "running"
    assert pane.header.second_line().where.startswith("inventory")
    pane.set_info(PaneInfo(pane.info.session_id, pane.info.name, repo="inventory", branch=pane.info.branch,
                           mode="Act", protocol="guided", state=S.QUEUED, detail="engine full: KV 97 %"))
    assert pane.header.second_line().state == "engine full: KV 97 %"
    # the demo's queue: the engine as subject left out, the number kept (it read "engine queue: 158…")
    pane.set_info(PaneInfo(pane.info.session_id, pane.info.name, repo="inventory", branch=pane.info.branch,
                           mode="Act", protocol="guided", state=S.QUEUED, detail="engine queue: 158 waiting"))
    assert pane.header.second_line().state == "queue: 158 waiting"
    # a wide tile (4 panes) shows everything
    wide = TileGrid()
    qtbot.addWidget(wide)
    info = PaneInfo("w", "fix-it", repo="inventory", branch="ws/fix-it", mode="Act", protocol="guided",
                    state=S.QUEUED, detail=REASON)
    wide.add_pane(SessionPane(info, TranscriptDoc()))
    wide.resize(1920, 960)
    wide.show()
    qtbot.waitExposed(wide)
    line = wide.panes[0].header.second_line()
    assert line.state == REASON and line.where == info.where()


def test_the_left_side_gives_way_least_telling_part_first(qapp):
    fm = QFontMetrics(qapp.font())
    parts = (WherePart("inventory", 2), WherePart("ws/fix-restock-and-more", 0), WherePart("Act", 99),
             WherePart("guided", 99), WherePart("§ AGENTS.md", 1), WherePart("✓ ready", 99))
    whole = SEPARATOR.join(p.text for p in parts)
    assert fit_where(parts, fm, fm.horizontalAdvance(whole)) == whole
    without_branch = "inventory · Act · guided · § AGENTS.md · ✓ ready"
    narrower = fit_where(parts, fm, fm.horizontalAdvance(without_branch) + fm.horizontalAdvance(" · ws/fix-restock…"))
    assert narrower.startswith("inventory · ws/fix-restock") and "…" in narrower and narrower.endswith("✓ ready")
    # elided to half of itself or less, a part says nothing: dropped instead
    assert fit_where(parts, fm, fm.horizontalAdvance(without_branch) + fm.horizontalAdvance(" · ws/fix-r…")) \
        == without_branch
    # then the rules, then the repository; ready stays to the end
    assert fit_where(parts, fm, fm.horizontalAdvance("inventory · Act · guided · ✓ ready")) \
        == "inventory · Act · guided · ✓ ready"
    tight = fit_where(parts, fm, fm.horizontalAdvance("inven… · Act · guided · ✓ ready"))
    assert tight == "inven… · Act · guided · ✓ ready"
    assert fit_where(parts, fm, fm.horizontalAdvance("inv… · Act · guided · ✓ ready")) == "Act · guided · ✓ ready"
    assert fm.horizontalAdvance(fit_where(parts, fm, 30)) <= 30


def test_short_forms_leave_out_the_subject_then_the_specifics():
    assert short_forms(REASON) == (REASON, "near full: holding at 24 generating", "engine near full")
    assert short_forms("fleet cap: 32 generating") == ("fleet cap: 32 generating", "fleet cap")
    assert short_forms("queued") == ("queued",)


def test_short_reason_is_the_headline():
    assert short_reason("engine full: KV 99 %, 3 preempted") == "engine full"
    assert short_reason("slow first token: p95 12 s > 8.0 s") == "slow first token"
    assert short_reason("queued") == "queued"


def test_the_name_stays_whole_before_the_cost_and_the_token_count(qtbot):
    _grid, panes = _grid_of_32(qtbot)
    pane = panes[3]
    pane.set_info(PaneInfo(pane.info.session_id, "fix-from-roman-case", repo="roman", branch="ws/fix-from-roman-case",
                           mode="Act", protocol="guided", state=S.RUNNING))
    pane.set_stats(12_345, 41.0, 0.031)
    header = pane.header
    first = header.first_line()
    bold = header.font()
    bold.setBold(True)
    assert QFontMetrics(bold).horizontalAdvance("fix-from-roman-case") + QFontMetrics(header.font()).horizontalAdvance(
        "41 t/s  12k tok  $0.031") + NAME_GAP_PX > header.width() - header._name_x() - 5  # all of it would not fit
    assert first.name == "fix-from-roman-case"  # whole
    assert first.figures.startswith("41 t/s") and "$0.031" not in first.figures  # the cost gave way
    assert "12k tok" in header.tip() and "$0.031 at the paid API's prices" in header.tip()
    # a short name keeps every figure
    pane.set_info(PaneInfo(pane.info.session_id, "fix-wrap", repo="textkit", state=S.RUNNING))
    pane.set_stats(12_345, 41.0, 0.031)
    assert header.first_line() == FirstLine("fix-wrap", "41 t/s  12k tok  $0.031")


def test_fit_first_line_drops_figures_from_the_end_and_keeps_the_rate(qapp):
    fm = QFontMetrics(qapp.font())
    name = "a-rather-long-session-name"
    figures = ["41 t/s", "12k tok", "$0.031"]
    roomy = fm.horizontalAdvance(name) + fm.horizontalAdvance("41 t/s  12k tok  $0.031") + NAME_GAP_PX
    assert fit_first_line(name, figures, fm, fm, roomy) == FirstLine(name, "41 t/s  12k tok  $0.031")
    assert fit_first_line(name, figures, fm, fm, roomy - 1).figures == "41 t/s  12k tok"
    narrow_px = fm.horizontalAdvance("a-rather…") + fm.horizontalAdvance("41 t/s") + 12
    tight = fit_first_line(name, figures, fm, fm, narrow_px)
    assert tight.figures == "41 t/s" and tight.name.endswith("…")
    assert fit_first_line(name, ["", "12k tok", ""], fm, fm, 40).figures == "12k tok"  # not streaming now


def test_with_the_meters_dock_open_the_repository_outlasts_mode_and_protocol(qtbot):
    grid, panes = _grid_of_32(qtbot)
    grid.resize(1410, 960)  # 1920 px less the meters dock: 7 columns of about 200 px
    QApplication.processEvents()
    assert grid.shape.cols == 7 and panes[0].header.width() < 205
    pane = panes[0]
    pane.set_info(PaneInfo(pane.info.session_id, pane.info.name, repo="inilite", branch=pane.info.branch,
                           mode="Act", protocol="guided", state=S.QUEUED, detail="slow first token: p95 12 s > 8.0 s"))
    line = pane.header.second_line()
    assert line.state == "slow first token"
    assert line.where.startswith("inilite")  # it read "Act · guided", the repository dropped


def test_the_token_figure_is_the_fleets_count_not_the_text_shown(qtbot):
    """The header's figures come from the fleet's counters alone (``SessionStatsChanged``):
    before a turn's usage arrived the token figure fell back to the pieces the transcript
    showed ("3 tok" for a guided turn's note and a draft while the engine generated hundreds),
    then jumped to usage's prompt + completion."""
    _grid, panes = _grid_of_32(qtbot)
    pane = panes[0]
    pane.doc.stream("[7 drafts, 2 usable]", 1)
    pane.doc.stream(" def add(a, b):", 2)
    pane.doc.flush()
    assert pane.doc.tokens_flushed == 3
    assert pane.header.figures() == ["", "", ""]  # nothing counted yet: nothing shown
    pane.set_stats(0, 41.0)  # streaming, no usage yet: the live rate alone
    assert pane.header.first_line().figures == "41 t/s"
    assert "tok" not in pane.header.tip().replace("t/s", "")
    pane.set_stats(2_345, 0.0)  # the turn's usage
    assert pane.header.first_line().figures == "2.3k tok"


def test_the_focused_tile_shows_its_focus_when_its_state_owns_the_border(qtbot):
    """With every tile amber (32 approvals waiting) the focused one looked like the rest: the
    waiting colour owns the border, so Ctrl+Enter approved a request the user could not see.
    The focused tile's header is tinted with the accent, whatever its state; the focus view's
    header (the one pane shown) is not."""
    from PySide6.QtGui import QImage

    from workstation.ui.panes.focus_view import FocusView

    grid, panes = _grid_of_32(qtbot)
    waiting = panes[1:3]  # the grid focused the first
    for pane in waiting:
        pane.set_info(PaneInfo(pane.info.session_id, "fix", repo="inventory", state=S.AWAITING_APPROVAL,
                               waiting_for="approval"))

    def header_pixels(pane: SessionPane) -> QImage:
        QApplication.processEvents()
        return pane.header.grab().toImage().convertToFormat(QImage.Format.Format_RGB32)

    assert header_pixels(waiting[0]) == header_pixels(waiting[1])
    grid.set_focus(1)
    assert waiting[0].focused
    focused, other = header_pixels(waiting[0]), header_pixels(waiting[1])
    assert focused != other  # before: the same pixels
    corner = (focused.width() // 2, focused.height() - 1)  # blank background
    assert focused.pixelColor(*corner) != other.pixelColor(*corner)
    view = FocusView()
    qtbot.addWidget(view)
    view.show_pane(waiting[0])
    view.resize(1200, 600)
    view.show()
    QApplication.processEvents()
    shown = view._header.grab().toImage()
    assert shown.pixelColor(shown.width() // 2, shown.height() - 1) == other.pixelColor(*corner)
    view.leave()
