"""The cost panel's editable assumptions, the per-GPU cards and the CSV export button
(parts of the meters dock).

Edits apply to the live cost meter at once (``Meters.set_api_price`` /
``set_assumptions``) and are kept in the settings file, so the next start uses them.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QComboBox,
    QDoubleSpinBox,
    QFileDialog,
    QFormLayout,
    QGridLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSpinBox,
    QWidget,
)

from workstation.core.cost import ApiPrice, SelfHostAssumptions, SelfHostMode
from workstation.telemetry.nvml import GpuDevice, GpuSnapshot

if TYPE_CHECKING:
    from workstation.config import Settings
    from workstation.telemetry.meters import Meters

log = logging.getLogger(__name__)


def _spin(maximum: float, decimals: int, suffix: str, step: float) -> QDoubleSpinBox:
    box = QDoubleSpinBox()
    box.setRange(0.0, maximum)
    box.setDecimals(decimals)
    box.setSingleStep(step)
    box.setSuffix(suffix)
    box.setKeyboardTracking(False)  # apply on Enter / focus-out, not on every digit
    return box


class CostAssumptionsEditor(QGroupBox):
    """Every assumption of the self-hosting cost and the API it is compared with."""

    applied = Signal(object)  # SelfHostAssumptions

    def __init__(self, meters: Meters, settings: Settings | None = None, parent: QWidget | None = None) -> None:
        super().__init__("Assumptions (editable)", parent)
        self.meters = meters
        self.settings = settings
        form = QFormLayout(self)
        self.api = QComboBox()
        for price in meters.prices.prices:
            self.api.addItem(f"{price.provider} {price.model}  (${price.output_usd_per_m:g}/M out)",
                             f"{price.provider}/{price.model}")
        self.api.setToolTip("Paid API the same tokens are priced at (prices.toml; a copy in the data "
                            "directory overrides the shipped one)")
        form.addRow("Compare with", self.api)
        self.mode = QComboBox()
        self.mode.addItem("Measured energy + amortized hardware", SelfHostMode.ENERGY.value)
        self.mode.addItem("GPU rental price per GPU-hour", SelfHostMode.GPU_HOURLY.value)
        form.addRow("Self-hosting cost", self.mode)
        self.gpu_hourly = _spin(1000.0, 2, " $/GPU-h", 0.1)
        self.gpu_count = QSpinBox()
        self.gpu_count.setRange(1, 1024)
        self.gpu_count.setKeyboardTracking(False)
        self.hardware = _spin(10_000_000.0, 0, " $", 1000.0)
        self.years = _spin(20.0, 1, " years", 0.5)
        self.years.setMinimum(0.5)
        self.electricity = _spin(10.0, 3, " $/kWh", 0.01)
        self.pue = _spin(5.0, 2, "", 0.05)
        self.pue.setMinimum(1.0)
        form.addRow("GPU rental", self.gpu_hourly)
        form.addRow("GPUs rented", self.gpu_count)
        form.addRow("Hardware price", self.hardware)
        form.addRow("Amortized over", self.years)
        form.addRow("Electricity", self.electricity)
        form.addRow("PUE", self.pue)
        self.error = QLabel("")
        self.error.setWordWrap(True)
        form.addRow(self.error)
        self.load(meters.cost.assumptions, meters.cost.api)
        self.api.currentIndexChanged.connect(self._apply_api)
        for widget in (self.gpu_hourly, self.hardware, self.years, self.electricity, self.pue):
            widget.valueChanged.connect(self._apply)
        self.gpu_count.valueChanged.connect(self._apply)
        self.mode.currentIndexChanged.connect(self._apply)

    def load(self, a: SelfHostAssumptions, api: ApiPrice | None) -> None:
        widgets = (self.api, self.mode, self.gpu_hourly, self.gpu_count, self.hardware, self.years,
                   self.electricity, self.pue)
        for w in widgets:
            w.blockSignals(True)
        if api is not None:
            index = self.api.findData(f"{api.provider}/{api.model}")
            if index >= 0:
                self.api.setCurrentIndex(index)
        self.mode.setCurrentIndex(max(0, self.mode.findData(a.mode.value)))
        self.gpu_hourly.setValue(a.gpu_hourly_usd)
        self.gpu_count.setValue(a.gpu_count)
        self.hardware.setValue(a.hardware_usd)
        self.years.setValue(a.hardware_years)
        self.electricity.setValue(a.electricity_usd_per_kwh)
        self.pue.setValue(a.pue)
        self._sync_enabled(a.mode)
        for w in widgets:
            w.blockSignals(False)

    def assumptions(self) -> SelfHostAssumptions:
        return replace(
            self.meters.cost.assumptions,
            mode=SelfHostMode(self.mode.currentData()),
            gpu_hourly_usd=self.gpu_hourly.value(), gpu_count=self.gpu_count.value(),
            hardware_usd=self.hardware.value(), hardware_years=self.years.value(),
            electricity_usd_per_kwh=self.electricity.value(), pue=self.pue.value(),
        )

    def _sync_enabled(self, mode: SelfHostMode) -> None:
        hourly = mode is SelfHostMode.GPU_HOURLY
        for w in (self.gpu_hourly, self.gpu_count):
            w.setEnabled(hourly)
        for w in (self.hardware, self.years, self.electricity, self.pue):
            w.setEnabled(not hourly)

    def _apply(self, *_: object) -> None:
        try:
            assumptions = self.assumptions()
        except ValueError as exc:  # the model refuses it: say so, keep the last good values
            self.error.setText(str(exc))
            return
        self.error.setText("")
        self._sync_enabled(assumptions.mode)
        self.meters.set_assumptions(assumptions)
        self.applied.emit(assumptions)
        self._save(
            gpu_hourly_usd=assumptions.gpu_hourly_usd if assumptions.mode is SelfHostMode.GPU_HOURLY else None,
            electricity_usd_per_kwh=assumptions.electricity_usd_per_kwh, pue=assumptions.pue,
            hardware_usd=assumptions.hardware_usd, hardware_years=assumptions.hardware_years,
        )

    def _apply_api(self, *_: object) -> None:
        key = self.api.currentData()
        self.meters.set_api_price(key)
        model = str(key).split("/", 1)[-1]
        self._save(api_price_model=model)

    def _save(self, **telemetry: Any) -> None:
        if self.settings is None:
            return
        from workstation.config import save_settings

        try:
            updated = self.settings.telemetry.model_copy(update=telemetry)
            self.settings = self.settings.model_copy(update={"telemetry": updated})
            save_settings(self.settings)
        except OSError as exc:
            self.error.setText(f"could not keep these in the settings file: {exc}")


class GpuCards(QWidget):
    """One small card per GPU: utilisation, memory, power, temperature, clocks, reasons, processes."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.grid = QGridLayout(self)
        self.grid.setContentsMargins(0, 0, 0, 0)
        self.cards: dict[int, QLabel] = {}
        self.empty = QLabel("no GPU")
        self.grid.addWidget(self.empty, 0, 0)

    def on_gpu(self, snap: GpuSnapshot) -> None:
        devices = snap.devices or ()
        self.empty.setVisible(not devices)
        if not devices:
            self.empty.setText(snap.message or "no GPU")
            return
        for dev in devices:
            card = self.cards.get(dev.index)
            if card is None:
                card = QLabel()
                card.setTextFormat(Qt.TextFormat.PlainText)
                card.setFrameShape(QLabel.Shape.StyledPanel)
                card.setMargin(4)
                self.cards[dev.index] = card
                self.grid.addWidget(card, dev.index // 2, dev.index % 2)
            card.setText(_card_text(dev))


def _na(value: float | int | None, fmt: str = "", unit: str = "") -> str:
    return "n/a" if value is None else f"{value:{fmt}}{unit}"


def _card_text(dev: GpuDevice) -> str:
    mem = "n/a"
    if dev.memory_used_bytes is not None and dev.memory_total_bytes:
        mem = f"{dev.memory_used_bytes / 1e9:.0f}/{dev.memory_total_bytes / 1e9:.0f} GB"
    reasons = ", ".join(dev.clock_event_reasons or ()) or "none"
    procs = dev.processes or ()
    engine = sum(1 for p in procs if p.is_engine)
    return (
        f"GPU{dev.index} {dev.name}\n"
        f"util {_na(dev.gpu_util_pct, 'd', '%')} · mem {mem} · {_na(dev.power_w, '.0f', ' W')}"
        f" · {_na(dev.temperature_c, 'd', ' °C')}\n"
        f"SM {_na(dev.sm_clock_mhz, 'd', ' MHz')} · P{_na(dev.pstate, 'd')} · throttle: {reasons}\n"
        f"{len(procs)} process(es), {engine} of the engine"
    )


class CsvExportButton(QPushButton):
    """Export the last 15 minutes of every series to a CSV file (written off the GUI thread)."""

    def __init__(self, meters: Meters, parent: QWidget | None = None) -> None:
        super().__init__("Export CSV…", parent)
        self.meters = meters
        self.status = QLabel("")
        self.clicked.connect(self._ask)
        self._dialog: QFileDialog | None = None
        self._task: asyncio.Task[Any] | None = None

    def row(self) -> QWidget:
        box = QWidget()
        lay = QHBoxLayout(box)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.addWidget(self)
        lay.addWidget(self.status, 1)
        return box

    def _ask(self) -> None:
        dialog = QFileDialog(self.window(), "Export meters to CSV", str(Path.home() / "workstation-meters.csv"),
                             "CSV files (*.csv)")
        dialog.setAcceptMode(QFileDialog.AcceptMode.AcceptSave)
        dialog.setDefaultSuffix("csv")
        dialog.fileSelected.connect(self.export_to)
        self._dialog = dialog
        dialog.open()  # never exec(): the event loop keeps running

    def export_to(self, path: str) -> None:
        async def run() -> None:
            try:
                rows = await asyncio.to_thread(self.meters.export_csv, Path(path))
            except OSError as exc:
                self.status.setText(f"could not write {path}: {exc}")
                return
            self.status.setText(f"{rows} rows written to {path}")

        self._task = asyncio.get_event_loop().create_task(run(), name="meters-csv-export")
