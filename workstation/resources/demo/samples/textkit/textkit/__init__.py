"""Small text helpers."""

from textkit.core import slugify, title_case, truncate, wrap

__all__ = ["slugify", "title_case", "truncate", "wrap"]
