"""Descriptive statistics."""

from collections import Counter


def mean(values):
    """Arithmetic mean."""
    return sum(values) / len(values)


def median(values):
    """Middle value; for an even count, the mean of the two middle values."""
    ordered = sorted(values)
    middle = len(ordered) // 2
    if len(ordered) % 2 == 1:
        return ordered[middle]
    return (ordered[middle - 1] + ordered[middle]) / 2


def mode(values):
    """Most common value; the smallest one on a tie."""
    counts = Counter(values)
    best = max(counts.values())
    return min(value for value, count in counts.items() if count == best)


def spread(values):
    """Largest value minus smallest value."""
    return max(values) - min(values)
