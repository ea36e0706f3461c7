import pytest

from inilite import dump, get_bool, parse


def test_pairs():
    assert parse("a = 1\nb=two\n") == {"a": "1", "b": "two"}


def test_comments_are_ignored():
    text = "# settings\nname = demo\n; old = value\n"
    assert parse(text) == {"name": "demo"}


def test_bad_line():
    with pytest.raises(ValueError, match="line 2"):
        parse("a = 1\nnonsense\n")


def test_get_bool_any_case():
    config = {"debug": "Yes", "color": "OFF"}
    assert get_bool(config, "debug") is True
    assert get_bool(config, "color") is False
    assert get_bool(config, "missing", default=True) is True


def test_dump_sorts_keys():
    assert dump({"b": "2", "a": "1"}) == "a = 1\nb = 2\n"
    assert parse(dump({"b": "2", "a": "1"})) == {"a": "1", "b": "2"}
