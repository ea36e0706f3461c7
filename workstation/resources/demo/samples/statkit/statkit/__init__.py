"""Descriptive statistics without dependencies."""

from statkit.core import mean, median, mode, spread

__all__ = ["mean", "median", "mode", "spread"]
