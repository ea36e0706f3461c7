"""Review and integrate: diff, commit, merge, rebase, conflicts, dirty base, discard."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.fleet.conftest import git
from tests.helpers.racy_git import racily_clean_edit
from workstation.core.errors import UserError
from workstation.fleet.gitproc import GitRunner
from workstation.fleet.repos import inspect_repository
from workstation.fleet.review import (
    MergeConflict,
    Workspace,
    commit_session,
    diff_against_base,
    discard_changes,
    integrate,
)
from workstation.fleet.worktrees import create_worktree


async def _ws(runner: GitRunner, repo: Path, tmp_path: Path, name: str) -> Workspace:
    info = await inspect_repository(runner, repo)
    path, branch = await create_worktree(runner, info, name=name, base_branch="main",
                                         dest=tmp_path / "wt" / name)
    return Workspace(repo, path, branch, "main", git(repo, "rev-parse", "main"))


async def test_diff_sees_everything_without_touching_index(runner: GitRunner, git_repo: Path,
                                                           tmp_path: Path) -> None:
    ws = await _ws(runner, git_repo, tmp_path, "d")
    (ws.worktree_path / "app.py").write_text("def add(a, b):\n    return a - b\n")
    (ws.worktree_path / "new.py").write_text("x = 1\ny = 2\n")
    (ws.worktree_path / "README.md").unlink()
    d = await diff_against_base(runner, ws)
    got = {f.path: (f.status, f.added, f.removed) for f in d.files}
    assert got == {"app.py": ("M", 1, 1), "new.py": ("A", 2, 0), "README.md": ("D", 0, 1)}
    assert "+x = 1" in d.patch and d.added == 3 and d.removed == 2
    assert git(ws.worktree_path, "status", "--porcelain").count("??") == 1  # index untouched


async def test_diff_sees_an_edit_in_the_second_the_index_was_written(runner: GitRunner, git_repo: Path,
                                                                    tmp_path: Path) -> None:
    """The throw-away index keeps the real one's mtime: git's racily-clean check rehashes a
    file rewritten at the same size in the second the index was written (an agent's
    ``git add``, then an edit) only where the index is not newer than the file. (The patch's
    text would be right anyway, git reads a stat-clean file from disk; its blob ids not.)"""
    ws = await _ws(runner, git_repo, tmp_path, "r")
    racily_clean_edit(ws.worktree_path, "racy.txt")  # staged "aaaa", then "bbbb"
    d = await diff_against_base(runner, ws)
    on_disk = git(ws.worktree_path, "hash-object", "racy.txt")
    blob = re.search(r"^index 0+\.\.([0-9a-f]+)$", d.patch, re.M)
    assert "+bbbb" in d.patch and blob is not None and on_disk.startswith(blob.group(1))


async def test_review_asks_git_once_which_shared_links_it_would_pick_up(runner: GitRunner, git_repo: Path,
                                                                         tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    (git_repo / ".gitignore").write_text("ign*\n")
    git(git_repo, "add", ".gitignore")
    git(git_repo, "commit", "-qm", "ignore some caches")
    ws = await _ws(runner, git_repo, tmp_path, "links")
    links = tuple(f"ign{i}" if i % 2 else f"cache{i}" for i in range(20))
    for link in links:
        (ws.worktree_path / link).symlink_to(tmp_path)
    ws = Workspace(ws.repo_path, ws.worktree_path, ws.branch, ws.base_branch, ws.start_commit, links)
    (ws.worktree_path / "app.py").write_text("def add(a, b):\n    return a - b\n")
    asked: list[tuple[str, ...]] = []
    run = runner.run

    async def counting(args, **kw):  # type: ignore[no-untyped-def]
        if args[0] == "check-ignore":
            asked.append(tuple(args))
        return await run(args, **kw)

    monkeypatch.setattr(runner, "run", counting)
    d = await diff_against_base(runner, ws)
    assert [f.path for f in d.files] == ["app.py"]  # neither the ignored links nor the others
    assert len(asked) == 1
    await commit_session(runner, ws, "Subtract")
    assert git(ws.worktree_path, "show", "--name-only", "--format=", "HEAD").splitlines() == ["app.py"]
    assert len(asked) == 2  # one for the commit's pathspec


async def test_commit_then_merge(runner: GitRunner, git_repo: Path, tmp_path: Path) -> None:
    ws = await _ws(runner, git_repo, tmp_path, "m")
    with pytest.raises(UserError, match="nothing to commit"):
        await commit_session(runner, ws, "empty")
    with pytest.raises(UserError, match="nothing to integrate"):
        await integrate(runner, ws)
    (ws.worktree_path / "feature.py").write_text("FEATURE = True\n")
    with pytest.raises(UserError, match="uncommitted changes"):
        await integrate(runner, ws)
    res = await commit_session(runner, ws, "Add feature")
    assert git(ws.worktree_path, "log", "-1", "--format=%s") == "Add feature"
    assert git(git_repo, "rev-parse", "ws/m") == res.commit
    # main moved on meanwhile (no conflict): a real merge
    (git_repo / "other.txt").write_text("o\n")
    git(git_repo, "add", "other.txt")
    git(git_repo, "commit", "-qm", "other")
    out = await integrate(runner, ws)
    assert out.action == "merge"
    assert (git_repo / "feature.py").read_text() == "FEATURE = True\n"  # checkout fast-forwarded
    assert git(git_repo, "log", "-1", "--format=%P").count(" ") == 1  # two parents
    assert git(git_repo, "status", "--porcelain") == ""


async def test_conflict_is_reported_and_nothing_changes(runner: GitRunner, git_repo: Path,
                                                        tmp_path: Path) -> None:
    ws = await _ws(runner, git_repo, tmp_path, "c")
    (ws.worktree_path / "app.py").write_text("session version\n")
    await commit_session(runner, ws, "session edit")
    (git_repo / "app.py").write_text("user version\n")
    git(git_repo, "commit", "-qam", "user edit")
    before = git(git_repo, "rev-parse", "main")
    with pytest.raises(MergeConflict) as exc:
        await integrate(runner, ws)
    assert exc.value.paths == ("app.py",)
    with pytest.raises(MergeConflict, match="rebasing ws/c onto main would conflict"):
        await integrate(runner, ws, rebase=True)
    assert git(git_repo, "rev-parse", "main") == before
    assert (git_repo / "app.py").read_text() == "user version\n"
    assert git(ws.worktree_path, "status", "--porcelain") == ""  # rebase aborted cleanly


async def test_dirty_base_refused_then_rebase(runner: GitRunner, git_repo: Path, tmp_path: Path) -> None:
    ws = await _ws(runner, git_repo, tmp_path, "r")
    (ws.worktree_path / "n.txt").write_text("n\n")
    await commit_session(runner, ws, "n")
    (git_repo / "README.md").write_text("user is editing\n")
    with pytest.raises(UserError, match="base branch main has uncommitted changes") as exc:
        await integrate(runner, ws)
    assert "nothing was merged" in exc.value.describe()
    git(git_repo, "checkout", "--", "README.md")
    (git_repo / "u.txt").write_text("u\n")
    git(git_repo, "add", "u.txt")
    git(git_repo, "commit", "-qm", "u")
    out = await integrate(runner, ws, rebase=True)
    assert out.action == "rebase"
    assert git(git_repo, "log", "--format=%s", "-3").splitlines() == ["n", "u", "initial"]
    assert (git_repo / "n.txt").exists()


async def test_integrate_into_branch_not_checked_out(runner: GitRunner, git_repo: Path,
                                                     tmp_path: Path) -> None:
    git(git_repo, "checkout", "-qb", "elsewhere")
    ws = await _ws(runner, git_repo, tmp_path, "u")
    (ws.worktree_path / "z.txt").write_text("z\n")
    await commit_session(runner, ws, "z")
    out = await integrate(runner, ws)
    assert git(git_repo, "show", "main:z.txt") == "z"
    assert out.commit == git(git_repo, "rev-parse", "main")
    assert not (git_repo / "z.txt").exists()  # the user's checkout (another branch) untouched


async def test_discard(runner: GitRunner, git_repo: Path, tmp_path: Path) -> None:
    ws = await _ws(runner, git_repo, tmp_path, "x")
    (ws.worktree_path / "keep.txt").write_text("k\n")
    await commit_session(runner, ws, "keep")
    (ws.worktree_path / "app.py").write_text("junk\n")
    (ws.worktree_path / "junk.txt").write_text("junk\n")
    await discard_changes(runner, ws, keep_commits=True)
    assert (ws.worktree_path / "keep.txt").exists() and not (ws.worktree_path / "junk.txt").exists()
    assert "return a + b" in (ws.worktree_path / "app.py").read_text()
    await discard_changes(runner, ws)
    assert not (ws.worktree_path / "keep.txt").exists()
    assert git(ws.worktree_path, "rev-parse", "HEAD") == ws.start_commit
