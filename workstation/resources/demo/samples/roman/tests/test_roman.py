import pytest

from roman import to_roman


@pytest.mark.parametrize("number,expected", [(1, "I"), (3, "III"), (8, "VIII"), (2023, "MMXXIII")])
def test_additive(number, expected):
    assert to_roman(number) == expected


@pytest.mark.parametrize("number,expected", [(4, "IV"), (9, "IX"), (40, "XL"), (1994, "MCMXCIV")])
def test_subtractive(number, expected):
    assert to_roman(number) == expected
