"""The list and its file."""

import json
from pathlib import Path


class TodoList:
    def __init__(self, path):
        self.path = Path(path)
        self.items = []
        if self.path.exists():
            self.items = json.loads(self.path.read_text())

    def save(self):
        self.path.write_text(json.dumps(self.items, indent=2))

    def add(self, text):
        self.items.append({"text": text, "done": False})
        self.save()

    def complete(self, number):
        """Mark item `number` (counted from 1, as shown by `list`) as done."""
        self.items[number - 1]["done"] = True
        self.save()

    def remove(self, number):
        """Remove item `number` (counted from 1)."""
        del self.items[number - 1]
        self.save()

    def pending(self):
        """The texts of the items not done yet, in order."""
        return [item["text"] for item in self.items if not item["done"]]

    def lines(self):
        return [f"{i}. [{'x' if item['done'] else ' '}] {item['text']}"
                for i, item in enumerate(self.items, start=1)]
