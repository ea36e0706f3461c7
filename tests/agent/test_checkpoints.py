"""Checkpoints through a temporary index onto a private ref; restore of files."""

from __future__ import annotations

from pathlib import Path

from tests.agent.conftest import git
from workstation.agent.checkpoints import CheckpointStore, ref_for


async def test_checkpoint_moves_no_branch_and_leaves_the_index_alone(git_repo: Path) -> None:
    git(git_repo, "branch", "ws/one")
    head = git(git_repo, "rev-parse", "HEAD")
    (git_repo / "staged.txt").write_text("staged\n")
    git(git_repo, "add", "staged.txt")
    store = CheckpointStore(git_repo, "sess/1 odd name")
    base = await store.create("session start", 2)
    assert base is not None
    (git_repo / "app.py").write_text("def add(a, b):\n    return a - b\n")
    (git_repo / "new.py").write_text("x = 1\n")
    cp = await store.create("edit", 5)
    assert cp is not None and cp.message_index == 5
    assert await store.create("nothing changed", 6) is None
    assert git(git_repo, "rev-parse", "HEAD") == head
    assert git(git_repo, "rev-parse", "main") == head and git(git_repo, "rev-parse", "ws/one") == head
    assert "A  staged.txt" in git(git_repo, "status", "--porcelain")
    assert git(git_repo, "diff", "--cached", "--name-only") == "staged.txt"
    assert store.ref == ref_for("sess/1 odd name") == "refs/workstation/sess-1-odd-name/checkpoints"
    assert git(git_repo, "rev-parse", store.ref) == cp.commit
    files = git(git_repo, "ls-tree", "-r", "--name-only", cp.commit).splitlines()
    assert {"app.py", "new.py", "staged.txt", "README.md"} <= set(files)
    assert git(git_repo, "show", f"{cp.commit}:app.py").endswith("a - b")
    listed = await store.list()
    assert [c.label for c in listed] == ["session start", "edit"]
    assert [c.message_index for c in listed] == [2, 5]


async def test_ignored_files_are_not_checkpointed(git_repo: Path) -> None:
    (git_repo / ".gitignore").write_text("*.log\n")
    (git_repo / "noise.log").write_text("x")
    store = CheckpointStore(git_repo, "s")
    cp = await store.create("start", 1)
    assert cp is not None
    assert "noise.log" not in git(git_repo, "ls-tree", "-r", "--name-only", cp.commit)


async def test_the_environment_the_fleet_put_there_is_not_checkpointed(git_repo: Path, tmp_path: Path) -> None:
    (tmp_path / "cache").mkdir()
    (git_repo / ".gitignore").write_text(".venv\nbuild/\n")
    (git_repo / "build").mkdir()
    for link in (".venv", "node_modules", "build/cache"):  # ignored, picked up, inside an ignored folder
        (git_repo / link).symlink_to(tmp_path / "cache", target_is_directory=True)
    (git_repo / ".env").write_text("KEY=1\n")  # a bootstrap copy
    environment = (".venv", "node_modules", "build/cache", ".env")
    store = CheckpointStore(git_repo, "s", exclude=environment)
    start = await store.create("session start", 1)
    (git_repo / "new.py").write_text("x = 1\n")
    (git_repo / ".env").write_text("KEY=2\n")
    cp = await store.create("edit", 3)
    assert start is not None and cp is not None
    for commit in (start.commit, cp.commit):
        files = git(git_repo, "ls-tree", "-r", "--name-only", commit).splitlines()
        assert not set(files) & {*environment, "node_modules"}, files
    assert "new.py" in git(git_repo, "ls-tree", "-r", "--name-only", cp.commit)
    await store.restore_files(start.commit, 4)  # the environment stays as it is
    assert not (git_repo / "new.py").exists() and (git_repo / ".env").read_text() == "KEY=2\n"
    assert all((git_repo / link).is_symlink() for link in (".venv", "node_modules", "build/cache"))


async def test_restore_files_brings_back_changed_deleted_and_removes_created(git_repo: Path) -> None:
    store = CheckpointStore(git_repo, "s")
    start = await store.create("session start", 2)
    assert start is not None
    (git_repo / "app.py").write_text("broken\n")
    (git_repo / "README.md").unlink()
    (git_repo / "pkg").mkdir()
    (git_repo / "pkg/extra.py").write_text("x\n")
    (git_repo / "ignored.log").write_text("keep me")
    (git_repo / ".git/info/exclude").write_text("*.log\n")
    after = await store.create("damage", 7)
    assert after is not None
    before = await store.restore_files(start.commit, 9)
    assert before is not None and before.label == "before restore"
    assert (git_repo / "app.py").read_text() == "def add(a, b):\n    return a + b\n"
    assert (git_repo / "README.md").exists()
    assert not (git_repo / "pkg").exists()
    assert (git_repo / "ignored.log").read_text() == "keep me"
    # the restore itself can be undone
    await store.restore_files(before.commit, 10)
    assert (git_repo / "app.py").read_text() == "broken\n" and (git_repo / "pkg/extra.py").exists()


async def test_not_a_repository(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path, "s")
    assert not await store.available()
    assert await store.create("x", 1) is None
    assert await store.list() == []


async def test_repository_without_commits(tmp_path: Path) -> None:
    git(tmp_path, "init", "-q")
    (tmp_path / "a.txt").write_text("a")
    store = CheckpointStore(tmp_path, "s")
    cp = await store.create("start", 2)
    assert cp is not None and [c.commit for c in await store.list()] == [cp.commit]
