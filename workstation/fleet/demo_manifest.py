"""The demo manifest: what ``workstation demo`` runs, as a TOML file (Qt-free, no I/O but
reading the file and, in :func:`prepare_repositories`, creating sample repositories).

A manifest names repositories (local paths, or samples the app creates itself so a demo
works offline), tasks (a prompt for one repository), how many sessions to run, the tile
layout, the engine profile and how to record. The default one ships in
``resources/demo/default.toml`` (32 sessions on 8 samples)::

    schema_version = 1
    name = "default"
    sessions = 32
    layout = "8x4"                 # or "auto"
    engine_profile = "default"
    [defaults]                     # for every task unless it says otherwise
    mode = "act"                   # "plan" | "act"
    auto_approve = true
    [recording]
    fps = 30
    size = "1280x720"              # or "source"
    codec = "h264"                 # h264 | vp9 | av1
    overlay = true
    # duration_s = 60              # optional
    [[repositories]]
    name = "textkit"
    sample = "textkit"             # or: path = "~/src/project" (relative: to this file)
    [[tasks]]
    name = "fix-slugify"           # also the session name: lowercase, digits, - . _
    repository = "textkit"
    prompt = "…"
    # mode / auto_approve / base_branch override [defaults]

:func:`plan_sessions` turns it into N sessions: tasks are taken one repository after
another (so 8 sessions of the default touch all 8 projects) and repeated, with ``-2``,
``-3`` … names, when N exceeds the number of tasks.
"""

from __future__ import annotations

import enum
import re
import subprocess
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from workstation.core.errors import UserError
from workstation.fleet.sample_repos import create_sample_repository, get_sample

SCHEMA_VERSION = 1
MAX_SESSIONS = 256
DEFAULT_MANIFEST_RESOURCE = ("resources", "demo", "default.toml")
_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,47}$")
_SIZE_RE = re.compile(r"^\s*(\d+)\s*[x×]\s*(\d+)\s*$")
_CODECS = ("h264", "vp9", "av1")


class DemoManifestError(UserError):
    """The manifest cannot be used; the message names the file and the key."""


class SessionMode(enum.Enum):
    PLAN = "plan"
    ACT = "act"


@dataclass(frozen=True, slots=True)
class DemoRepository:
    name: str
    path: Path | None = None
    """A local git repository (absolute, ``~`` expanded)."""
    sample: str | None = None
    """Name of a sample the app creates (see ``sample_repos``)."""

    @property
    def is_sample(self) -> bool:
        return self.sample is not None


@dataclass(frozen=True, slots=True)
class DemoTask:
    name: str
    repository: str
    prompt: str
    mode: SessionMode = SessionMode.ACT
    auto_approve: bool = True
    base_branch: str | None = None
    """Branch the session's worktree starts from; None: the repository's current branch."""


@dataclass(frozen=True, slots=True)
class DemoLayout:
    """Tile grid of the window: ``cols × rows``, or both None for the automatic fit."""

    cols: int | None = None
    rows: int | None = None

    @property
    def is_auto(self) -> bool:
        return self.cols is None

    def __str__(self) -> str:
        return "auto" if self.is_auto else f"{self.cols}x{self.rows}"


@dataclass(frozen=True, slots=True)
class DemoRecording:
    fps: float = 30.0
    size_px: tuple[int, int] | None = (1280, 720)
    """Output size; None records at the window's own size."""
    codec: str = "h264"
    overlay: bool = True
    duration_s: float | None = None


@dataclass(frozen=True, slots=True)
class DemoManifest:
    name: str
    description: str
    sessions: int
    layout: DemoLayout
    engine_profile: str
    repositories: tuple[DemoRepository, ...]
    tasks: tuple[DemoTask, ...]
    recording: DemoRecording
    source: Path | None = None
    """The file it came from (None: text or the shipped default)."""

    def repository(self, name: str) -> DemoRepository:
        for repo in self.repositories:
            if repo.name == name:
                return repo
        raise KeyError(name)


@dataclass(frozen=True, slots=True)
class DemoSession:
    """One session to create: a name (unique; also the branch ``ws/<name>``), where, what."""

    index: int
    name: str
    repository: DemoRepository
    task: DemoTask


# ----- reading -----
class _Reader:
    """Typed access to one TOML table, with errors that say where."""

    def __init__(self, table: Mapping[str, Any], where: str, origin: str) -> None:
        self.table, self.where, self.origin = table, where, origin

    def fail(self, key: str | None, message: str) -> DemoManifestError:
        at = f"{self.where}.{key}" if key and self.where else (key or self.where or "top level")
        return DemoManifestError(f"demo manifest {self.origin}: {at}: {message}")

    def check_keys(self, allowed: Iterable[str]) -> None:
        unknown = sorted(set(self.table) - set(allowed))
        if unknown:
            raise self.fail(unknown[0], f"unknown key (known: {', '.join(sorted(allowed))})")

    def get(self, key: str, kind: type | tuple[type, ...], default: Any = ..., *,
            required: bool = False) -> Any:
        if key not in self.table:
            if required:
                raise self.fail(key, "is required")
            return default
        value = self.table[key]
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            names = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
            raise self.fail(key, f"must be {names}, not {type(value).__name__}")
        return value

    def name(self, key: str) -> str:
        value = self.get(key, str, required=True)
        if not _NAME_RE.match(value):
            raise self.fail(key, f"'{value}' must be lowercase letters, digits, '-', '.' or '_' "
                            "(at most 48, starting with a letter or digit)")
        return value


def default_manifest_text() -> str:
    node = resources.files("workstation")
    for part in DEFAULT_MANIFEST_RESOURCE:
        node = node.joinpath(part)
    return node.read_text(encoding="utf-8")


def load_manifest(path: Path | str | None = None) -> DemoManifest:
    """Read a manifest file; None reads the default shipped with the app."""
    if path is None:
        return parse_manifest(default_manifest_text(), origin="(default)")
    file = Path(path).expanduser()
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DemoManifestError(f"demo manifest {file} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise DemoManifestError(f"cannot read demo manifest {file}: {exc}") from None
    return parse_manifest(text, origin=str(file), base_dir=file.absolute().parent, source=file)


def parse_manifest(text: str, *, origin: str = "(text)", base_dir: Path | None = None,
                   source: Path | None = None) -> DemoManifest:
    """Parse manifest text; relative repository paths are taken from ``base_dir``."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise DemoManifestError(f"demo manifest {origin} is not valid TOML: {exc}") from None
    top = _Reader(data, "", origin)
    top.check_keys({"schema_version", "name", "description", "sessions", "layout",
                    "engine_profile", "defaults", "recording", "repositories", "tasks"})
    version = top.get("schema_version", int, SCHEMA_VERSION)
    if version > SCHEMA_VERSION:
        raise top.fail("schema_version", f"{version} is newer than this app knows ({SCHEMA_VERSION})")
    sessions = top.get("sessions", int, None)
    layout = _layout(top)
    defaults = _Reader(top.get("defaults", dict, {}), "defaults", origin)
    defaults.check_keys({"mode", "auto_approve", "base_branch"})
    repositories = _repositories(top, origin, base_dir or Path.cwd())
    tasks = _tasks(top, origin, defaults, {r.name for r in repositories})
    if sessions is None:
        sessions = len(tasks)
    if not 1 <= sessions <= MAX_SESSIONS:
        raise top.fail("sessions", f"must be between 1 and {MAX_SESSIONS}, not {sessions}")
    return DemoManifest(
        name=top.get("name", str, "demo"), description=top.get("description", str, ""),
        sessions=sessions, layout=layout,
        engine_profile=top.get("engine_profile", str, "default"),
        repositories=repositories, tasks=tasks,
        recording=_recording(_Reader(top.get("recording", dict, {}), "recording", origin)),
        source=source,
    )


def _layout(top: _Reader) -> DemoLayout:
    text = top.get("layout", str, "auto").strip().lower()
    if text == "auto":
        return DemoLayout()
    match = _SIZE_RE.match(text)
    if not match or not (0 < int(match[1]) <= 32 and 0 < int(match[2]) <= 32):
        raise top.fail("layout", f"'{text}' must be 'auto' or COLSxROWS such as '8x4'")
    return DemoLayout(cols=int(match[1]), rows=int(match[2]))


def _repositories(top: _Reader, origin: str, base_dir: Path) -> tuple[DemoRepository, ...]:
    tables = top.get("repositories", list, [])
    if not tables:
        raise top.fail("repositories", "at least one [[repositories]] entry is needed")
    found: dict[str, DemoRepository] = {}
    for index, table in enumerate(tables):
        if not isinstance(table, dict):
            raise top.fail(f"repositories[{index}]", "must be a table")
        reader = _Reader(table, f"repositories[{index}]", origin)
        reader.check_keys({"name", "path", "sample"})
        name = reader.name("name")
        if name in found:
            raise reader.fail("name", f"'{name}' is used twice")
        path_text, sample = reader.get("path", str, None), reader.get("sample", str, None)
        if (path_text is None) == (sample is None):
            raise reader.fail(None, "give either 'path' (a local git repository) or 'sample'")
        if sample is not None:
            try:
                get_sample(sample)
            except UserError as exc:
                raise reader.fail("sample", exc.describe()) from None
            found[name] = DemoRepository(name=name, sample=sample)
        else:
            path = Path(path_text).expanduser()
            found[name] = DemoRepository(name=name, path=(base_dir / path).absolute()
                                         if not path.is_absolute() else path)
    return tuple(found.values())


def _tasks(top: _Reader, origin: str, defaults: _Reader, repos: set[str]) -> tuple[DemoTask, ...]:
    tables = top.get("tasks", list, [])
    if not tables:
        raise top.fail("tasks", "at least one [[tasks]] entry is needed")
    default_mode = _mode(defaults, SessionMode.ACT)
    default_auto = defaults.get("auto_approve", bool, True)
    default_base = defaults.get("base_branch", str, None)
    tasks: list[DemoTask] = []
    names: set[str] = set()
    for index, table in enumerate(tables):
        if not isinstance(table, dict):
            raise top.fail(f"tasks[{index}]", "must be a table")
        reader = _Reader(table, f"tasks[{index}]", origin)
        reader.check_keys({"name", "repository", "prompt", "mode", "auto_approve", "base_branch"})
        name = reader.name("name")
        if name in names:
            raise reader.fail("name", f"'{name}' is used twice")
        names.add(name)
        repository = reader.get("repository", str, required=True)
        if repository not in repos:
            raise reader.fail("repository", f"'{repository}' is not one of the [[repositories]] "
                              f"({', '.join(sorted(repos))})")
        prompt = reader.get("prompt", str, required=True).strip()
        if not prompt:
            raise reader.fail("prompt", "is empty")
        tasks.append(DemoTask(
            name=name, repository=repository, prompt=prompt, mode=_mode(reader, default_mode),
            auto_approve=reader.get("auto_approve", bool, default_auto),
            base_branch=reader.get("base_branch", str, default_base),
        ))
    return tuple(tasks)


def _mode(reader: _Reader, default: SessionMode) -> SessionMode:
    text = reader.get("mode", str, default.value)
    try:
        return SessionMode(text.lower())
    except ValueError:
        raise reader.fail("mode", f"'{text}' must be 'plan' or 'act'") from None


def _recording(reader: _Reader) -> DemoRecording:
    reader.check_keys({"fps", "size", "codec", "overlay", "duration_s"})
    fps = reader.get("fps", float, 30.0)
    if not 1 <= fps <= 120:
        raise reader.fail("fps", f"{fps:g} must be between 1 and 120")
    size_text = reader.get("size", str, "1280x720").strip().lower()
    size_px: tuple[int, int] | None = None
    if size_text != "source":
        match = _SIZE_RE.match(size_text)
        if not match or not all(16 <= int(v) <= 8192 for v in match.groups()):
            raise reader.fail("size", f"'{size_text}' must be 'source' or WIDTHxHEIGHT such as '1280x720'")
        size_px = (int(match[1]), int(match[2]))
    codec = reader.get("codec", str, "h264").strip().lower()
    if codec not in _CODECS:
        raise reader.fail("codec", f"'{codec}' must be one of {', '.join(_CODECS)}")
    duration = reader.get("duration_s", float, None)
    if duration is not None and duration <= 0:
        raise reader.fail("duration_s", "must be positive")
    return DemoRecording(fps=fps, size_px=size_px, codec=codec,
                         overlay=reader.get("overlay", bool, True), duration_s=duration)


# ----- planning and preparing -----
def plan_sessions(manifest: DemoManifest, sessions: int | None = None) -> tuple[DemoSession, ...]:
    """The sessions to create: ``sessions`` (default: the manifest's) tasks, taken one
    repository after another, repeating the list with numbered names when it runs out."""
    count = manifest.sessions if sessions is None else sessions
    if not 1 <= count <= MAX_SESSIONS:
        raise DemoManifestError(f"number of demo sessions must be between 1 and {MAX_SESSIONS}, not {count}")
    by_repo: dict[str, list[DemoTask]] = {}
    for task in manifest.tasks:
        by_repo.setdefault(task.repository, []).append(task)
    order: list[DemoTask] = []
    depth = max(len(group) for group in by_repo.values())
    for level in range(depth):
        order.extend(group[level] for group in by_repo.values() if level < len(group))
    planned: list[DemoSession] = []
    for index in range(count):
        task = order[index % len(order)]
        lap = index // len(order)
        name = task.name if lap == 0 else f"{task.name}-{lap + 1}"
        planned.append(DemoSession(index=index, name=name,
                                   repository=manifest.repository(task.repository), task=task))
    return tuple(planned)


def prepare_repositories(manifest: DemoManifest, workdir: Path, *,
                         only: Iterable[str] | None = None) -> dict[str, Path]:
    """Make every repository (or those named in ``only``) ready: samples are created under
    ``workdir/<name>`` (reused when already there), local paths are checked to be git
    repositories with at least one commit. Blocking: run it off the event loop.
    Returns repository name → path."""
    wanted = set(only) if only is not None else {r.name for r in manifest.repositories}
    ready: dict[str, Path] = {}
    for repo in manifest.repositories:
        if repo.name not in wanted:
            continue
        if repo.sample is not None:
            ready[repo.name] = create_sample_repository(repo.sample, Path(workdir) / repo.name)
        else:
            ready[repo.name] = _check_local_repository(repo)
    return ready


def _check_local_repository(repo: DemoRepository) -> Path:
    path = repo.path
    assert path is not None
    if not path.exists():
        raise DemoManifestError(f"demo repository '{repo.name}': {path} does not exist")
    if not path.is_dir():
        raise DemoManifestError(f"demo repository '{repo.name}': {path} is a file, not a folder")
    try:
        done = subprocess.run(["git", "-C", str(path), "rev-parse", "--verify", "-q", "HEAD^{commit}"],
                              capture_output=True, text=True, timeout=30, check=False)
    except FileNotFoundError:
        raise DemoManifestError("git is not installed (needed for demo repositories)") from None
    except subprocess.TimeoutExpired:
        raise DemoManifestError(f"demo repository '{repo.name}': git did not answer in 30 s") from None
    if done.returncode != 0:
        inside = subprocess.run(["git", "-C", str(path), "rev-parse", "--git-dir"],
                                capture_output=True, text=True, timeout=30, check=False)
        if inside.returncode != 0:
            raise DemoManifestError(f"demo repository '{repo.name}': {path} is not a git repository",
                                    hint="run `git init` there and commit, or use a sample")
        raise DemoManifestError(f"demo repository '{repo.name}': {path} has no commits yet",
                                hint="commit something first: sessions branch off a commit")
    return path
