"""Scratch repositories (``sample_repos.scratch_repository``): what the agent check, the
benchmarks and the tests work in, made the same way whatever the user's git configuration."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from workstation.fleet.sample_repos import SampleRepositoryError, scratch_repository


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


def test_a_scratch_repository_is_one_commit_on_main_whatever_the_users_git_says(tmp_path, monkeypatch):
    # a user whose commits are signed and whose hooks refuse every commit, and a stray GIT_DIR
    home = tmp_path / "home"
    hooks = home / "hooks"
    hooks.mkdir(parents=True)
    (hooks / "pre-commit").write_text("#!/bin/sh\nexit 1\n")
    (hooks / "pre-commit").chmod(0o755)
    (home / ".gitconfig").write_text(f"[commit]\n\tgpgsign = true\n[core]\n\thooksPath = {hooks}\n"
                                     "[init]\n\tdefaultBranch = trunk\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("GIT_DIR", str(tmp_path / "elsewhere"))
    repo = scratch_repository(tmp_path / "r", {"README.md": "# r\n", "notes/keep.txt": "keep\n"}, message="start")
    monkeypatch.delenv("GIT_DIR")
    assert (repo / "notes" / "keep.txt").read_text() == "keep\n"
    assert git(repo, "rev-parse", "--abbrev-ref", "HEAD").strip() == "main"
    assert git(repo, "log", "--format=%s|%an").splitlines() == ["start|workstation demo"]
    assert git(repo, "status", "--porcelain") == "" and not (tmp_path / "elsewhere").exists()
    assert sorted(git(repo, "ls-files").split()) == ["README.md", "notes/keep.txt"]


def test_a_scratch_repository_is_dated_now_and_never_lands_on_what_is_there(tmp_path):
    repo = scratch_repository(tmp_path / "a", {"a.py": "x = 1\n"})
    assert not git(repo, "log", "--format=%cI").startswith("2026-01-01T00:00:00")  # not the samples' date
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "mine.txt").write_text("keep me\n")
    with pytest.raises(SampleRepositoryError, match="not an empty folder"):
        scratch_repository(taken, {"a.py": "x = 1\n"})
    assert (taken / "mine.txt").read_text() == "keep me\n" and not (taken / ".git").exists()
    assert (scratch_repository(tmp_path / "empty", {}) / ".git").is_dir()  # nothing to commit: still one commit
