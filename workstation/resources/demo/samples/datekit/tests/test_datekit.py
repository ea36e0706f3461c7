from datekit import day_of_year, days_in_month, days_in_year, is_leap_year


def test_ordinary_leap_years():
    assert is_leap_year(2024)
    assert not is_leap_year(2023)


def test_century_rule():
    assert not is_leap_year(1900)
    assert is_leap_year(2000)


def test_days_in_year():
    assert days_in_year(2024) == 366
    assert days_in_year(2023) == 365


def test_days_in_month():
    assert days_in_month(2023, 1) == 31
    assert days_in_month(2023, 4) == 30
    assert days_in_month(2024, 2) == 29


def test_day_of_year():
    assert day_of_year(2023, 1, 1) == 1
    assert day_of_year(2024, 12, 31) == 366
