"""The pane document: tokens are coalesced until the flush, styles follow fences and
diff signs, the document stays bounded."""

from __future__ import annotations

from workstation.ui.panes.transcript_doc import LineStyle, TranscriptDoc, diff_counts, wrap_line


def test_stream_is_invisible_until_flush() -> None:
    doc = TranscriptDoc()
    for token in ["Hello", ",", " world"]:
        doc.stream(token)
    assert doc.text() == "" and doc.has_pending and doc.pending_tokens == 3
    revision = doc.revision
    assert doc.flush() is True
    assert doc.text() == "Hello, world" and doc.tokens_flushed == 3
    assert doc.revision > revision
    assert doc.flush() is False


def test_code_fences_and_diff_blocks_are_styled() -> None:
    doc = TranscriptDoc()
    doc.stream("Fix:\n```python\ndef add(a, b):\n    return a + b\n```\n```diff\n- old\n+ new\n```\nDone")
    doc.flush()
    styles = [(line.text, line.style) for line in doc.lines]
    assert styles == [
        ("Fix:", LineStyle.TEXT),
        ("```python", LineStyle.FENCE),
        ("def add(a, b):", LineStyle.CODE),
        ("    return a + b", LineStyle.CODE),
        ("```", LineStyle.FENCE),
        ("```diff", LineStyle.FENCE),
        ("- old", LineStyle.REMOVED),
        ("+ new", LineStyle.ADDED),
        ("```", LineStyle.FENCE),
        ("Done", LineStyle.TEXT),
    ]


def test_fence_split_across_flushes() -> None:
    doc = TranscriptDoc()
    for piece in ["``", "`py", "\nx = 1", "\n`", "``\nafter"]:
        doc.stream(piece)
        doc.flush()
    assert [line.style for line in doc.lines] == [
        LineStyle.FENCE, LineStyle.CODE, LineStyle.FENCE, LineStyle.TEXT,
    ]


def test_whole_lines_end_the_stream_and_tool_lines_expand() -> None:
    doc = TranscriptDoc()
    doc.stream("thinking aloud")
    tool = doc.add_line("✎ write_to_file calc.py  +1 −0", LineStyle.TOOL, detail='{"path": "calc.py"}')
    doc.stream("next")
    doc.flush()
    assert [line.text for line in doc.lines] == ["thinking aloud", "✎ write_to_file calc.py  +1 −0", "next"]
    assert tool.expandable and not tool.expanded
    doc.toggle(tool)
    assert tool.expanded


def test_bounded_document_counts_what_it_trimmed() -> None:
    doc = TranscriptDoc(max_lines=50)
    for i in range(200):
        doc.stream(f"line {i}\n")
    doc.flush()
    assert len(doc.lines) == 50 and doc.trimmed_lines == 151
    assert doc.lines[-2].text == "line 199"


def test_observers_see_appended_and_extended_lines() -> None:
    doc = TranscriptDoc()
    seen: list[list[str]] = []
    doc.subscribe(lambda lines: seen.append([line.text for line in lines]))
    doc.stream("a")
    doc.flush()
    doc.stream("b\nc")
    doc.flush()
    assert seen == [["a"], ["ab", "c"]]


def test_wrap_prefers_spaces_and_keeps_every_character() -> None:
    text = "the quick brown fox jumps over the lazy dog " * 3
    rows = wrap_line(text, 20)
    assert all(len(r) <= 20 for r in rows)
    assert " ".join(rows).split() == text.split()
    assert wrap_line("x" * 45, 20) == ["x" * 20, "x" * 20, "x" * 5]


def test_diff_counts() -> None:
    assert diff_counts("--- a/x\n+++ b/x\n@@ -1 +1,2 @@\n-old\n+new\n+more\n") == (2, 1)
