"""The worktree's tree through a throw-away copy of its index: what the copy keeps, where it
starts without an index, what it leaves out, and what it leaves alone."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence
from pathlib import Path

from tests.agent.conftest import git
from tests.helpers.racy_git import racily_clean_edit
from workstation.agent.checkpoints import git as agent_git
from workstation.agent.worktree_snapshot import GitProbe, GitRun, scratch_index, unignored, worktree_tree


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


def probe(repo: Path, calls: list[Sequence[str]]) -> GitProbe:
    async def run(args: Sequence[str], stdin: bytes) -> tuple[int, str]:
        calls.append(args)
        done = subprocess.run(["git", "-C", str(repo), *args], input=stdin, capture_output=True)
        return done.returncode, done.stdout.decode()

    return run


def picked_one_by_one(repo: Path, paths: Sequence[str]) -> list[str]:
    """What review did before: one ``check-ignore -q`` per path, picked where it does not say 0."""
    return [p for p in paths
            if subprocess.run(["git", "-C", str(repo), "check-ignore", "-q", "--no-index", p]).returncode != 0]


async def test_unignored_answers_as_one_check_per_path_did_in_one_call(git_repo: Path, tmp_path: Path) -> None:
    (git_repo / ".gitignore").write_text("ign*\n!ign-kept\nbuild/\n*.log\nlater\n!later\n")
    (git_repo / "build").mkdir()
    (git_repo / "deps dir").mkdir()
    links = ["ign0", "ign-kept", "build/cache", "deps dir/mods", "kept", "app.py", "tracked.log", "later",
             "./ign1", "missing", *(f"l{i}" for i in range(12))]
    for link in links:
        if link not in ("app.py", "tracked.log", "missing"):
            (git_repo / link).symlink_to(tmp_path)
    (git_repo / "tracked.log").write_text("x\n")
    git(git_repo, "add", "-f", "tracked.log")  # tracked, and an ignore rule matches it
    calls: list[Sequence[str]] = []
    picked = await unignored(probe(git_repo, calls), links)
    assert picked == picked_one_by_one(git_repo, links)
    assert picked == ["ign-kept", "deps dir/mods", "kept", "app.py", "later", "missing", *(f"l{i}" for i in range(12))]
    assert len(calls) == 1
    assert await unignored(probe(git_repo, calls), ["kept", "l1"]) == ["kept", "l1"]  # none ignored: exit 1
    assert await unignored(probe(git_repo, calls), ()) == [] and len(calls) == 2


async def test_unignored_asks_path_by_path_where_git_stops_at_one(git_repo: Path, tmp_path: Path) -> None:
    (git_repo / ".gitignore").write_text("ign*\n")
    for link in ("ign0", "kept", "ign1"):
        (git_repo / link).symlink_to(tmp_path, target_is_directory=True)
    links = ["ign0", "kept/", "kept/inside", "ign1", "other"]  # beyond a symbolic link: git gives up (128)
    calls: list[Sequence[str]] = []
    assert await unignored(probe(git_repo, calls), links) == picked_one_by_one(git_repo, links) == [
        "kept/", "kept/inside", "other"]
    assert len(calls) == 1 + len(links)
