"""The Tuning dock's two chart tabs: saved traffic shapes (length histograms, requests in
flight) and stored benchmark results (a table and a bar chart of output tok/s)."""

from __future__ import annotations

import os
import time

os.environ.setdefault("PYQTGRAPH_QT_LIB", "PySide6")

import pyqtgraph as pg  # noqa: E402
from PySide6.QtCore import Qt  # noqa: E402
from PySide6.QtWidgets import (  # noqa: E402
    QAbstractItemView,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QSplitter,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from workstation.core.traffic import TrafficShape  # noqa: E402
from workstation.tuning.results import BenchResult  # noqa: E402
from workstation.ui import theme  # noqa: E402

RESULT_COLUMNS = ("Profile", "Engine", "Model", "Output tok/s", "Total tok/s", "TTFT p50 ms", "TTFT p99 ms",
                  "ITL p50 ms", "ITL p99 ms", "Goodput", "When", "Workload")
CHART_BARS = 12
BAR_COLOURS = (("accent", None), ("amber", theme.AMBER), ("green", theme.GREEN), ("red", theme.RED),
               ("grey", theme.GREY))


def plain_label(text: str = "", *, wrap: bool = True, mono: bool = False) -> QLabel:
    label = QLabel(text)
    label.setTextFormat(Qt.TextFormat.PlainText)
    label.setWordWrap(wrap)
    label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    if mono:
        label.setFont(theme.mono_font(8.5))
    return label


def small_plot(title: str, height: int = 130) -> pg.PlotWidget:
    plot = pg.PlotWidget(title=title)
    plot.setMinimumHeight(height)
    plot.setMouseEnabled(x=False, y=False)
    plot.hideButtons()
    plot.setMenuEnabled(False)
    plot.showGrid(x=False, y=True, alpha=0.2)
    for axis in ("bottom", "left"):
        plot.getAxis(axis).enableAutoSIPrefix(False)
    return plot


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value:,.0f}"


class ShapesView(QSplitter):
    """A list of saved shapes; the selected one as numbers and three small charts."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(Qt.Orientation.Horizontal, parent)
        self.shapes: dict[str, TrafficShape | str] = {}
        self.shape_list = QListWidget()
        self.shape_list.currentItemChanged.connect(lambda *_: self.show_selected())
        self.addWidget(self.shape_list)
        right = QWidget()
        col = QVBoxLayout(right)
        col.setContentsMargins(8, 4, 8, 4)
        self.summary = plain_label()
        col.addWidget(self.summary)
        charts = QHBoxLayout()
        self.prompt_plot = small_plot("Prompt tokens (requests per bucket)")
        self.output_plot = small_plot("Output tokens (requests per bucket)")
        self.concurrency_plot = small_plot("Requests in flight")
        self.concurrency_plot.setLabel("bottom", "seconds")
        for plot in (self.prompt_plot, self.output_plot, self.concurrency_plot):
            charts.addWidget(plot, 1)
        col.addLayout(charts, 1)
        self.addWidget(right)
        self.setStretchFactor(1, 4)
        self.setSizes([220, 940])

    def set_shapes(self, shapes: dict[str, TrafficShape | str]) -> None:
        """Shapes by name (a string: why that file could not be read)."""
        self.shapes = shapes
        current = self.shape_list.currentItem()
        keep = current.text() if current is not None else None
        self.shape_list.blockSignals(True)
        self.shape_list.clear()
        for name, shape in shapes.items():
            item = QListWidgetItem(name)
            item.setToolTip(shape.summary_line() if isinstance(shape, TrafficShape) else shape)
            self.shape_list.addItem(item)
            if name == keep:
                self.shape_list.setCurrentItem(item)
        self.shape_list.blockSignals(False)
        if self.shape_list.currentItem() is None and self.shape_list.count():
            self.shape_list.setCurrentRow(0)
        self.show_selected()

    def show_selected(self) -> None:
        for plot in (self.prompt_plot, self.output_plot, self.concurrency_plot):
            plot.clear()
        item = self.shape_list.currentItem()
        if item is None:
            self.summary.setText("No traffic shapes yet. Capture one from agent sessions with "
                                 "`workstation shape capture`; it shows up here.")
            return
        shape = self.shapes.get(item.text())
        if not isinstance(shape, TrafficShape):
            self.summary.setText(str(shape))
            return
        hit = "n/a" if shape.prefix_cache_hit_rate is None else \
            f"{100 * shape.prefix_cache_hit_rate:.0f}% ({shape.prefix_cache_source})"
        self.summary.setText(
            f"{shape.requests} requests from {shape.sessions} sessions in {shape.span_s:.0f} s "
            f"({shape.request_rate_per_s:.2f} req/s). Prompt p50 {shape.prompt_tokens.p50:,.0f} / p90 "
            f"{shape.prompt_tokens.p90:,.0f} tokens; output p50 {shape.completion_tokens.p50:,.0f} / p90 "
            f"{shape.completion_tokens.p90:,.0f}. In flight: mean {shape.concurrency_mean:.1f}, p90 "
            f"{shape.concurrency_p90:.1f}, max {shape.concurrency_max}. Shared prefix "
            f"{100 * shape.shared_prefix_share:.0f}%, cache hits {hit}."
            + (f"\n{'; '.join(shape.notes)}" if shape.notes else ""))
        accent = theme.accent(self.palette())
        for plot, hist in ((self.prompt_plot, shape.prompt_tokens.histogram),
                           (self.output_plot, shape.completion_tokens.histogram)):
            if not hist:
                continue
            xs = list(range(len(hist)))
            plot.addItem(pg.BarGraphItem(x=xs, height=[c for _, c in hist], width=0.8, brush=accent, pen=None))
            step = max(1, len(hist) // 6)
            plot.getAxis("bottom").setTicks([[(i, f"≤{edge:,}") for i, (edge, _) in enumerate(hist)][::step]])
        series = shape.concurrency_series
        if series:
            xs = [i * shape.bin_s for i in range(len(series))]
            self.concurrency_plot.plot(xs, list(series), pen=pg.mkPen(accent, width=1.5))


class ResultsView(QSplitter):
    """Stored results newest first; the chart compares the selected rows (or the latest)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(Qt.Orientation.Horizontal, parent)
        self.results: list[BenchResult] = []
        self.table = QTableWidget(0, len(RESULT_COLUMNS))
        self.table.setHorizontalHeaderLabels(list(RESULT_COLUMNS))
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.verticalHeader().hide()
        self.table.verticalHeader().setDefaultSectionSize(20)
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setStretchLastSection(True)
        self.table.itemSelectionChanged.connect(self.draw_chart)
        self.addWidget(self.table)
        right = QWidget()
        col = QVBoxLayout(right)
        col.setContentsMargins(4, 0, 4, 0)
        self.plot = small_plot("Output tok/s (selected rows, or the latest)", height=160)
        col.addWidget(self.plot, 1)
        self.note = plain_label()
        col.addWidget(self.note)
        self.addWidget(right)
        self.setStretchFactor(0, 3)
        self.setStretchFactor(1, 2)
        self.setSizes([900, 500])

    def set_results(self, results: list[BenchResult]) -> None:
        self.results = results
        table = self.table
        table.clearSelection()
        table.setRowCount(len(results))
        for row, r in enumerate(results):
            when = time.strftime("%Y-%m-%d %H:%M", time.localtime(r.created_s))
            goodput = "n/a" if r.goodput_pct is None else f"{r.goodput_pct:.0f}%"
            cells = (r.profile, r.engine_version, r.model, f"{r.output_tok_s:,.1f}", f"{r.total_tok_s:,.1f}",
                     _ms(r.ttft.p50_ms), _ms(r.ttft.p99_ms), _ms(r.itl.p50_ms), _ms(r.itl.p99_ms), goodput,
                     when, r.workload.describe())
            tip = f"{r.headline()}\n{r.workload.describe()} · {r.hardware_key} · {r.tool}"
            for col, text in enumerate(cells):
                item = QTableWidgetItem(text)
                item.setToolTip(tip)
                if 3 <= col <= 9:
                    item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
                table.setItem(row, col, item)
        goodput_header = table.horizontalHeaderItem(RESULT_COLUMNS.index("Goodput"))
        goodput_header.setToolTip(f"Requests that met the SLO: {results[0].slo.describe()}" if results else "")
        self.draw_chart()

    def draw_chart(self) -> None:
        plot = self.plot
        plot.clear()
        if not self.results:
            self.note.setText("No benchmark results yet. Run `workstation bench` against the engine; "
                              "results are stored and compared here.")
            return
        rows = sorted({i.row() for i in self.table.selectedIndexes()})
        chosen = [self.results[r] for r in rows][:CHART_BARS] if rows else \
            list(reversed(self.results[:CHART_BARS]))
        groups: dict[str, int] = {}
        for i, r in enumerate(chosen):
            group = groups.setdefault(r.workload.describe(), len(groups))
            colour = BAR_COLOURS[group % len(BAR_COLOURS)][1] or theme.accent(self.palette())
            plot.addItem(pg.BarGraphItem(x=[i], height=[r.output_tok_s], width=0.7, brush=colour, pen=None))
        # repeats of one profile sit side by side: label the first of each run only
        plot.getAxis("bottom").setTicks([[(i, r.profile[:14]) for i, r in enumerate(chosen)
                                          if i == 0 or chosen[i - 1].profile != r.profile]])
        plot.setXRange(-0.6, max(len(chosen), 4) - 0.4, padding=0)
        plot.setLabel("left", "output tok/s")
        if len(groups) == 1:
            self.note.setText(f"Workload: {next(iter(groups))}")
        else:
            self.note.setText("Different workloads, not comparable: " + "; ".join(
                f"{BAR_COLOURS[i % len(BAR_COLOURS)][0]} bars: {w}" for w, i in groups.items()))
