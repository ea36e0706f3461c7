"""read_file / write_to_file / replace_in_file / list / search / definitions, and SEARCH/REPLACE."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from workstation.agent import file_tools, search_tools
from workstation.agent.diff_blocks import DiffError, apply_blocks, parse_blocks
from workstation.agent.jail import PathJail
from workstation.agent.tool_specs import ToolError

BIG = dict(max_bytes=100_000, max_chars=100_000)


@pytest.fixture
def jail(tmp_path: Path) -> PathJail:
    (tmp_path / "app.py").write_text("def add(a, b):\n    return a + b\n\n\nclass Box:\n    def get(self):\n        return 1\n")
    return PathJail(tmp_path)


# ----- SEARCH/REPLACE
def block(search: str, replace: str) -> str:
    return f"------- SEARCH\n{search}\n=======\n{replace}\n+++++++ REPLACE"


def test_blocks_apply_in_order_and_old_markers_work() -> None:
    text = "a\nb\nc\n"
    diff = block("a", "A") + "\n" + "<<<<<<< SEARCH\nc\n=======\nC\n>>>>>>> REPLACE"
    assert apply_blocks(text, parse_blocks(diff)) == "A\nb\nC\n"


def test_delete_lines_and_keep_crlf() -> None:
    assert apply_blocks("a\nb\nc\n", parse_blocks(block("b", "").replace("\n=======\n\n", "\n=======\n"))) == "a\nc\n"
    assert apply_blocks("x\r\ny\r\n", parse_blocks(block("y", "z"))) == "x\r\nz\r\n"


def test_no_match_explains_whitespace_difference() -> None:
    with pytest.raises(DiffError, match="lines 2-2 match when whitespace is ignored"):
        apply_blocks("def f():\n    return 1\n", parse_blocks(block("  return 1", "  return 2")))


def test_no_match_names_the_first_line_or_says_to_read() -> None:
    with pytest.raises(DiffError, match="first line occurs at line 1"):
        apply_blocks("a\nb\n", parse_blocks(block("a\nx", "y")))
    with pytest.raises(DiffError, match="does not match anything.*read_file"):
        apply_blocks("a\nb\n", parse_blocks(block("zzz", "y")))


def test_ambiguous_match_lists_lines() -> None:
    with pytest.raises(DiffError, match="matches 2 places .*lines 1, 3"):
        apply_blocks("x = 1\ny\nx = 1\n", parse_blocks(block("x = 1", "x = 2")))


def test_partial_line_is_not_a_match() -> None:
    with pytest.raises(DiffError):
        apply_blocks("value = 10\n", parse_blocks(block("value = 1", "value = 2")))


def test_malformed_blocks() -> None:
    with pytest.raises(DiffError, match="no SEARCH/REPLACE block"):
        parse_blocks("just text")
    with pytest.raises(DiffError, match="not finished"):
        parse_blocks("------- SEARCH\na\n=======\nb\n")
    with pytest.raises(DiffError, match="no ======= line"):
        parse_blocks("------- SEARCH\na\n+++++++ REPLACE")


def test_empty_search_only_on_empty_file() -> None:
    assert apply_blocks("", parse_blocks(block("", "new"))) == "new\n"
    with pytest.raises(DiffError, match="is empty"):
        apply_blocks("a\n", parse_blocks(block("", "b")))


def test_all_or_nothing(jail: PathJail) -> None:
    before = (jail.root / "app.py").read_text()
    diff = block("    return a + b", "    return a - b") + "\n" + block("nope", "x")
    with pytest.raises(ToolError, match="block 2"):
        file_tools.replace_in_file(jail, "app.py", diff)
    assert (jail.root / "app.py").read_text() == before


# ----- read_file
def test_read_whole_and_ranges(jail: PathJail) -> None:
    assert file_tools.read_file(jail, "app.py", **BIG).startswith("def add")
    out = file_tools.read_file(jail, "app.py", 5, 6, **BIG)
    assert out == "[app.py: lines 5-6 of 7]\nclass Box:\n    def get(self):\n"
    with pytest.raises(ToolError, match="has only 7 lines"):
        file_tools.read_file(jail, "app.py", 50, None, **BIG)
    with pytest.raises(ToolError, match="before start_line"):
        file_tools.read_file(jail, "app.py", 4, 2, **BIG)


def test_read_size_cap_and_char_cap(jail: PathJail) -> None:
    (jail.root / "big.txt").write_text("".join(f"line {i}\n" for i in range(2000)))
    with pytest.raises(ToolError, match="read a part of it with start_line"):
        file_tools.read_file(jail, "big.txt", max_bytes=1000, max_chars=100_000)
    out = file_tools.read_file(jail, "big.txt", max_bytes=100_000, max_chars=100)
    assert "read on with start_line=" in out.splitlines()[0]
    assert file_tools.read_file(jail, "big.txt", 10, 11, max_bytes=1000, max_chars=1000).endswith("line 9\nline 10\n")


def test_read_binary_encodings_missing_and_dirs(jail: PathJail) -> None:
    (jail.root / "blob.bin").write_bytes(b"\x89PNG\x00\x00\x01")
    with pytest.raises(ToolError, match="binary file"):
        file_tools.read_file(jail, "blob.bin", **BIG)
    (jail.root / "latin.txt").write_bytes("café\n".encode("latin-1"))
    assert file_tools.read_file(jail, "latin.txt", **BIG) == "[latin.txt: encoding latin-1]\ncafé\n"
    (jail.root / "u16.txt").write_bytes("hé\n".encode("utf-16"))
    assert file_tools.read_file(jail, "u16.txt", **BIG).endswith("hé\n")
    with pytest.raises(ToolError, match="Did you mean: app.py"):
        file_tools.read_file(jail, "ap.py", **BIG)
    with pytest.raises(ToolError, match="is a directory"):
        file_tools.read_file(jail, ".", **BIG)


# ----- write_to_file
def test_write_creates_dirs_strips_fence_keeps_mode(jail: PathJail) -> None:
    assert file_tools.write_to_file(jail, "pkg/mod.py", "```python\nx = 1\n```\n").endswith("(removed the ``` fence around it).")
    assert (jail.root / "pkg/mod.py").read_text() == "x = 1\n"
    script = jail.root / "run.sh"
    script.write_text("old")
    script.chmod(0o755)
    assert file_tools.write_to_file(jail, "run.sh", "#!/bin/sh\necho hi\n").startswith("Overwrote run.sh")
    assert os.stat(script).st_mode & 0o777 == 0o755
    assert not [p for p in jail.root.rglob(".ws-tmp-*")]


def test_replace_keeps_latin1_and_bom(jail: PathJail) -> None:
    (jail.root / "l.txt").write_bytes("café = 1\n".encode("latin-1"))
    file_tools.replace_in_file(jail, "l.txt", block("café = 1", "café = 2"))
    assert (jail.root / "l.txt").read_bytes() == "café = 2\n".encode("latin-1")
    (jail.root / "b.txt").write_bytes("\ufeffa\n".encode("utf-8"))
    file_tools.replace_in_file(jail, "b.txt", block("a", "b"))
    assert (jail.root / "b.txt").read_bytes() == "\ufeffb\n".encode("utf-8")
    with pytest.raises(ToolError, match="create it with write_to_file"):
        file_tools.replace_in_file(jail, "nope.py", block("a", "b"))


# ----- list / search / definitions
@pytest.fixture
def tree(jail: PathJail) -> PathJail:
    r = jail.root
    (r / ".gitignore").write_text("*.log\nbuild/\n")
    (r / "debug.log").write_text("x")
    (r / "build").mkdir()
    (r / "build/out.py").write_text("def built(): pass\n")
    (r / "src/deep").mkdir(parents=True)
    (r / "src/.gitignore").write_text("secret_*.py\n")
    (r / "src/main.py").write_text("import os\n\ndef main():\n    print('hello')\n")
    (r / "src/secret_x.py").write_text("def hidden(): pass\n")
    (r / "src/deep/util.js").write_text("export function helper(a) {}\nclass Thing {}\n")
    (r / "node_modules").mkdir()
    (r / "node_modules/lib.js").write_text("function hello() {}\n")
    return jail


def test_list_files_respects_gitignore(tree: PathJail) -> None:
    flat = search_tools.list_files(tree, ".", False, max_entries=100).splitlines()
    assert "src/" in flat and "app.py" in flat and "debug.log" not in flat and "build/" not in flat
    assert "node_modules/" not in flat
    deep = search_tools.list_files(tree, ".", True, max_entries=100).splitlines()
    assert "src/deep/util.js" in deep and "src/secret_x.py" not in deep
    sub = search_tools.list_files(tree, "src", True, max_entries=100).splitlines()
    assert sub == [".gitignore", "deep/", "deep/util.js", "main.py"]
    capped = search_tools.list_files(tree, ".", True, max_entries=2)
    assert "more not shown" in capped


def test_search_files_regex_pattern_and_cap(tree: PathJail) -> None:
    out = search_tools.search_files(tree, ".", r"def \w+", max_results=50)
    assert "src/main.py:3: def main():" in out and "app.py:1: def add(a, b):" in out
    assert "hidden" not in out and "built" not in out
    js = search_tools.search_files(tree, ".", "helper|hello", "*.js", max_results=50)
    assert js == "src/deep/util.js:1: export function helper(a) {}"
    assert "No matches" in search_tools.search_files(tree, "src", "zzz", max_results=5)
    assert "more matches not shown" in search_tools.search_files(tree, ".", ".", max_results=1)
    with pytest.raises(ToolError, match="invalid"):
        search_tools.search_files(tree, ".", "(", max_results=5)


def test_code_definitions(tree: PathJail) -> None:
    out = search_tools.list_code_definition_names(tree, "app.py", max_chars=10_000)
    assert "1: def add(a, b)" in out and "5: class Box" in out and "6:   def get(self)" in out
    js = search_tools.list_code_definition_names(tree, "src/deep", max_chars=10_000)
    assert "export function helper" in js and "class Thing" in js
    (tree.root / "bad.py").write_text("def (:\n")
    assert "cannot parse" in search_tools.list_code_definition_names(tree, "bad.py", max_chars=10_000)
