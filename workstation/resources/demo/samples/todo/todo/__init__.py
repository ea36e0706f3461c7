"""A to-do list kept in a JSON file."""

from todo.store import TodoList

__all__ = ["TodoList"]
