"""Stock of a small shop."""

from inventory.stock import Inventory, Item

__all__ = ["Inventory", "Item"]
