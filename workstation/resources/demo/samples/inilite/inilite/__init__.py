"""A tiny key = value config reader."""

from inilite.parser import parse

__all__ = ["parse"]
