"""Leap years and year lengths in the Gregorian calendar."""


def is_leap_year(year):
    """Divisible by 4, except centuries, except every fourth century."""
    return year % 4 == 0


def days_in_year(year):
    return 366 if is_leap_year(year) else 365
