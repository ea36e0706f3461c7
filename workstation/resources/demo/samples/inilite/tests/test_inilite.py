import pytest

from inilite import parse


def test_pairs():
    assert parse("a = 1\nb=two\n") == {"a": "1", "b": "two"}


def test_comments_are_ignored():
    text = "# settings\nname = demo\n; old = value\n"
    assert parse(text) == {"name": "demo"}


def test_bad_line():
    with pytest.raises(ValueError, match="line 2"):
        parse("a = 1\nnonsense\n")
