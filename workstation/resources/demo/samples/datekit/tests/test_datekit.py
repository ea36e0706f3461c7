from datekit import days_in_year, is_leap_year


def test_ordinary_leap_years():
    assert is_leap_year(2024)
    assert not is_leap_year(2023)


def test_century_rule():
    assert not is_leap_year(1900)
    assert is_leap_year(2000)


def test_days_in_year():
    assert days_in_year(2024) == 366
    assert days_in_year(2023) == 365
