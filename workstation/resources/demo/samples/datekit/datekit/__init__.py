"""Calendar arithmetic."""

from datekit.calendar import day_of_year, days_in_month, days_in_year, is_leap_year

__all__ = ["day_of_year", "days_in_month", "days_in_year", "is_leap_year"]
