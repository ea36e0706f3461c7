"""Cost model: what self-hosting costs versus what a paid API would have charged.

Pure arithmetic on measured inputs (tokens, elapsed time, energy); no I/O. The
price table arrives here as already-parsed TOML (``telemetry/prices.py`` reads the
files).

Self-hosting cost, two ways (:class:`SelfHostMode`):

* ``GPU_HOURLY``: a GPU rental price, ``gpu_hourly_usd × gpu_count × hours``;
* ``ENERGY``: hardware amortized over its life plus the energy measured by NVML,
  ``hardware_usd / (years × 8766 h) × hours + kWh × electricity price × PUE``.
  Without an energy measurement (no GPU) this cost is unknown, not zero.

The paid API is charged for the same tokens: uncached prompt tokens at the input
price, prompt tokens the engine served from its prefix cache at the cached-input
price (a provider with prompt caching would likely have hit them too: an
assumption the UI shows), generated tokens at the output price.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

HOURS_PER_YEAR = 365.25 * 24.0
JOULES_PER_KWH = 3.6e6
TOKENS_PER_MILLION = 1e6


# --------------------------------------------------------------------------- prices
@dataclass(frozen=True, slots=True)
class ApiPrice:
    """List price of one paid API model, in US dollars per million tokens."""

    provider: str
    model: str
    input_usd_per_m: float
    cached_input_usd_per_m: float
    output_usd_per_m: float
    source: str = ""
    """Where the price was read (page name)."""
    date: str = ""
    """When that price was listed (ISO date)."""

    @property
    def key(self) -> str:
        return f"{self.provider}/{self.model}"

    def cost_usd(self, tokens: TokenCounts) -> float:
        """What the API would charge for ``tokens``."""
        return (
            tokens.uncached_prompt_tokens * self.input_usd_per_m
            + tokens.cached_prompt_tokens * self.cached_input_usd_per_m
            + tokens.output_tokens * self.output_usd_per_m
        ) / TOKENS_PER_MILLION


class PriceTableError(ValueError):
    """The price table is malformed; the message names the entry and the field."""


_PRICE_FIELDS = ("provider", "model", "input_usd_per_m", "cached_input_usd_per_m", "output_usd_per_m")


def _price_from_mapping(raw: Mapping[str, Any], where: str) -> ApiPrice:
    missing = [f for f in _PRICE_FIELDS if f not in raw]
    if missing:
        raise PriceTableError(f"{where}: missing {', '.join(missing)}")
    numbers: dict[str, float] = {}
    for name in ("input_usd_per_m", "cached_input_usd_per_m", "output_usd_per_m"):
        value = raw[name]
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 0 or not math.isfinite(value):
            raise PriceTableError(f"{where}: {name} must be a non-negative number, not {value!r}")
        numbers[name] = float(value)
    for name in ("provider", "model"):
        if not isinstance(raw[name], str) or not raw[name].strip():
            raise PriceTableError(f"{where}: {name} must be a non-empty string")
    return ApiPrice(
        provider=raw["provider"].strip(),
        model=raw["model"].strip(),
        source=str(raw.get("source", "")),
        date=str(raw.get("date", "")),
        **numbers,
    )


@dataclass(frozen=True, slots=True)
class PriceTable:
    """Paid-API prices, looked up by ``model`` or ``provider/model``."""

    prices: tuple[ApiPrice, ...] = ()

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> PriceTable:
        """Build from parsed TOML: ``[[price]]`` tables with the ApiPrice fields."""
        entries = data.get("price", [])
        if not isinstance(entries, list):
            raise PriceTableError("'price' must be an array of tables ([[price]])")
        prices: list[ApiPrice] = []
        for i, raw in enumerate(entries):
            if not isinstance(raw, Mapping):
                raise PriceTableError(f"price #{i + 1}: not a table")
            label = raw.get("model", f"#{i + 1}")
            prices.append(_price_from_mapping(raw, f"price {label}"))
        return cls(tuple(prices))

    def merged(self, override: PriceTable) -> PriceTable:
        """This table with ``override``'s entries replacing same-key ones and added."""
        by_key = {p.key: p for p in self.prices}
        for p in override.prices:
            by_key[p.key] = p
        return PriceTable(tuple(by_key.values()))

    def find(self, name: str) -> ApiPrice | None:
        """The price for ``provider/model`` or a bare ``model`` (first match)."""
        wanted = name.strip().lower()
        for p in self.prices:
            if p.key.lower() == wanted:
                return p
        for p in self.prices:
            if p.model.lower() == wanted:
                return p
        return None

    def models(self) -> list[str]:
        return [p.key for p in self.prices]


# --------------------------------------------------------------------------- tokens
@dataclass(frozen=True, slots=True)
class TokenCounts:
    """Tokens processed; ``cached_prompt_tokens`` is the part of ``prompt_tokens`` served
    from the prefix cache."""

    prompt_tokens: float = 0
    cached_prompt_tokens: float = 0
    output_tokens: float = 0

    @property
    def uncached_prompt_tokens(self) -> float:
        return max(0.0, self.prompt_tokens - self.cached_prompt_tokens)

    @property
    def total_tokens(self) -> float:
        return self.prompt_tokens + self.output_tokens

    def __add__(self, other: TokenCounts) -> TokenCounts:
        return TokenCounts(
            self.prompt_tokens + other.prompt_tokens,
            self.cached_prompt_tokens + other.cached_prompt_tokens,
            self.output_tokens + other.output_tokens,
        )

    @classmethod
    def total(cls, counts: Iterable[TokenCounts]) -> TokenCounts:
        out = cls()
        for c in counts:
            out = out + c
        return out


# --------------------------------------------------------------------------- self-hosting
class SelfHostMode(Enum):
    GPU_HOURLY = "gpu_hourly"
    """A GPU rental price per GPU-hour."""
    ENERGY = "energy"
    """Amortized hardware plus measured energy × electricity price × PUE."""


@dataclass(frozen=True, slots=True)
class SelfHostAssumptions:
    """What self-hosting costs; every field is shown (and editable) in the cost panel."""

    mode: SelfHostMode = SelfHostMode.ENERGY
    gpu_hourly_usd: float = 0.0
    """Rental price of one GPU for one hour (GPU_HOURLY mode)."""
    gpu_count: int = 1
    """GPUs rented (GPU_HOURLY mode)."""
    hardware_usd: float = 0.0
    """Purchase price of the machine, amortized over ``hardware_years`` (ENERGY mode)."""
    hardware_years: float = 3.0
    electricity_usd_per_kwh: float = 0.15
    pue: float = 1.3
    """Power usage effectiveness: facility energy / IT energy (cooling etc.)."""

    def __post_init__(self) -> None:
        for name in ("gpu_hourly_usd", "hardware_usd", "electricity_usd_per_kwh"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} cannot be negative")
        if self.gpu_count < 1:
            raise ValueError("gpu_count must be at least 1")
        if self.hardware_years <= 0:
            raise ValueError("hardware_years must be positive")
        if self.pue < 1.0:
            raise ValueError("pue is at least 1.0")

    @property
    def hardware_usd_per_hour(self) -> float:
        return self.hardware_usd / (self.hardware_years * HOURS_PER_YEAR)

    def describe(self) -> list[tuple[str, str]]:
        """The assumptions as (label, value) lines for the cost panel."""
        if self.mode is SelfHostMode.GPU_HOURLY:
            return [
                ("self-hosting cost", "GPU rental"),
                ("GPU price", f"${self.gpu_hourly_usd:.2f} per GPU-hour"),
                ("GPUs", str(self.gpu_count)),
            ]
        return [
            ("self-hosting cost", "hardware + measured energy"),
            ("hardware", f"${self.hardware_usd:,.0f} over {self.hardware_years:g} years "
                         f"(${self.hardware_usd_per_hour:.3f}/h)"),
            ("electricity", f"${self.electricity_usd_per_kwh:.3f}/kWh"),
            ("PUE", f"{self.pue:.2f}"),
        ]


def self_host_cost_usd(a: SelfHostAssumptions, elapsed_s: float, energy_j: float | None) -> float | None:
    """Cost of ``elapsed_s`` seconds of self-hosting; None when it needs energy nobody measured."""
    hours = max(0.0, elapsed_s) / 3600.0
    if a.mode is SelfHostMode.GPU_HOURLY:
        return a.gpu_hourly_usd * a.gpu_count * hours
    if energy_j is None:
        return None
    energy_usd = energy_j / JOULES_PER_KWH * a.electricity_usd_per_kwh * a.pue
    return a.hardware_usd_per_hour * hours + energy_usd


def usd_per_m_tokens(cost_usd: float | None, tokens: float) -> float | None:
    """Dollars per million tokens; None when there were no tokens or no cost."""
    if cost_usd is None or tokens <= 0:
        return None
    return cost_usd / tokens * TOKENS_PER_MILLION


def usd_per_m_tokens_at_rate(hourly_usd: float, tokens_per_s: float) -> float:
    """Dollars per million tokens for a machine costing ``hourly_usd`` that sustains
    ``tokens_per_s`` (the report's arithmetic: price / tokens per hour)."""
    if tokens_per_s <= 0:
        raise ValueError("tokens_per_s must be positive")
    return hourly_usd / (tokens_per_s * 3600.0) * TOKENS_PER_MILLION


def savings_fraction(self_host_usd: float | None, api_usd: float | None) -> float | None:
    """``1 − self/api``: 0.66 means self-hosting cost 66% less; negative means more."""
    if self_host_usd is None or api_usd is None or api_usd <= 0:
        return None
    return 1.0 - self_host_usd / api_usd


def joules_per_token(energy_j: float | None, tokens: float) -> float | None:
    if energy_j is None or tokens <= 0:
        return None
    return energy_j / tokens


# --------------------------------------------------------------------------- the estimate
@dataclass(frozen=True, slots=True)
class CostEstimate:
    """Self-hosted versus paid API for the same tokens over the same window."""

    elapsed_s: float
    tokens: TokenCounts
    energy_j: float | None
    """GPU energy measured over the window (None: not measured, e.g. no GPU)."""
    api: ApiPrice | None
    assumptions: SelfHostAssumptions
    self_host_usd: float | None
    api_usd: float | None
    self_host_usd_per_m_tokens: float | None
    """Per million tokens processed (prompt + output)."""
    self_host_usd_per_m_output_tokens: float | None
    api_usd_per_m_tokens: float | None
    """Blended API price for this window's token mix, per million tokens processed."""
    savings_pct: float | None
    saved_usd: float | None
    """API cost minus self-hosting cost, cumulative over the window (negative: a loss)."""
    joules_per_token: float | None
    """Measured GPU energy per generated token."""
    notes: tuple[str, ...] = field(default=())
    """Plain-words reasons for any value that is None."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "elapsed_s": self.elapsed_s,
            "prompt_tokens": self.tokens.prompt_tokens,
            "cached_prompt_tokens": self.tokens.cached_prompt_tokens,
            "output_tokens": self.tokens.output_tokens,
            "energy_j": self.energy_j,
            "api_model": self.api.key if self.api else None,
            "api_price_source": self.api.source if self.api else None,
            "api_price_date": self.api.date if self.api else None,
            "mode": self.assumptions.mode.value,
            "assumptions": dict(self.assumptions.describe()),
            "self_host_usd": self.self_host_usd,
            "api_usd": self.api_usd,
            "self_host_usd_per_m_tokens": self.self_host_usd_per_m_tokens,
            "self_host_usd_per_m_output_tokens": self.self_host_usd_per_m_output_tokens,
            "api_usd_per_m_tokens": self.api_usd_per_m_tokens,
            "savings_pct": self.savings_pct,
            "saved_usd": self.saved_usd,
            "joules_per_token": self.joules_per_token,
            "notes": list(self.notes),
        }


def estimate_cost(
    *,
    tokens: TokenCounts,
    elapsed_s: float,
    energy_j: float | None,
    api: ApiPrice | None,
    assumptions: SelfHostAssumptions,
) -> CostEstimate:
    """Compare self-hosting with ``api`` for ``tokens`` processed in ``elapsed_s``."""
    notes: list[str] = []
    self_usd = self_host_cost_usd(assumptions, elapsed_s, energy_j)
    if self_usd is None:
        notes.append("self-hosting cost needs measured GPU energy (no GPU found)")
    api_usd = api.cost_usd(tokens) if api is not None else None
    if api is None:
        notes.append("no paid-API price chosen")
    if tokens.total_tokens <= 0:
        notes.append("no tokens yet")
    saved = (api_usd - self_usd) if (api_usd is not None and self_usd is not None) else None
    fraction = savings_fraction(self_usd, api_usd)
    return CostEstimate(
        elapsed_s=elapsed_s,
        tokens=tokens,
        energy_j=energy_j,
        api=api,
        assumptions=assumptions,
        self_host_usd=self_usd,
        api_usd=api_usd,
        self_host_usd_per_m_tokens=usd_per_m_tokens(self_usd, tokens.total_tokens),
        self_host_usd_per_m_output_tokens=usd_per_m_tokens(self_usd, tokens.output_tokens),
        api_usd_per_m_tokens=usd_per_m_tokens(api_usd, tokens.total_tokens),
        savings_pct=None if fraction is None else 100.0 * fraction,
        saved_usd=saved,
        joules_per_token=joules_per_token(energy_j, tokens.output_tokens),
        notes=tuple(notes),
    )
