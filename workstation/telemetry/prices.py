"""The paid-API price table: the packaged ``resources/prices.toml``, overridden entry by
entry by ``prices.toml`` in the data directory (which the user edits)."""

from __future__ import annotations

import shutil
import tomllib
from importlib import resources
from pathlib import Path

from workstation.core.cost import PriceTable, PriceTableError
from workstation.core.errors import UserError

PRICES_FILE_NAME = "prices.toml"


def packaged_prices_path() -> Path:
    return Path(str(resources.files("workstation") / "resources" / PRICES_FILE_NAME))


def user_prices_path(data_dir: Path) -> Path:
    return data_dir / PRICES_FILE_NAME


def _read(path: Path) -> PriceTable:
    try:
        with path.open("rb") as fh:
            data = tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"price table {path} is not valid TOML: {exc}",
                        hint="fix the file or delete it to go back to the shipped prices") from None
    try:
        return PriceTable.from_mapping(data)
    except PriceTableError as exc:
        raise UserError(f"price table {path}: {exc}",
                        hint="each [[price]] needs provider, model, input_usd_per_m, "
                             "cached_input_usd_per_m, output_usd_per_m") from None


def load_price_table(data_dir: Path | None = None) -> PriceTable:
    """Shipped prices, with the user's copy in ``data_dir`` (if any) taking precedence."""
    table = _read(packaged_prices_path())
    if data_dir is not None:
        user = user_prices_path(data_dir)
        if user.is_file():
            table = table.merged(_read(user))
    return table


def ensure_user_copy(data_dir: Path) -> Path:
    """Copy the shipped table into the data dir for editing (kept if it exists)."""
    user = user_prices_path(data_dir)
    if not user.exists():
        user.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(packaged_prices_path(), user)
    return user
