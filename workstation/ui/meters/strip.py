"""The meter strip under the toolbar (always visible): GPU, throughput with a sparkline,
running / waiting requests, KV cache, prefix hits, and the cost against a paid API.
Redrawn from telemetry events (about 1 Hz); a missing value shows as ``n/a``."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence

from PySide6.QtCore import QPointF, QSize, Qt
from PySide6.QtGui import QPainter, QPaintEvent, QPalette, QPen, QPolygonF
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QSizePolicy, QWidget

from workstation.core.cost import CostEstimate
from workstation.telemetry.nvml import GpuSnapshot
from workstation.telemetry.streams import TOKEN_RATE_WINDOW_S, ModelTokens
from workstation.telemetry.vllm_metrics import EngineMetricsSample
from workstation.ui import theme

SPARK_POINTS = 60
NA = "n/a"


def fmt(value: float | None, spec: str = ".0f", suffix: str = "") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return NA
    return f"{value:{spec}}{suffix}"


class Sparkline(QWidget):
    """A tiny line of the last minute of tok/s."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.values: deque[float] = deque(maxlen=SPARK_POINTS)
        self.setFixedSize(QSize(72, 16))

    def add(self, value: float | None) -> None:
        self.values.append(0.0 if value is None or math.isnan(value) else float(value))
        self.update()

    def paintEvent(self, event: QPaintEvent) -> None:  # noqa: N802
        if len(self.values) < 2:
            return
        p = QPainter(self)
        p.setRenderHint(QPainter.RenderHint.Antialiasing, True)
        top = max(self.values) or 1.0
        w, h = self.width() - 2, self.height() - 3
        step = w / (SPARK_POINTS - 1)
        start = SPARK_POINTS - len(self.values)
        poly = QPolygonF([QPointF(1 + (start + i) * step, 1 + h - (v / top) * h) for i, v in enumerate(self.values)])
        pen = QPen(theme.accent(self.palette()))
        pen.setWidthF(1.4)
        p.setPen(pen)
        p.drawPolyline(poly)


def compact(n: int) -> str:
    return f"{n / 1e6:.1f}M" if n >= 1_000_000 else f"{n / 1e3:.1f}k" if n >= 1_000 else str(n)


def _sep() -> QFrame:
    line = QFrame()
    line.setFrameShape(QFrame.Shape.VLine)
    line.setFrameShadow(QFrame.Shadow.Plain)
    line.setForegroundRole(QPalette.ColorRole.Mid)
    return line


class MeterStrip(QFrame):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("meter-strip")
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        row = QHBoxLayout(self)
        row.setContentsMargins(4, 1, 4, 1)
        row.setSpacing(8)
        font = theme.ui_font(8.5)

        def label(tip: str) -> QLabel:
            lab = QLabel("…")
            lab.setFont(font)
            lab.setToolTip(tip)
            lab.setTextFormat(Qt.TextFormat.PlainText)
            return lab

        self.gpu = label("GPU utilisation, memory, power and temperature (NVML)")
        self.rate = label(f"Generated tokens per second over the last {TOKEN_RATE_WINDOW_S:g} s: the engine's "
                          "/metrics, never less than the sessions' streams")
        self.spark = Sparkline()
        self.requests = label("Requests the engine runs and queues")
        self.kv = label("KV cache in use")
        self.prefix = label("Prefix-cache hit rate over the last minute")
        self.cost = label("Self-hosting vs the paid API for the same tokens (assumptions in the meters dock)")
        for i, widget in enumerate((self.gpu, self.rate, self.spark, self.requests, self.kv, self.prefix, self.cost)):
            if i and widget is not self.spark:
                row.addWidget(_sep())
            row.addWidget(widget)
        self.adapters = label("Generated tokens per model the sessions' requests named: each LoRA adapter "
                              "apart from the base model")
        self.adapters_sep = _sep()
        row.addWidget(self.adapters_sep)
        row.addWidget(self.adapters)
        self.adapters.hide()
        self.adapters_sep.hide()
        row.addStretch(1)

    # ----- telemetry events -----
    def on_gpu(self, snap: GpuSnapshot) -> None:
        if not snap.ok:
            self.gpu.setText(snap.message or "no GPU")
            return
        parts = []
        for dev in snap.devices:
            mem = (f"{dev.memory_used_bytes / 1e9:.0f}/{dev.memory_total_bytes / 1e9:.0f} GB"
                   if dev.memory_used_bytes is not None and dev.memory_total_bytes else NA)
            parts.append(f"GPU{dev.index} {dev.name.replace('NVIDIA ', '')} {fmt(dev.gpu_util_pct, '.0f', '%')}  "
                         f"{mem}  {fmt(dev.power_w, '.0f', ' W')}  {fmt(dev.temperature_c, '.0f', ' °C')}")
        self.gpu.setText("   ".join(parts) if parts else "no GPU")

    def on_engine(self, sample: EngineMetricsSample) -> None:
        if not sample.up:
            self.requests.setText("engine down")
            self.requests.setToolTip(sample.error or "")
            return
        if not sample.has_metrics:  # an outside endpoint: the streams' rate still shows
            self.requests.setText("no metrics")
            self.requests.setToolTip(f"{sample.error}; throughput is counted from the streams")
            return
        self.requests.setToolTip("")
        self.requests.setText(f"run {fmt(sample.running)} · wait {fmt(sample.waiting)}")
        self.kv.setText(f"KV {fmt(sample.kv_cache_usage_pct, '.0f', '%')}")
        self.prefix.setText(f"prefix hits {fmt(sample.prefix_cache_hit_rate_pct, '.0f', '%')}")

    def on_rate(self, rate: float | None) -> None:
        """The meters' one token rate (``Meters.tokens_per_s``: the engine's /metrics, or the
        streams where it has none)."""
        self.rate.setText(f"{fmt(rate, ',.0f')} tok/s")
        self.spark.add(rate)

    def on_models(self, models: Sequence[ModelTokens]) -> None:
        """Tokens per model (``telemetry.streams.ModelTokens``); shown once more than one model
        (an adapter and its base, or two adapters) has tokens."""
        shown = [m for m in models if m.completion_tokens or m.prompt_tokens]
        visible = len(shown) > 1
        self.adapters.setVisible(visible)
        self.adapters_sep.setVisible(visible)
        if visible:
            self.adapters.setText(" · ".join(f"{m.model} {compact(m.prompt_tokens + m.completion_tokens)}"
                                             for m in shown))


    def on_cost(self, cost: CostEstimate) -> None:
        if cost.self_host_usd_per_m_tokens is None or cost.api_usd_per_m_tokens is None:
            note = cost.notes[0] if cost.notes else "cost: waiting for tokens"
            self.cost.setText(note)
            return
        saved = f" (${cost.saved_usd:,.2f})" if cost.saved_usd is not None else ""
        self.cost.setText(
            f"self-host ${cost.self_host_usd_per_m_tokens:.2f}/M vs API ${cost.api_usd_per_m_tokens:.2f}/M"
            f" → saving {fmt(cost.savings_pct, '.0f', '%')}{saved}"
        )
