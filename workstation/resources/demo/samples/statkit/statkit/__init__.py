"""Descriptive statistics without dependencies."""

from statkit.core import mean, median, mode

__all__ = ["mean", "median", "mode"]
