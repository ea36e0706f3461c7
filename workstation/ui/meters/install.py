"""Puts the meter strip and the meters dock into the window and connects them to a
:class:`workstation.telemetry.meters.Meters` (and the fleet's streams, for tok/s)."""

from __future__ import annotations

from typing import Any

from workstation.ui.meters.strip import MeterStrip


def install_meters(window: Any, meters: Any, fleet: Any | None = None, settings: Any | None = None) -> MeterStrip:
    from workstation.ui.meters.dock import MetersDock

    strip = MeterStrip()
    window.set_meter_strip(strip)
    dock = MetersDock(meters, window, settings=settings)
    window.set_meters_dock(dock)
    meters.gpu_sampled.connect(strip.on_gpu)
    meters.gpu_sampled.connect(dock.gpu_cards.on_gpu)
    meters.engine_sampled.connect(strip.on_engine)
    meters.sessions_sampled.connect(strip.on_sessions)
    meters.models_sampled.connect(strip.on_models)
    meters.cost_updated.connect(strip.on_cost)
    meters.cost_updated.connect(dock.on_cost)
    meters.series_updated.connect(dock.redraw)
    if fleet is not None:
        from workstation.core import agent_events as ev

        streams = meters.streams

        def count(item: Any) -> None:
            event = item.event
            kind = type(event)
            if kind is ev.TextStreamed or kind is ev.ReasoningStreamed or kind is ev.ToolCallStreamed:
                streams.on_chunk(item.session_id)
            elif kind is ev.UsageReported:
                streams.on_usage(item.session_id, event)

        fleet.agent_event.connect(count)
    window.meters_strip = strip
    window.meters_dock_widget = dock
    return strip
