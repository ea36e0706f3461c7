"""Cost model against hand-worked cases (the arithmetic is written out in each test)."""

from __future__ import annotations

import pytest

from workstation.core.cost import (
    ApiPrice,
    PriceTable,
    PriceTableError,
    SelfHostAssumptions,
    SelfHostMode,
    TokenCounts,
    estimate_cost,
    joules_per_token,
    savings_fraction,
    self_host_cost_usd,
    usd_per_m_tokens,
    usd_per_m_tokens_at_rate,
)

GPT41_MINI = ApiPrice("openai", "gpt-4.1-mini", 0.40, 0.10, 1.60, "test", "2025-04-14")
GPT41 = ApiPrice("openai", "gpt-4.1", 2.00, 0.50, 8.00, "test", "2025-04-14")

# The report: 6,058 tok/s with factory settings, 11,840 tok/s after tuning, same GPU.
BASELINE_TOK_S = 6_058
TUNED_TOK_S = 11_840
# A given GPU price, chosen so the arithmetic is easy: $3.60/h = $0.001 per second.
GPU_USD_PER_HOUR = 3.60


def test_report_baseline_vs_tuned_usd_per_million_tokens() -> None:
    # $/M = $0.001/s / (tok/s) × 1e6 = 1000 / tok/s
    baseline = usd_per_m_tokens_at_rate(GPU_USD_PER_HOUR, BASELINE_TOK_S)
    tuned = usd_per_m_tokens_at_rate(GPU_USD_PER_HOUR, TUNED_TOK_S)
    assert baseline == pytest.approx(1000 / 6058)  # $0.16507/M
    assert baseline == pytest.approx(0.165071, abs=1e-6)
    assert tuned == pytest.approx(1000 / 11840)  # $0.08446/M
    assert tuned == pytest.approx(0.084459, abs=1e-6)
    # Same GPU, same hour: tuning cut the price per token by 1 - 6058/11840 = 48.83%.
    assert 1 - tuned / baseline == pytest.approx(0.488345, abs=1e-6)


@pytest.mark.parametrize(
    ("tok_s", "api_usd", "savings_pct", "self_per_m_output"),
    [
        # One hour at 512 in / 512 out: prompt tokens = output tokens = tok/s × 3600.
        # 6,058 × 3600 = 21,808,800 of each. gpt-4.1-mini: 21.8088 × $0.40 + 21.8088 × $1.60
        # = $43.6176. Self-hosting: $3.60. Savings 1 - 3.6/43.6176 = 91.746%.
        (BASELINE_TOK_S, 43.6176, 91.746, 3.60 / 21.8088),
        # 11,840 × 3600 = 42,624,000 of each: API $85.248; savings 1 - 3.6/85.248 = 95.777%.
        (TUNED_TOK_S, 85.248, 95.777, 3.60 / 42.624),
    ],
)
def test_report_throughputs_against_a_paid_api(
    tok_s: int, api_usd: float, savings_pct: float, self_per_m_output: float
) -> None:
    tokens = TokenCounts(prompt_tokens=tok_s * 3600, output_tokens=tok_s * 3600)
    a = SelfHostAssumptions(mode=SelfHostMode.GPU_HOURLY, gpu_hourly_usd=GPU_USD_PER_HOUR)
    est = estimate_cost(tokens=tokens, elapsed_s=3600, energy_j=None, api=GPT41_MINI, assumptions=a)
    assert est.self_host_usd == pytest.approx(3.60)
    assert est.api_usd == pytest.approx(api_usd)
    assert est.savings_pct == pytest.approx(savings_pct, abs=1e-3)
    assert est.saved_usd == pytest.approx(api_usd - 3.60)
    assert est.self_host_usd_per_m_output_tokens == pytest.approx(self_per_m_output)
    # Blended API price for a 50/50 mix: (0.40 + 1.60) / 2 = $1.00 per million tokens.
    assert est.api_usd_per_m_tokens == pytest.approx(1.00)
    assert est.joules_per_token is None  # GPU-rental mode measured no energy here
    assert est.notes == ()


def test_energy_mode_hardware_amortization_plus_energy() -> None:
    # $50,000 over 3 years = 50000 / (3 × 8766 h) = $1.901285/h.
    # 700 W for one hour = 2.52e6 J = 0.7 kWh; × $0.15 × PUE 1.3 = $0.1365.
    a = SelfHostAssumptions(
        mode=SelfHostMode.ENERGY, hardware_usd=50_000, hardware_years=3,
        electricity_usd_per_kwh=0.15, pue=1.3,
    )
    assert a.hardware_usd_per_hour == pytest.approx(50_000 / 26_298)
    cost = self_host_cost_usd(a, 3600, 2.52e6)
    assert cost == pytest.approx(1.901285 + 0.1365, abs=1e-6)
    # 10 M tokens generated in that hour: 2.52e6 J / 1e7 = 0.252 J per token.
    est = estimate_cost(
        tokens=TokenCounts(output_tokens=10_000_000), elapsed_s=3600, energy_j=2.52e6,
        api=GPT41_MINI, assumptions=a,
    )
    assert est.joules_per_token == pytest.approx(0.252)
    # API: 10 M output × $1.60 = $16.00; saving 1 - 2.037785/16 = 87.264%.
    assert est.api_usd == pytest.approx(16.0)
    assert est.savings_pct == pytest.approx(87.264, abs=1e-3)
    assert est.self_host_usd_per_m_tokens == pytest.approx(0.2037785, abs=1e-7)


def test_energy_only_with_no_hardware_cost() -> None:
    # 1 kWh at $0.20, PUE 1.5 → $0.30
    a = SelfHostAssumptions(electricity_usd_per_kwh=0.20, pue=1.5)
    assert self_host_cost_usd(a, 1800, 3.6e6) == pytest.approx(0.30)


def test_cached_prompt_tokens_billed_at_cached_price() -> None:
    # 1 M prompt tokens, 0.75 M of them cache hits, 0.1 M output, gpt-4.1:
    # 0.25 × $2.00 + 0.75 × $0.50 + 0.1 × $8.00 = 0.5 + 0.375 + 0.8 = $1.675
    tokens = TokenCounts(prompt_tokens=1_000_000, cached_prompt_tokens=750_000, output_tokens=100_000)
    assert GPT41.cost_usd(tokens) == pytest.approx(1.675)
    assert tokens.uncached_prompt_tokens == 250_000
    assert tokens.total_tokens == 1_100_000


def test_no_energy_means_unknown_cost_not_zero() -> None:
    est = estimate_cost(
        tokens=TokenCounts(prompt_tokens=100, output_tokens=100), elapsed_s=60, energy_j=None,
        api=GPT41_MINI, assumptions=SelfHostAssumptions(mode=SelfHostMode.ENERGY),
    )
    assert est.self_host_usd is None
    assert est.savings_pct is None
    assert est.saved_usd is None
    assert est.api_usd == pytest.approx((100 * 0.40 + 100 * 1.60) / 1e6)
    assert any("no GPU" in n for n in est.notes)


def test_idle_gpu_rental_is_a_loss() -> None:
    # An hour rented with no tokens: $3.60 spent, nothing the API would have charged.
    est = estimate_cost(
        tokens=TokenCounts(), elapsed_s=3600, energy_j=None, api=GPT41_MINI,
        assumptions=SelfHostAssumptions(mode=SelfHostMode.GPU_HOURLY, gpu_hourly_usd=3.6, gpu_count=1),
    )
    assert est.saved_usd == pytest.approx(-3.6)
    assert est.savings_pct is None  # API cost 0: a percentage means nothing
    assert est.self_host_usd_per_m_tokens is None


def test_gpu_count_multiplies_rental() -> None:
    a = SelfHostAssumptions(mode=SelfHostMode.GPU_HOURLY, gpu_hourly_usd=2.0, gpu_count=8)
    assert self_host_cost_usd(a, 1800, None) == pytest.approx(8.0)  # 8 × $2 × 0.5 h


def test_small_helpers() -> None:
    assert usd_per_m_tokens(2.0, 4_000_000) == pytest.approx(0.5)
    assert usd_per_m_tokens(2.0, 0) is None
    assert savings_fraction(34.0, 100.0) == pytest.approx(0.66)
    assert savings_fraction(1.0, 0.0) is None
    assert joules_per_token(100.0, 0) is None
    with pytest.raises(ValueError):
        usd_per_m_tokens_at_rate(1.0, 0)


def test_assumptions_validate_and_describe() -> None:
    with pytest.raises(ValueError):
        SelfHostAssumptions(pue=0.9)
    with pytest.raises(ValueError):
        SelfHostAssumptions(gpu_count=0)
    lines = dict(SelfHostAssumptions(mode=SelfHostMode.GPU_HOURLY, gpu_hourly_usd=3.6).describe())
    assert lines["GPU price"] == "$3.60 per GPU-hour"
    lines = dict(SelfHostAssumptions(hardware_usd=50_000).describe())
    assert "$50,000 over 3 years" in lines["hardware"]


def test_price_table_parse_find_and_merge() -> None:
    table = PriceTable.from_mapping(
        {"price": [
            {"provider": "openai", "model": "gpt-4.1-mini", "input_usd_per_m": 0.4,
             "cached_input_usd_per_m": 0.1, "output_usd_per_m": 1.6, "source": "s", "date": "d"},
            {"provider": "anthropic", "model": "claude-haiku-4-5", "input_usd_per_m": 1,
             "cached_input_usd_per_m": 0.1, "output_usd_per_m": 5},
        ]}
    )
    assert table.find("gpt-4.1-mini") == GPT41_MINI.__class__("openai", "gpt-4.1-mini", 0.4, 0.1, 1.6, "s", "d")
    assert table.find("ANTHROPIC/claude-haiku-4-5").output_usd_per_m == 5.0
    assert table.find("nope") is None
    user = PriceTable.from_mapping({"price": [
        {"provider": "openai", "model": "gpt-4.1-mini", "input_usd_per_m": 0.2,
         "cached_input_usd_per_m": 0.05, "output_usd_per_m": 0.8},
        {"provider": "local", "model": "mine", "input_usd_per_m": 0,
         "cached_input_usd_per_m": 0, "output_usd_per_m": 0},
    ]})
    merged = table.merged(user)
    assert merged.find("gpt-4.1-mini").input_usd_per_m == 0.2
    assert merged.find("mine") is not None
    assert len(merged.prices) == 3


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"provider": "x", "model": "m", "input_usd_per_m": 1, "cached_input_usd_per_m": 1}, "missing output_usd_per_m"),
        ({"provider": "x", "model": "m", "input_usd_per_m": -1, "cached_input_usd_per_m": 1,
          "output_usd_per_m": 1}, "non-negative"),
        ({"provider": "x", "model": "m", "input_usd_per_m": "1", "cached_input_usd_per_m": 1,
          "output_usd_per_m": 1}, "non-negative number"),
        ({"provider": "", "model": "m", "input_usd_per_m": 1, "cached_input_usd_per_m": 1,
          "output_usd_per_m": 1}, "non-empty"),
    ],
)
def test_price_table_errors_name_the_entry(entry: dict, message: str) -> None:
    with pytest.raises(PriceTableError, match=message):
        PriceTable.from_mapping({"price": [entry]})
