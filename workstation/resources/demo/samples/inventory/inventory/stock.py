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

    def restock(self, name, quantity):
        """Add `quantity` (at least 1) to an item's stock."""
        if quantity < 1:
            raise ValueError("restock at least one")
        self._items[name].quantity += quantity

    def total_value(self):
        """What the whole stock is worth: price times quantity, summed over items."""
        return sum(item.price * item.quantity for item in self._items.values())

    def low_stock(self, threshold):
        """Names of the items with fewer than `threshold` in stock, sorted."""
        return sorted(item.name for item in self._items.values() if item.quantity < threshold)
