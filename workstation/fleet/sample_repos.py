"""Sample repositories the app creates itself, so a demo works offline.

Each sample is a small Python project shipped in ``resources/demo/samples/<name>/`` whose
tests all pass, and a list of small bugs in ``resources/demo/bugs/<name>.toml``.
:func:`create_sample_repository` copies it into a folder, makes it a real git repository on
branch ``main`` with one commit (a fixed author and date, no hooks, no signing, so the
user's git configuration never gets in the way) and one branch per bug, ``bug/<name>``:
main with one line or two changed so that its test fails. A demo task starts on
such a branch and is done when the tests pass again — a real, checkable fix.
The first commit records the sample's content fingerprint (files and bugs). Asking again
for the same sample in the same folder reuses it; anything else already there is refused.

:func:`scratch_repository` makes the throw-away repositories the tuner's agent check, the
benchmarks and the tests work in, the same way (one commit on ``main``, the same git options).

Blocking (file copies and a few short ``git`` processes): call it from a worker thread or
a dedicated executor, never on the event loop.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path

from workstation.core.errors import UserError

SAMPLES_RESOURCE = ("resources", "demo", "samples")
BUGS_RESOURCE = ("resources", "demo", "bugs")
BUG_BRANCH_PREFIX = "bug/"
FINGERPRINT_TRAILER = "Workstation-Sample"
GIT_TIMEOUT_S = 60.0
_AUTHOR = ("workstation demo", "demo@workstation.invalid")
_COMMIT_DATE = "2026-01-01T00:00:00+00:00"
"""Fixed, so the same sample gives the same commit id everywhere."""
_SKIP = {"__pycache__", ".pytest_cache", ".git"}


class SampleRepositoryError(UserError):
    """A sample cannot be created where asked (unknown name, folder taken, git failed)."""


@dataclass(frozen=True, slots=True)
class SampleBug:
    """One small bug: on branch ``bug/<name>``, ``file`` has ``broken`` where main has ``fixed``."""

    name: str
    file: str
    fixed: str
    broken: str
    test: str
    """The pytest node id that fails on the bug's branch (tests that share the code may fail
    too); on main every test passes."""

    @property
    def branch(self) -> str:
        return BUG_BRANCH_PREFIX + self.name


@dataclass(frozen=True, slots=True)
class SampleRepository:
    name: str
    description: str
    files: tuple[str, ...]
    """Relative POSIX paths of the project's files."""
    fingerprint: str
    """sha256 over the paths, contents and bugs (16 hex digits): changes whenever the sample does."""
    bugs: tuple[SampleBug, ...] = ()


def _samples_root() -> Traversable:
    root = resources.files("workstation")
    for part in SAMPLES_RESOURCE:
        root = root.joinpath(part)
    return root


def _walk(node: Traversable, prefix: str = "") -> list[tuple[str, Traversable]]:
    found: list[tuple[str, Traversable]] = []
    for child in sorted(node.iterdir(), key=lambda c: c.name):
        if child.name in _SKIP or child.name.endswith(".pyc"):
            continue
        rel = f"{prefix}{child.name}"
        if child.is_dir():
            found.extend(_walk(child, rel + "/"))
        else:
            found.append((rel, child))
    return found


def _bugs_text(name: str) -> str:
    node = resources.files("workstation")
    for part in BUGS_RESOURCE:
        node = node.joinpath(part)
    node = node.joinpath(f"{name}.toml")
    return node.read_text(encoding="utf-8") if node.is_file() else ""


def _parse_bugs(name: str, text: str, files: dict[str, bytes]) -> tuple[SampleBug, ...]:
    if not text:
        return ()
    try:
        table = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SampleRepositoryError(f"the bugs of sample '{name}' are not valid TOML: {exc}") from None
    bugs: list[SampleBug] = []
    for index, entry in enumerate(table.get("bugs", [])):
        try:
            bug = SampleBug(**{k: str(entry[k]) for k in ("name", "file", "fixed", "broken", "test")})
        except (KeyError, TypeError):
            raise SampleRepositoryError(f"bug {index} of sample '{name}' needs name, file, fixed, "
                                        "broken and test") from None
        source = files.get(bug.file, b"").decode("utf-8")
        if source.count(bug.fixed) != 1:
            raise SampleRepositoryError(f"bug '{bug.name}' of sample '{name}': its fixed text must occur "
                                        f"exactly once in {bug.file}")
        bugs.append(bug)
    return tuple(bugs)


def _describe(name: str, files: list[tuple[str, Traversable]]) -> SampleRepository:
    digest = hashlib.sha256()
    description = name
    contents: dict[str, bytes] = {}
    for rel, node in files:
        data = node.read_bytes()
        contents[rel] = data
        digest.update(rel.encode() + b"\0" + data + b"\0")
        if rel == "pyproject.toml":
            for line in data.decode("utf-8").splitlines():
                if line.startswith("description"):
                    description = line.split("=", 1)[1].strip().strip('"')
    bugs_text = _bugs_text(name)
    digest.update(b"bugs\0" + bugs_text.encode())
    return SampleRepository(name=name, description=description,
                            files=tuple(rel for rel, _ in files),
                            fingerprint=digest.hexdigest()[:16],
                            bugs=_parse_bugs(name, bugs_text, contents))


def list_samples() -> tuple[SampleRepository, ...]:
    """Every sample shipped with the app, by name."""
    return tuple(
        _describe(node.name, _walk(node))
        for node in sorted(_samples_root().iterdir(), key=lambda n: n.name)
        if node.is_dir() and node.name not in _SKIP
    )


def sample_names() -> tuple[str, ...]:
    return tuple(node.name for node in sorted(_samples_root().iterdir(), key=lambda n: n.name)
                 if node.is_dir() and node.name not in _SKIP)


def get_sample(name: str) -> SampleRepository:
    root = _samples_root().joinpath(name)
    if name in _SKIP or "/" in name or not root.is_dir():
        raise SampleRepositoryError(
            f"there is no sample repository called '{name}'",
            hint="samples: " + ", ".join(sample_names()),
        )
    return _describe(name, _walk(root))


def _git_env(*, dated: bool = True) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(
        GIT_AUTHOR_NAME=_AUTHOR[0], GIT_AUTHOR_EMAIL=_AUTHOR[1],
        GIT_COMMITTER_NAME=_AUTHOR[0], GIT_COMMITTER_EMAIL=_AUTHOR[1],
        GIT_TERMINAL_PROMPT="0", GIT_CONFIG_NOSYSTEM="1", LC_ALL="C",
    )
    if dated:
        env.update(GIT_AUTHOR_DATE=_COMMIT_DATE, GIT_COMMITTER_DATE=_COMMIT_DATE)
    return env


def _git(cwd: Path, *args: str, dated: bool = True) -> str:
    command = ["git", "-c", "commit.gpgsign=false", "-c", "core.hooksPath=/dev/null",
               "-c", "init.defaultBranch=main", "-c", "core.autocrlf=false", *args]
    try:
        done = subprocess.run(command, cwd=cwd, env=_git_env(dated=dated), capture_output=True, text=True,
                              timeout=GIT_TIMEOUT_S, check=False)
    except FileNotFoundError:
        raise SampleRepositoryError("git is not installed (needed to create sample repositories)",
                                    hint="install git and try again") from None
    except subprocess.TimeoutExpired:
        raise SampleRepositoryError(f"git {args[0]} in {cwd} took longer than {GIT_TIMEOUT_S:.0f} s") from None
    if done.returncode != 0:
        detail = (done.stderr or done.stdout).strip().splitlines()
        raise SampleRepositoryError(f"git {args[0]} failed in {cwd}: {detail[-1] if detail else done.returncode}")
    return done.stdout


def _make_bug_branch(repo: Path, bug: SampleBug) -> None:
    """Branch ``bug/<name>`` off main with the bug in one commit; main stays checked out."""
    target = repo.joinpath(*bug.file.split("/"))
    original = target.read_bytes()
    _git(repo, "checkout", "-q", "-b", bug.branch, "main")
    try:
        target.write_bytes(original.decode("utf-8").replace(bug.fixed, bug.broken, 1).encode("utf-8"))
        _git(repo, "commit", "-q", "-a", "-m", f"{bug.name}: break {bug.file} ({bug.test} fails)")
    finally:
        _git(repo, "checkout", "-q", "-f", "main")


def existing_fingerprint(path: Path) -> str | None:
    """The sample fingerprint recorded in ``path``'s first commit, or None if it is not
    a sample repository made by :func:`create_sample_repository`."""
    if not (path / ".git").exists():
        return None
    try:
        roots = _git(path, "rev-list", "--max-parents=0", "HEAD").split()
        if not roots:
            return None
        message = _git(path, "log", "-1", "--format=%B", roots[-1])
    except SampleRepositoryError:
        return None
    for line in message.splitlines():
        if line.startswith(f"{FINGERPRINT_TRAILER}:"):
            return line.split(":", 1)[1].split()[-1]
    return None


def create_sample_repository(name: str, dest: Path) -> Path:
    """Create sample ``name`` as a git repository at ``dest`` (reused when it is already
    that sample). Returns the repository's path."""
    sample = get_sample(name)
    dest = Path(dest).expanduser().absolute()
    if dest.exists():
        if not dest.is_dir():
            raise SampleRepositoryError(f"cannot create sample '{name}' at {dest}: a file is in the way")
        if any(dest.iterdir()):
            if existing_fingerprint(dest) == sample.fingerprint:
                return dest
            raise SampleRepositoryError(
                f"cannot create sample '{name}' at {dest}: the folder is not empty",
                hint="choose an empty work folder for the demo, or remove this one",
            )
    staging = dest.with_name(f".{dest.name}.creating-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    try:
        staging.mkdir(parents=True)
        root = _samples_root().joinpath(name)
        for rel, node in _walk(root):
            target = staging.joinpath(*rel.split("/"))
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(node.read_bytes())
        (staging / ".gitignore").write_text("__pycache__/\n.pytest_cache/\n*.pyc\n")
        _git(staging, "init", "-q")
        _git(staging, "add", "-A")
        _git(staging, "commit", "-q", "-m",
             f"{name}: {sample.description}\n\n{FINGERPRINT_TRAILER}: {name} {sample.fingerprint}")
        for bug in sample.bugs:
            _make_bug_branch(staging, bug)
        if dest.exists():
            dest.rmdir()  # empty, checked above
        staging.rename(dest)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return dest


def scratch_repository(dest: Path, files: Mapping[str, str], *, message: str = "initial") -> Path:
    """A throw-away git repository at ``dest`` holding ``files`` (a path under it, ``/``
    between folders → its text) in one commit on ``main``: made like the samples (their
    author, no hooks, no signing, none of the caller's ``GIT_*`` variables, so neither the
    user's git configuration nor a test's environment gets in the way), but dated now.
    ``dest`` is made; it must not exist or be empty. Blocking."""
    dest = Path(dest)
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise SampleRepositoryError(f"cannot make a scratch repository at {dest}: it is not an empty folder")
    dest.mkdir(parents=True, exist_ok=True)
    for rel, text in files.items():
        target = dest.joinpath(*rel.split("/"))
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    _git(dest, "init", "-q", "-b", "main", dated=False)
    _git(dest, "add", "-A", dated=False)
    _git(dest, "commit", "-q", "--allow-empty", "-m", message, dated=False)
    return dest
