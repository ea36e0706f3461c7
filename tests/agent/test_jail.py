"""Adversarial paths against the jail, directly and through the file tools."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from workstation.agent import file_tools, search_tools
from workstation.agent.jail import JailError, PathJail
from workstation.agent.tool_specs import ToolError


@pytest.fixture
def world(tmp_path: Path) -> tuple[PathJail, Path, Path]:
    root = tmp_path / "root"
    outside = tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (outside / "secret.txt").write_text("top secret\n")
    (root / "inside.txt").write_text("fine\n")
    (root / "sub").mkdir()
    return PathJail(root), root, outside


def test_plain_and_harmless_dotdot_paths_resolve_inside(world) -> None:
    jail, root, _ = world
    assert jail.resolve("inside.txt") == root / "inside.txt"
    assert jail.resolve("sub/../inside.txt") == root / "inside.txt"
    assert jail.resolve("./sub") == root / "sub"
    assert jail.resolve(str(root / "inside.txt")) == root / "inside.txt"
    assert jail.resolve("new/dir/file.py") == root / "new/dir/file.py"


@pytest.mark.parametrize("path", ["../outside/secret.txt", "sub/../../outside/secret.txt", "..", "../../etc/passwd"])
def test_dotdot_escapes_are_refused(world, path: str) -> None:
    jail, _, _ = world
    with pytest.raises(JailError, match="leaves the project root"):
        jail.resolve(path)


def test_absolute_paths_outside_are_refused(world) -> None:
    jail, _, outside = world
    for path in (str(outside / "secret.txt"), "/etc/passwd", "/"):
        with pytest.raises(JailError, match="outside the project root"):
            jail.resolve(path)


def test_symlink_out_is_refused_also_as_a_directory_component(world) -> None:
    jail, root, outside = world
    os.symlink(outside / "secret.txt", root / "link.txt")
    os.symlink(outside, root / "linkdir")
    for path in ("link.txt", "linkdir/secret.txt", "linkdir"):
        with pytest.raises(JailError, match="symbolic link"):
            jail.resolve(path)
    with pytest.raises(ToolError, match="symbolic link"):
        file_tools.read_file(jail, "link.txt", max_bytes=1000, max_chars=1000)
    with pytest.raises(ToolError, match="symbolic link"):
        file_tools.write_to_file(jail, "linkdir/new.txt", "x")
    assert not (outside / "new.txt").exists()
    assert (outside / "secret.txt").read_text() == "top secret\n"


def test_symlink_inside_is_followed(world) -> None:
    jail, root, _ = world
    os.symlink(root / "inside.txt", root / "alias.txt")
    assert jail.resolve("alias.txt") == root / "inside.txt"


def test_symlink_loop_and_dangling_link_are_refused(world) -> None:
    jail, root, _ = world
    os.symlink(root / "loop_b", root / "loop_a")
    os.symlink(root / "loop_a", root / "loop_b")
    os.symlink(root / "missing", root / "dangling")
    for path in ("loop_a", "dangling"):
        with pytest.raises(JailError, match="broken symbolic link or a symbolic-link loop"):
            jail.resolve(path)
    with pytest.raises(ToolError):
        file_tools.read_file(jail, "loop_a/x", max_bytes=1000, max_chars=1000)


def test_unicode_names_work_and_tilde_nul_empty_are_refused(world) -> None:
    jail, root, _ = world
    name = "données/π_файл 🙂.txt"
    assert "Created" in file_tools.write_to_file(jail, name, "ok\n")
    assert (root / name).read_text() == "ok\n"
    assert file_tools.read_file(jail, name, max_bytes=1000, max_chars=1000) == "ok\n"
    with pytest.raises(JailError, match="'~' is not expanded"):
        jail.resolve("~/.ssh/id_rsa")
    with pytest.raises(JailError, match="NUL"):
        jail.resolve("a\x00b")
    with pytest.raises(JailError, match="empty"):
        jail.resolve("  ")


def test_unicode_lookalike_dots_do_not_escape(world) -> None:
    jail, root, _ = world
    # U+2024 ONE DOT LEADER twice is a plain file name, not a parent reference
    resolved = jail.resolve("\u2024\u2024/x")
    assert str(resolved).startswith(str(root))


def test_writes_into_dot_git_are_refused(world) -> None:
    jail, root, _ = world
    (root / ".git").mkdir()
    with pytest.raises(ToolError, match="inside .git"):
        file_tools.write_to_file(jail, ".git/hooks/pre-commit", "#!/bin/sh\n")


def test_listing_and_search_skip_links_that_leave(world) -> None:
    jail, root, outside = world
    os.symlink(outside, root / "escape")
    os.symlink(outside / "secret.txt", root / "escape.txt")
    listing = search_tools.list_files(jail, ".", True, max_entries=100)
    assert "escape" not in listing
    result = search_tools.search_files(jail, ".", "secret", max_results=10)
    assert "top secret" not in result
    with pytest.raises(ToolError, match="symbolic link"):
        search_tools.search_files(jail, "escape", "secret", max_results=10)


def test_root_must_exist(tmp_path: Path) -> None:
    with pytest.raises(JailError):
        PathJail(tmp_path / "nope")
