"""Text helpers."""

import re

SMALL_WORDS = {"a", "an", "and", "of", "the", "to", "in"}


def slugify(text):
    """Turn a title into a URL slug: "Hello, World!" -> "hello-world"."""
    text = text.lower().strip()
    text = re.sub(r"[^a-z0-9]+", "-", text)
    return text.strip("-")


def title_case(text):
    """Capitalize words, keeping small words lower case unless they come first."""
    words = text.split()
    out = []
    for index, word in enumerate(words):
        if index > 0 and word.lower() in SMALL_WORDS:
            out.append(word.lower())
        else:
            out.append(word[:1].upper() + word[1:].lower())
    return " ".join(out)


def wrap(text, width):
    """Break text into lines of at most `width` characters, on spaces."""
    lines, line = [], ""
    for word in text.split():
        candidate = f"{line} {word}".strip()
        if len(candidate) > width and line:
            lines.append(line)
            line = word
        else:
            line = candidate
    if line:
        lines.append(line)
    return lines


def truncate(text, width, suffix="..."):
    """Cut text to at most `width` characters, ending with `suffix` when it was cut."""
    if len(text) <= width:
        return text
    return text[: width - len(suffix)] + suffix
