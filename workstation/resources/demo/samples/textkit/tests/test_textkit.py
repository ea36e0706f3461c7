from textkit import slugify, title_case, truncate, wrap


def test_slugify_simple():
    assert slugify("Hello World") == "hello-world"


def test_slugify_collapses_separators():
    assert slugify("Hello,   World!") == "hello-world"
    assert slugify("  --Rust & Python--  ") == "rust-python"


def test_title_case_keeps_small_words():
    assert title_case("the lord of the rings") == "The Lord of the Rings"


def test_wrap():
    assert wrap("one two three four", 9) == ["one two", "three", "four"]


def test_wrap_fills_lines_to_width():
    assert wrap("aa bb cc", 5) == ["aa bb", "cc"]


def test_truncate():
    assert truncate("short", 8) == "short"
    assert truncate("hello world", 8) == "hello..."
