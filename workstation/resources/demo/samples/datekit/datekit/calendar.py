"""Leap years, month lengths and day numbers in the Gregorian calendar."""

MONTH_DAYS = [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]


def is_leap_year(year):
    """Divisible by 4, except centuries, except every fourth century."""
    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)


def days_in_year(year):
    return 366 if is_leap_year(year) else 365


def days_in_month(year, month):
    """Days in `month` (1 to 12) of `year`."""
    if month == 2 and is_leap_year(year):
        return 29
    return MONTH_DAYS[month - 1]


def day_of_year(year, month, day):
    """1 for 1 January, 365 or 366 for 31 December."""
    return sum(days_in_month(year, m) for m in range(1, month)) + day
