from textkit import slugify, title_case, wrap


def test_slugify_simple():
    assert slugify("Hello World") == "hello-world"


def test_slugify_collapses_separators():
    assert slugify("Hello,   World!") == "hello-world"
    assert slugify("  --Rust & Python--  ") == "rust-python"


def test_title_case_keeps_small_words():
    assert title_case("the lord of the rings") == "The Lord of the Rings"


def test_wrap():
    assert wrap("one two three four", 9) == ["one two", "three", "four"]
