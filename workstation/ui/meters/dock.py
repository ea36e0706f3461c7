"""The meters dock: 15-minute charts (GPU, throughput, latency) and the cost panel with
its assumptions. Charts redraw from ``series_updated`` only while the dock is visible."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

os.environ.setdefault("PYQTGRAPH_QT_LIB", "PySide6")

import numpy as np  # noqa: E402
import pyqtgraph as pg  # noqa: E402
from PySide6.QtGui import QPalette  # noqa: E402
from PySide6.QtWidgets import (  # noqa: E402
    QDockWidget,
    QFormLayout,
    QGroupBox,
    QLabel,
    QScrollArea,
    QVBoxLayout,
    QWidget,
)

from workstation.core.cost import CostEstimate  # noqa: E402
from workstation.ui import theme  # noqa: E402

if TYPE_CHECKING:
    from workstation.config import Settings
    from workstation.telemetry.meters import Meters

CHARTS = (
    ("Generated tok/s", ("engine.*.generation_tokens_per_s", "sessions.tokens_per_s"), "tok/s"),
    ("GPU utilisation %", ("gpu*.util_pct",), "%"),
    ("GPU power W", ("gpu*.power_w",), "W"),
    ("Latency s (TTFT p50/p99, ITL p99)", ("engine.*.ttft_p50_s", "engine.*.ttft_p99_s", "engine.*.itl_p99_s"), "s"),
    ("KV cache %", ("engine.*.kv_cache_usage_pct",), "%"),
)


def _match(pattern: str, name: str) -> bool:
    head, _, tail = pattern.partition("*")
    return name.startswith(head) and name.endswith(tail) and len(name) >= len(head) + len(tail)


class MetersDock(QDockWidget):
    def __init__(self, meters: Meters, parent: QWidget | None = None, *, settings: Settings | None = None) -> None:
        from workstation.ui.meters.cost_panel import CostAssumptionsEditor, CsvExportButton, GpuCards

        super().__init__("Meters", parent)
        self.setObjectName("meters-dock")
        self.meters = meters
        body = QWidget()
        layout = QVBoxLayout(body)
        layout.setContentsMargins(4, 4, 4, 4)
        self.gpu_cards = GpuCards()
        layout.addWidget(self.gpu_cards)
        pal = body.palette()
        pg.setConfigOptions(antialias=True, background=pal.color(QPalette.ColorRole.Base),
                            foreground=pal.color(QPalette.ColorRole.Text))
        self.plots: list[tuple[pg.PlotWidget, tuple[str, ...]]] = []
        for title, patterns, unit in CHARTS:
            plot = pg.PlotWidget(title=title)
            plot.setMinimumHeight(110)
            plot.setMaximumHeight(170)  # dense: the cost panel and export stay in view
            plot.showGrid(x=False, y=True, alpha=0.2)
            plot.setLabel("bottom", "minutes ago")
            plot.setMouseEnabled(x=False, y=False)
            plot.hideButtons()
            for axis in ("bottom", "left"):
                plot.getAxis(axis).enableAutoSIPrefix(False)
            plot.setXRange(-15, 0, padding=0)
            if unit == "%":
                plot.setYRange(0, 100, padding=0.02)
            if unit:
                plot.setLabel("left", unit)
            layout.addWidget(plot)
            self.plots.append((plot, patterns))
        self.cost_box = QGroupBox("Cost against a paid API")
        self.cost_form = QFormLayout(self.cost_box)
        self.cost_summary = QLabel("waiting for tokens…")
        self.cost_summary.setWordWrap(True)
        self.cost_form.addRow(self.cost_summary)
        layout.addWidget(self.cost_box)
        self.assumptions_editor = CostAssumptionsEditor(meters, settings)
        layout.addWidget(self.assumptions_editor)
        self.csv_export = CsvExportButton(meters)
        layout.addWidget(self.csv_export.row())
        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setWidget(body)
        self.setWidget(scroll)
        self.setMinimumWidth(360)

    def redraw(self, _names: object = None) -> None:
        if not self.isVisible():
            return
        import time

        now = time.monotonic()
        book = self.meters.series
        names = list(book.names())
        pens = [theme.accent(self.palette()), theme.AMBER, theme.GREEN, theme.RED]
        for plot, patterns in self.plots:
            plot.clear()
            plot.setXRange(-15, 0, padding=0)
            k = 0
            for pattern in patterns:
                for name in names:
                    if not _match(pattern, name):
                        continue
                    series = book.get(name)
                    t = np.frombuffer(series.times(), dtype=float)
                    v = np.frombuffer(series.values(), dtype=float)
                    if t.size:
                        plot.plot((t - now) / 60.0, v, pen=pg.mkPen(pens[k % len(pens)], width=1.5), name=name,
                                  connect="finite")
                        k += 1

    def on_cost(self, cost: CostEstimate) -> None:
        lines = []
        if cost.self_host_usd_per_m_tokens is not None and cost.api_usd_per_m_tokens is not None:
            lines.append(f"self-hosting ${cost.self_host_usd_per_m_tokens:.3f} per million tokens, "
                         f"{cost.api.model if cost.api is not None else 'API'} ${cost.api_usd_per_m_tokens:.3f}")
            if cost.savings_pct is not None:
                lines.append(f"saving {cost.savings_pct:.0f}% (${cost.saved_usd or 0:,.2f} so far)")
        lines.extend(cost.notes)
        self.cost_summary.setText("\n".join(lines) or "waiting for tokens…")
