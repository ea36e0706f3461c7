"""Repository attach: validation with clear messages, git init, clone with progress, worktrees."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.fleet.conftest import git
from workstation.core.errors import UserError
from workstation.fleet.gitproc import GitRunner
from workstation.fleet.repos import (
    NotARepository,
    clone_repository,
    init_repository,
    inspect_repository,
    resolve_base,
    slug_from_task,
    validate_session_name,
)
from workstation.fleet.worktrees import (
    create_worktree,
    disk_usage_bytes,
    find_orphans,
    list_worktrees,
    remove_orphan,
    remove_worktree,
)


async def test_bad_paths_have_clear_messages(runner: GitRunner, tmp_path: Path) -> None:
    with pytest.raises(UserError, match="does not exist"):
        await inspect_repository(runner, tmp_path / "nope")
    f = tmp_path / "file.txt"
    f.write_text("x")
    with pytest.raises(UserError, match="is a file, not a folder"):
        await inspect_repository(runner, f)
    plain = tmp_path / "plain"
    plain.mkdir()
    with pytest.raises(NotARepository) as info:
        await inspect_repository(runner, plain)
    assert "git init" in info.value.describe()
    empty = tmp_path / "empty"
    empty.mkdir()
    git(empty, "init", "-q", "-b", "main")
    with pytest.raises(UserError, match="has no commits yet"):
        await inspect_repository(runner, empty)


async def test_inspect_and_base(runner: GitRunner, git_repo: Path) -> None:
    git(git_repo, "branch", "dev")
    info = await inspect_repository(runner, git_repo / ".")
    assert info.path == git_repo.resolve() and info.head_branch == "main"
    assert set(info.branches) == {"main", "dev"}
    assert (await resolve_base(runner, info, None))[0] == "main"
    name, sha = await resolve_base(runner, info, "dev")
    assert name == "dev" and len(sha) == 40
    with pytest.raises(UserError, match="base branch 'nope' does not exist") as exc:
        await resolve_base(runner, info, "nope")
    assert "dev" in exc.value.describe()


async def test_git_init_plain_folder(runner: GitRunner, tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "a.py").write_text("print(1)\n")
    (plain / ".gitignore").write_text("*.log\n")
    (plain / "x.log").write_text("noise")
    info = await init_repository(runner, plain)
    assert info.head_branch == "main"
    assert git(plain, "ls-files").split() == [".gitignore", "a.py"]
    with pytest.raises(UserError, match="already has a .git"):
        await init_repository(runner, plain)


async def test_clone_local_with_progress_and_failures(runner: GitRunner, git_repo: Path,
                                                      tmp_path: Path) -> None:
    seen: list[tuple[str, float | None]] = []
    dest = tmp_path / "clones" / "c1"
    info = await clone_repository(runner, str(git_repo), dest, on_progress=lambda m, f: seen.append((m, f)))
    assert info.path == dest.resolve() and (dest / "app.py").exists()
    with pytest.raises(UserError, match="already exists and is not empty"):
        await clone_repository(runner, str(git_repo), dest)
    bad = tmp_path / "clones" / "bad"
    with pytest.raises(UserError, match="could not clone file:///definitely/not/here"):
        await clone_repository(runner, "file:///definitely/not/here", bad)
    assert not bad.exists()  # nothing half-created
    with pytest.raises(UserError, match="no such folder"):
        await clone_repository(runner, str(tmp_path / "missing"), tmp_path / "clones" / "m")
    assert not (tmp_path / "clones" / "m").exists()
    empty_src = tmp_path / "emptysrc"
    empty_src.mkdir()
    git(empty_src, "init", "-q")
    with pytest.raises(UserError, match="no commits"):
        await clone_repository(runner, str(empty_src), tmp_path / "clones" / "e")
    assert not (tmp_path / "clones" / "e").exists()


async def test_clone_reports_progress_fraction(runner: GitRunner, tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    git(src, "init", "-q", "-b", "main")
    for i in range(300):
        (src / f"f{i}.txt").write_text(f"{i}\n" * 50)
    git(src, "add", "-A")
    git(src, "commit", "-qm", "many")
    seen: list[float] = []
    await clone_repository(runner, f"file://{src}", tmp_path / "dst",
                           on_progress=lambda m, f: seen.append(f) if f is not None else None)
    assert seen and max(seen) > 0.5 and all(0.0 <= f <= 1.0 for f in seen)


def test_names() -> None:
    assert slug_from_task("Fix the flaky test in io.py!") == "fix-the-flaky-test-in-io-py"
    assert slug_from_task("!!!") == "session"
    assert validate_session_name("fix-1") == "fix-1"
    for bad in ("", "-x", "a b", "a..b", "x.lock", "ü", "a/b"):
        with pytest.raises(UserError):
            validate_session_name(bad)


async def test_worktrees_isolated_branch_taken_and_cleanup(runner: GitRunner, git_repo: Path,
                                                           tmp_path: Path) -> None:
    info = await inspect_repository(runner, git_repo)
    root = tmp_path / "worktrees" / "repo-x"
    made = await asyncio.gather(*[
        create_worktree(runner, info, name=f"s{i}", base_branch="main", dest=root / f"s{i}")
        for i in range(4)
    ])
    assert [b for _, b in made] == [f"ws/s{i}" for i in range(4)]
    (root / "s0" / "app.py").write_text("changed\n")
    assert (root / "s1" / "app.py").read_text() == "def add(a, b):\n    return a + b\n"
    assert disk_usage_bytes(root / "s0") > 0
    with pytest.raises(UserError, match="branch ws/s1 already exists"):
        await create_worktree(runner, info, name="s1", base_branch="main", dest=root / "other")
    assert not (root / "other").exists()
    # a failure inside git leaves nothing: a base that is not there
    with pytest.raises(UserError, match="could not create the worktree"):
        await create_worktree(runner, info, name="s9", base_branch="nope", dest=root / "s9")
    assert not (root / "s9").exists()
    assert "ws/s9" not in git(git_repo, "branch", "--list")
    # orphans: s2 and s3 are not owned by any session
    orphans = await find_orphans(runner, [git_repo], [root / "s0", root / "s1"],
                                 fleet_root=tmp_path / "worktrees")
    assert sorted(Path(o.worktree_path).name for o in orphans) == ["s2", "s3"]
    for o in orphans:
        await remove_orphan(runner, o)
    await remove_worktree(runner, git_repo, root / "s1", branch="ws/s1")
    names = [w.branch for w in await list_worktrees(runner, git_repo)]
    assert names == ["main", "ws/s0"]
    assert not (root / "s1").exists() and not (root / "s2").exists()
    assert git(git_repo, "branch", "--format=%(refname:short)").split() == ["main", "ws/s0"]


async def test_orphan_folder_without_git_entry(runner: GitRunner, git_repo: Path, tmp_path: Path) -> None:
    stray = tmp_path / "worktrees" / "repo-1234" / "lost"
    stray.mkdir(parents=True)
    (stray / "f").write_text("x")
    orphans = await find_orphans(runner, [git_repo], [], fleet_root=tmp_path / "worktrees")
    assert [Path(o.worktree_path).name for o in orphans] == ["lost"]
    await remove_orphan(runner, orphans[0])
    assert not stray.exists()
