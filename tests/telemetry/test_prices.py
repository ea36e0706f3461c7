from __future__ import annotations

from pathlib import Path

import pytest

from workstation.config import TelemetrySettings
from workstation.core.errors import UserError
from workstation.telemetry.prices import ensure_user_copy, load_price_table, user_prices_path


def test_shipped_table_is_valid_and_has_the_default_model() -> None:
    table = load_price_table()
    assert len(table.prices) >= 8
    default = table.find(TelemetrySettings().api_price_model)
    assert default is not None
    for p in table.prices:
        assert p.source and p.date, f"{p.key} needs a source and a date"
        assert 0 < p.cached_input_usd_per_m <= p.input_usd_per_m < p.output_usd_per_m


def test_user_copy_overrides_entries(tmp_path: Path) -> None:
    path = ensure_user_copy(tmp_path)
    assert path == user_prices_path(tmp_path) and path.is_file()
    path.write_text(
        '[[price]]\nprovider = "openai"\nmodel = "gpt-4.1-mini"\ninput_usd_per_m = 9.0\n'
        'cached_input_usd_per_m = 1.0\noutput_usd_per_m = 19.0\nsource = "mine"\ndate = "2026-01-01"\n'
    )
    table = load_price_table(tmp_path)
    assert table.find("gpt-4.1-mini").input_usd_per_m == 9.0
    assert table.find("gpt-4.1") is not None  # shipped entries stay
    ensure_user_copy(tmp_path)  # an existing copy is kept
    assert "mine" in path.read_text()


@pytest.mark.parametrize("text", ["[[price]\nbroken", '[[price]]\nprovider = "x"\n'])
def test_broken_user_copy_is_a_user_error(tmp_path: Path, text: str) -> None:
    user_prices_path(tmp_path).write_text(text)
    with pytest.raises(UserError) as info:
        load_price_table(tmp_path)
    assert str(user_prices_path(tmp_path)) in str(info.value)
