"""The worktree's tree through a throw-away copy of its index: what the copy keeps, where it
starts without an index, what it leaves out, and what it leaves alone."""

from __future__ import annotations

import os
from pathlib import Path

from tests.agent.conftest import git
from tests.helpers.racy_git import racily_clean_edit
from workstation.agent.checkpoints import git as agent_git
from workstation.agent.worktree_snapshot import GitRun, scratch_index, worktree_tree


def runner(repo: Path) -> GitRun:
    return lambda args, env: agent_git(repo, *args, env=dict(env))


async def test_the_copy_keeps_the_index_mtime(git_repo: Path) -> None:
    real = git_repo / ".git" / "index"
    os.utime(real, ns=(10**18, 10**18))
    async with scratch_index(copy_of=str(real)) as env:
        copy = Path(env["GIT_INDEX_FILE"])
        assert copy.read_bytes() == real.read_bytes() and copy.stat().st_mtime_ns == 10**18
    assert not copy.parent.exists()


async def test_a_racily_clean_edit_is_seen(git_repo: Path) -> None:
    racily_clean_edit(git_repo, "racy.txt")
    tree = await worktree_tree(runner(git_repo))
    assert git(git_repo, "cat-file", "-p", f"{tree}:racy.txt") == "bbbb"


async def test_without_an_index_it_starts_from_head_and_without_head_from_nothing(
        git_repo: Path, tmp_path: Path) -> None:
    (git_repo / ".gitignore").write_text("*.log\n")
    (git_repo / "build.log").write_text("tracked although ignored\n")
    git(git_repo, "add", ".gitignore")
    git(git_repo, "add", "-f", "build.log")
    git(git_repo, "commit", "-qm", "a tracked file an ignore rule matches")
    (git_repo / ".git" / "index").unlink()
    assert await worktree_tree(runner(git_repo)) == git(git_repo, "rev-parse", "HEAD^{tree}")
    (git_repo / "new.txt").write_text("new\n")
    tree = await worktree_tree(runner(git_repo))
    assert git(git_repo, "ls-tree", "--name-only", tree).splitlines() == [
        ".gitignore", "README.md", "app.py", "build.log", "new.txt"]
    assert not (git_repo / ".git" / "index").exists()
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    git(fresh, "init", "-q")
    (fresh / "a.txt").write_text("a\n")
    tree = await worktree_tree(runner(fresh))
    assert git(fresh, "ls-tree", "--name-only", tree) == "a.txt"


async def test_exclude_leaves_paths_out(git_repo: Path, tmp_path: Path) -> None:
    (tmp_path / "venv").mkdir()
    (git_repo / ".gitignore").write_text(".venv/\n")  # a folder rule: it does not match a link
    (git_repo / ".venv").symlink_to(tmp_path / "venv", target_is_directory=True)
    (git_repo / "env").mkdir()
    (git_repo / "env" / "local.cfg").write_text("x\n")
    listed = git(git_repo, "ls-tree", "--name-only", await worktree_tree(runner(git_repo))).splitlines()
    assert {".venv", "env"} <= set(listed)
    tree = await worktree_tree(runner(git_repo), exclude=(".venv", "env"))
    assert git(git_repo, "ls-tree", "--name-only", tree).splitlines() == [".gitignore", "README.md", "app.py"]


async def test_the_worktrees_own_index_and_files_stay_as_they_are(git_repo: Path) -> None:
    (git_repo / "staged.txt").write_text("staged\n")
    git(git_repo, "add", "staged.txt")
    (git_repo / "app.py").write_text("changed, not staged\n")
    (git_repo / "new.txt").write_text("untracked\n")
    index = git_repo / ".git" / "index"
    status = ("--no-optional-locks", "status", "--porcelain")  # a plain status rewrites the index
    before = (index.read_bytes(), index.stat().st_mtime_ns, git(git_repo, *status))
    files = {p: p.read_bytes() for p in git_repo.iterdir() if p.is_file()}
    tree = await worktree_tree(runner(git_repo))
    assert git(git_repo, "cat-file", "-p", f"{tree}:app.py") == "changed, not staged"
    assert git(git_repo, "cat-file", "-p", f"{tree}:new.txt") == "untracked"
    assert (index.read_bytes(), index.stat().st_mtime_ns, git(git_repo, *status)) == before
    assert {p: p.read_bytes() for p in git_repo.iterdir() if p.is_file()} == files
