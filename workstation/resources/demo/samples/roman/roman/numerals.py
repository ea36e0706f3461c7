"""Integers to Roman numerals and back."""

SYMBOLS = [
    (1000, "M"),
    (900, "CM"),
    (500, "D"),
    (400, "CD"),
    (100, "C"),
    (90, "XC"),
    (50, "L"),
    (40, "XL"),
    (10, "X"),
    (9, "IX"),
    (5, "V"),
    (4, "IV"),
    (1, "I"),
]
VALUES = {"M": 1000, "D": 500, "C": 100, "L": 50, "X": 10, "V": 5, "I": 1}


def to_roman(number):
    """Write an integer from 1 to 3999 in Roman numerals (subtractive form: 4 is IV)."""
    if not 0 < number < 4000:
        raise ValueError(f"{number} cannot be written in Roman numerals")
    out = []
    for value, symbol in SYMBOLS:
        count, number = divmod(number, value)
        out.append(symbol * count)
    return "".join(out)


def from_roman(text):
    """Read a Roman numeral (any case) back into an integer."""
    digits = [VALUES[ch] for ch in text.upper()]
    total = 0
    for index, value in enumerate(digits):
        if index + 1 < len(digits) and value < digits[index + 1]:
            total -= value
        else:
            total += value
    return total
