"""Live cost meter: tokens from the engines' counters, energy from NVML, prices from the
table; the arithmetic is :func:`workstation.core.cost.estimate_cost`.

Everything accumulates from the moment the meter starts (or :meth:`CostMeter.reset`):
tokens as counter deltas per endpoint (the first scrape of an endpoint is its
baseline; a counter that goes down means a restart and counts from zero), energy as
deltas of each GPU's energy counter (or power × time where a GPU has no counter).
Changing the price or the assumptions re-prices the whole window, so the panel
always shows one consistent set of assumptions.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from psygnal import Signal

from workstation.core.cost import ApiPrice, CostEstimate, SelfHostAssumptions, TokenCounts, estimate_cost
from workstation.telemetry.nvml import GpuSnapshot
from workstation.telemetry.vllm_metrics import EngineMetricsSample

_TOKEN_FIELDS = ("prompt_tokens_total", "cached_prompt_tokens_total", "generation_tokens_total")


def _counter_delta(new: float, old: float | None) -> float:
    if old is None:
        return 0.0
    return new if new < old else new - old


class CostMeter:
    """Emits ``updated(CostEstimate)`` whenever its inputs change."""

    updated = Signal(object)

    def __init__(
        self,
        *,
        api: ApiPrice | None,
        assumptions: SelfHostAssumptions,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.api = api
        self.assumptions = assumptions
        self._clock = clock
        self.reset()

    def reset(self) -> None:
        self._start = self._clock()
        self._tokens = TokenCounts()
        self._last_tokens: dict[str, tuple[float | None, ...]] = {}
        self._energy_j: float | None = None
        self._last_energy: dict[int, tuple[float, float | None, float | None]] = {}  # idx → (t, energy_j, power_w)

    # ----------------------------------------------------------------- inputs
    def on_engine_sample(self, sample: EngineMetricsSample) -> None:
        if not sample.up or not sample.has_metrics:
            return
        now = tuple(getattr(sample, f) for f in _TOKEN_FIELDS)
        last = self._last_tokens.get(sample.endpoint)
        self._last_tokens[sample.endpoint] = now
        if last is None:
            return
        prompt, cached, gen = (
            0.0 if n is None else _counter_delta(n, o) for n, o in zip(now, last)
        )
        if prompt or gen or cached:
            self._tokens = self._tokens + TokenCounts(prompt, min(cached, prompt), gen)
        self._emit()

    def on_gpu_snapshot(self, snap: GpuSnapshot) -> None:
        if not snap.ok:
            return
        added = 0.0
        for dev in snap.devices:
            prev = self._last_energy.get(dev.index)
            self._last_energy[dev.index] = (snap.t_mono, dev.energy_j, dev.power_w)
            if prev is None:
                continue
            t0, e0, p0 = prev
            if dev.energy_j is not None and e0 is not None:
                added += _counter_delta(dev.energy_j, e0)
            elif dev.power_w is not None and p0 is not None:
                added += (dev.power_w + p0) / 2.0 * max(0.0, snap.t_mono - t0)
        self._energy_j = (self._energy_j or 0.0) + added
        self._emit()

    # ----------------------------------------------------------------- settings
    def set_api(self, api: ApiPrice | None) -> None:
        self.api = api
        self._emit()

    def set_assumptions(self, assumptions: SelfHostAssumptions) -> None:
        self.assumptions = assumptions
        self._emit()

    # ----------------------------------------------------------------- output
    @property
    def tokens(self) -> TokenCounts:
        return self._tokens

    @property
    def energy_j(self) -> float | None:
        return self._energy_j

    def estimate(self) -> CostEstimate:
        return estimate_cost(
            tokens=self._tokens,
            elapsed_s=self._clock() - self._start,
            energy_j=self._energy_j,
            api=self.api,
            assumptions=self.assumptions,
        )

    def _emit(self) -> None:
        if len(self.updated) > 0:  # no listeners: skip the arithmetic
            self.updated.emit(self.estimate())
