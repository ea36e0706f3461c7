"""Items and the inventory that holds them."""

from dataclasses import dataclass


@dataclass
class Item:
    name: str
    price: float
    quantity: int = 0


class Inventory:
    def __init__(self):
        self._items = {}

    def add(self, item):
        if item.name in self._items:
            raise ValueError(f"{item.name} is already in stock")
        self._items[item.name] = item

    def get(self, name):
        return self._items[name]

    def sell(self, name, quantity=1):
        item = self._items[name]
        if quantity > item.quantity:
            raise ValueError(f"only {item.quantity} {name} left")
        item.quantity -= quantity

    def total_value(self):
        """What the whole stock is worth: price times quantity, summed over items."""
        return sum(item.price for item in self._items.values())
