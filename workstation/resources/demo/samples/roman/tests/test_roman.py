import pytest

from roman import from_roman, to_roman


@pytest.mark.parametrize("number,expected", [(1, "I"), (3, "III"), (8, "VIII"), (2023, "MMXXIII")])
def test_additive(number, expected):
    assert to_roman(number) == expected


@pytest.mark.parametrize("number,expected", [(4, "IV"), (9, "IX"), (40, "XL"), (1994, "MCMXCIV")])
def test_subtractive(number, expected):
    assert to_roman(number) == expected


@pytest.mark.parametrize("number", [0, -1, 4000])
def test_out_of_range(number):
    with pytest.raises(ValueError):
        to_roman(number)


def test_from_roman():
    assert from_roman("XIV") == 14
    assert from_roman("MCMXCIV") == 1994


def test_from_roman_any_case():
    assert from_roman("xiv") == 14
