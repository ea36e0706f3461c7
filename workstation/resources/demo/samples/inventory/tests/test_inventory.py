import pytest

from inventory import Inventory, Item


def make():
    stock = Inventory()
    stock.add(Item("pen", 1.5, 10))
    stock.add(Item("pad", 4.0, 2))
    return stock


def test_sell_reduces_quantity():
    stock = make()
    stock.sell("pen", 3)
    assert stock.get("pen").quantity == 7


def test_cannot_sell_more_than_stocked():
    with pytest.raises(ValueError):
        make().sell("pad", 3)


def test_can_sell_the_last_ones():
    stock = make()
    stock.sell("pad", 2)
    assert stock.get("pad").quantity == 0


def test_restock_adds_to_stock():
    stock = make()
    stock.restock("pen", 5)
    assert stock.get("pen").quantity == 15


def test_total_value_counts_quantity():
    assert make().total_value() == pytest.approx(23.0)


def test_low_stock():
    assert make().low_stock(5) == ["pad"]
