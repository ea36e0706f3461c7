"""The demo manifest and the sample repositories (Qt-free, real git, real pytest runs)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from workstation.core.errors import UserError
from workstation.fleet.demo_manifest import (
    DemoLayout,
    DemoManifestError,
    SessionMode,
    load_manifest,
    parse_manifest,
    plan_sessions,
    prepare_repositories,
)
from workstation.fleet.sample_repos import (
    SampleRepositoryError,
    create_sample_repository,
    existing_fingerprint,
    get_sample,
    list_samples,
)

def git(path: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(path), *args], check=True, capture_output=True,
                          text=True).stdout.strip()


def run_pytest(path: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTEST_DISABLE_PLUGIN_AUTOLOAD="1", PYTHONDONTWRITEBYTECODE="1")
    env.pop("PYTHONPATH", None)
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
                          cwd=path, env=env, capture_output=True, text=True, timeout=120)


def test_default_manifest_yields_32_sessions_on_8_samples() -> None:
    manifest = load_manifest()
    assert manifest.sessions == 32
    assert manifest.layout == DemoLayout(8, 4) and str(manifest.layout) == "8x4"
    assert manifest.engine_profile == "default"
    assert len(manifest.repositories) == 8 and all(r.is_sample for r in manifest.repositories)
    assert {r.sample for r in manifest.repositories} == {s.name for s in list_samples()}
    assert len(manifest.tasks) == 32 and len({t.name for t in manifest.tasks}) == 32
    assert all(t.mode is SessionMode.ACT and t.auto_approve for t in manifest.tasks)
    assert manifest.recording.size_px == (1280, 720) and manifest.recording.fps == 30
    assert manifest.recording.codec == "h264" and manifest.recording.overlay

    sessions = plan_sessions(manifest)
    assert len(sessions) == 32
    assert len({s.name for s in sessions}) == 32
    assert [s.index for s in sessions] == list(range(32))
    first_eight = plan_sessions(manifest, 8)
    assert len({s.repository.name for s in first_eight}) == 8  # one per project
    assert all(s.task.repository == s.repository.name for s in sessions)


def test_more_sessions_than_tasks_repeat_with_numbered_names() -> None:
    sessions = plan_sessions(load_manifest(), 70)
    names = [s.name for s in sessions]
    assert len(set(names)) == 70
    assert names[32] == sessions[0].name + "-2" and names[64] == sessions[0].name + "-3"
    with pytest.raises(DemoManifestError, match="between 1 and"):
        plan_sessions(load_manifest(), 0)


def test_prepare_creates_real_repositories_and_reuses_them(tmp_path) -> None:
    manifest = load_manifest()
    wanted = {s.repository.name for s in plan_sessions(manifest, 3)}
    ready = prepare_repositories(manifest, tmp_path, only=wanted)
    assert set(ready) == wanted and len(ready) == 3
    for name, path in ready.items():
        assert path == tmp_path / name
        assert git(path, "rev-parse", "--abbrev-ref", "HEAD") == "main"
        assert git(path, "rev-list", "--count", "HEAD") == "1"  # the bugs live on branches
        assert git(path, "status", "--porcelain") == ""
        sample = get_sample(manifest.repository(name).sample)
        tracked = set(git(path, "ls-files").splitlines())
        assert set(sample.files) <= tracked
        assert existing_fingerprint(path) == sample.fingerprint
    heads = {name: git(path, "rev-parse", "HEAD") for name, path in ready.items()}
    again = prepare_repositories(manifest, tmp_path, only=wanted)
    assert {name: git(path, "rev-parse", "HEAD") for name, path in again.items()} == heads
    # the same sample gives the same commit anywhere (fixed author and date)
    other = create_sample_repository(manifest.repository(sorted(wanted)[0]).sample, tmp_path / "x" / "y")
    assert git(other, "rev-parse", "HEAD") == heads[sorted(wanted)[0]]


def test_every_task_is_a_bug_whose_test_fails_before_and_passes_after(tmp_path) -> None:
    """Main is green; each task's branch fails its test; the fix (main's line) turns it green."""
    manifest = load_manifest()
    tasks = {t.name: t for t in manifest.tasks}
    for sample in list_samples():
        assert len(sample.bugs) == 4, sample.name
        repo = create_sample_repository(sample.name, tmp_path / sample.name)
        assert run_pytest(repo).returncode == 0, f"{sample.name}: main is not green"
        branches = set(git(repo, "for-each-ref", "--format=%(refname:short)", "refs/heads/bug/").splitlines())
        assert branches == {bug.branch for bug in sample.bugs}
        for bug in sample.bugs:
            task = tasks[bug.name]  # every bug is a task of the default manifest, on its branch
            assert task.base_branch == bug.branch and task.repository == sample.name
            assert bug.file in task.prompt and "run the tests" in task.prompt
            git(repo, "checkout", "-q", bug.branch)
            assert git(repo, "rev-list", "--count", "HEAD") == "2"  # main + the bug
            before = run_pytest(repo)
            assert before.returncode == 1, f"{bug.name}: {before.stdout[-400:]}"
            assert f"FAILED {bug.test}" in before.stdout, f"{bug.name}: {before.stdout[-400:]}"
            file = repo / bug.file
            file.write_text(file.read_text().replace(bug.broken, bug.fixed, 1))
            after = run_pytest(repo)
            assert after.returncode == 0, f"{bug.name}: {after.stdout[-600:]}"
            git(repo, "checkout", "-q", "-f", "main")
    assert {b.name for s in list_samples() for b in s.bugs} == set(tasks)


def test_sample_folder_in_use_is_refused(tmp_path) -> None:
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "notes.txt").write_text("mine")
    with pytest.raises(SampleRepositoryError, match="not empty"):
        create_sample_repository("textkit", taken)
    assert (taken / "notes.txt").read_text() == "mine"
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(SampleRepositoryError, match="file is in the way"):
        create_sample_repository("textkit", blocker)
    with pytest.raises(SampleRepositoryError, match="no sample repository called"):
        create_sample_repository("nope", tmp_path / "nope")
    assert not (tmp_path / "nope").exists()
    other = create_sample_repository("statkit", tmp_path / "s")
    with pytest.raises(SampleRepositoryError, match="not empty"):
        create_sample_repository("textkit", other)  # another sample is not this sample
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no staging left


MINIMAL = """
name = "mine"
layout = "auto"
[[repositories]]
name = "proj"
path = "proj"
[[tasks]]
name = "t1"
repository = "proj"
prompt = "do it"
mode = "plan"
"""


def test_local_path_repository_relative_to_the_manifest(tmp_path) -> None:
    manifest_file = tmp_path / "demo.toml"
    manifest_file.write_text(MINIMAL)
    manifest = load_manifest(manifest_file)
    assert manifest.sessions == 1 and manifest.layout.is_auto
    assert manifest.tasks[0].mode is SessionMode.PLAN and manifest.tasks[0].auto_approve
    repo = manifest.repository("proj")
    assert repo.path == tmp_path / "proj" and not repo.is_sample
    assert manifest.recording.size_px == (1280, 720)

    with pytest.raises(DemoManifestError, match="does not exist"):
        prepare_repositories(manifest, tmp_path / "work")
    (tmp_path / "proj").mkdir()
    with pytest.raises(DemoManifestError, match="not a git repository"):
        prepare_repositories(manifest, tmp_path / "work")
    git(tmp_path / "proj", "init", "-q")
    with pytest.raises(DemoManifestError, match="no commits"):
        prepare_repositories(manifest, tmp_path / "work")
    (tmp_path / "proj" / "a.txt").write_text("a")
    git(tmp_path / "proj", "add", "a.txt")
    git(tmp_path / "proj", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "a")
    assert prepare_repositories(manifest, tmp_path / "work") == {"proj": tmp_path / "proj"}
    assert not (tmp_path / "work").exists()  # nothing created for local repositories


@pytest.mark.parametrize("text,match", [
    ("name = [", "not valid TOML"),
    ("colour = 'red'\n" + MINIMAL, "top level|colour: unknown key"),
    (MINIMAL.replace('path = "proj"', 'sample = "nope"'), "repositories\\[0\\].sample"),
    (MINIMAL.replace('path = "proj"', 'path = "proj"\nsample = "textkit"'), "either 'path'"),
    (MINIMAL.replace('repository = "proj"', 'repository = "other"'), "tasks\\[0\\].repository"),
    (MINIMAL.replace('name = "t1"', 'name = "Fix It!"'), "tasks\\[0\\].name"),
    (MINIMAL.replace('layout = "auto"', 'layout = "eight"'), "layout"),
    (MINIMAL.replace('mode = "plan"', 'mode = "yolo"'), "mode"),
    (MINIMAL.replace('prompt = "do it"', "prompt = 3"), "prompt: must be str"),
    ("sessions = 0\n" + MINIMAL, "sessions: must be between"),
    ("schema_version = 99\n" + MINIMAL, "schema_version: 99 is newer"),
    (MINIMAL + "[recording]\nsize = 'huge'\n", "recording.size"),
    (MINIMAL + "[recording]\ncodec = 'gif'\n", "recording.codec"),
    (MINIMAL + "[recording]\nfps = 0\n", "recording.fps"),
    (MINIMAL.split("[[tasks]]")[0], "at least one \\[\\[tasks\\]\\]"),
])
def test_bad_manifests_are_plain_errors(text, match) -> None:
    with pytest.raises(DemoManifestError, match=match) as caught:
        parse_manifest(text, origin="demo.toml")
    assert isinstance(caught.value, UserError)
    assert "demo.toml" in str(caught.value)


def test_missing_manifest_file(tmp_path) -> None:
    with pytest.raises(DemoManifestError, match="does not exist"):
        load_manifest(tmp_path / "absent.toml")


def test_recording_source_size_and_duration() -> None:
    manifest = parse_manifest(MINIMAL + "[recording]\nsize = 'source'\nduration_s = 60\nfps = 24\n")
    assert manifest.recording.size_px is None
    assert manifest.recording.duration_s == 60.0 and manifest.recording.fps == 24.0
