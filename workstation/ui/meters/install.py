"""Puts the meter strip and the meters dock into the window and connects them to a
:class:`workstation.telemetry.meters.Meters` (whose session counters are the fleet's own:
the sessions' tok/s is counted once, by the fleet)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from workstation.ui.meters.strip import MeterStrip

if TYPE_CHECKING:
    from workstation.config import Settings
    from workstation.telemetry.meters import Meters
    from workstation.ui.main_window import MainWindow


def install_meters(window: MainWindow, meters: Meters, settings: Settings | None = None) -> MeterStrip:
    from workstation.ui.meters.dock import MetersDock

    strip = MeterStrip()
    window.set_meter_strip(strip)
    dock = MetersDock(meters, window, settings=settings)
    window.set_meters_dock(dock)
    meters.gpu_sampled.connect(strip.on_gpu)
    meters.gpu_sampled.connect(dock.gpu_cards.on_gpu)
    meters.engine_sampled.connect(strip.on_engine)
    meters.rate_updated.connect(strip.on_rate)
    meters.rate_updated.connect(window.set_token_rate)  # the status bar shows the same number
    meters.models_sampled.connect(strip.on_models)
    meters.cost_updated.connect(strip.on_cost)
    meters.cost_updated.connect(dock.on_cost)
    meters.series_updated.connect(dock.redraw)
    return strip
