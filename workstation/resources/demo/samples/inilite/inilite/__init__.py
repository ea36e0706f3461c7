"""A tiny key = value config reader."""

from inilite.parser import dump, get_bool, parse

__all__ = ["dump", "get_bool", "parse"]
