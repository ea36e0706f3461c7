"""Worktree bootstrap: what a new session's worktree gets besides git's files.

Per repository (``repos`` in settings, or a task file's keys, which win):

- ``copy``: paths of the main checkout copied in (``.env``, local config); an entry
  ``{link = "node_modules"}`` links a big ignored folder instead. Links point at the main
  checkout, which the sandbox shows read-only: sessions share the folder and cannot change
  it. Only untracked paths can be brought in (a tracked file is git's, and the worktree has
  it already); bootstrap paths are never part of the session's work (review leaves them out).
- ``setup``: a command run once in each new worktree, inside the sandbox, as an unattended
  command (where bubblewrap cannot run, the sandbox refuses it and the session says so). Its
  output streams to the pane and is stored with the session's transcript (as a ``setup``
  tool call), so it shows after a restart.
- ``ports`` and ``run``: the session's port block (``ports.py``) and dev server
  (``dev_server.py``).

Everything is checked before the first worktree is made; copying happens right after the
checkout (a failure removes the worktree again), the setup after that.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from workstation.core import agent_events as ev
from workstation.core.errors import UserError
from workstation.core.session_state import SessionState as S
from workstation.fleet.book import SessionBook
from workstation.fleet.gitproc import GitRunner
from workstation.fleet.ports import DEFAULT_PORT_RANGE, MAX_PORTS_PER_SESSION, PortBlock, PortBook
from workstation.fleet.session import SessionSpec

SETUP_TOOL = "setup"
"""The tool name the setup command's events carry in the transcript."""
SETUP_OUTPUT_MAX_CHARS = 20_000


@dataclass(frozen=True, slots=True)
class Bootstrap:
    """The resolved bootstrap of one session."""

    copy: tuple[str, ...] = ()
    link: tuple[str, ...] = ()
    setup: str = ""
    ports: int = 1
    run: str = ""

    @property
    def paths(self) -> tuple[str, ...]:
        """Every path the bootstrap puts into the worktree (never committed)."""
        return (*self.copy, *self.link)


def bootstrap_of(spec: SessionSpec, default_ports: int = 1) -> Bootstrap:
    return Bootstrap(copy=spec.copy_files or (), link=spec.link_files or (),
                     setup=spec.setup_command or "", ports=spec.ports or default_ports,
                     run=spec.run_command or "")


def split_copy_entries(entries: Any, where: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``copy = [".env", {link = "node_modules"}]`` → ``((".env",), ("node_modules",))``."""
    if not isinstance(entries, list | tuple):
        raise UserError(f"{where}: copy must be a list of paths (or {{link = \"PATH\"}} tables)")
    copies: list[str] = []
    links: list[str] = []
    for item in entries:
        if isinstance(item, str) and item.strip():
            copies.append(item.strip())
        elif isinstance(item, Mapping) and set(item) == {"link"} and isinstance(item["link"], str) \
                and item["link"].strip():
            links.append(item["link"].strip())
        else:
            raise UserError(f"{where}: copy entry {item!r} is neither a path nor {{link = \"PATH\"}}")
    return tuple(copies), tuple(links)


def repo_settings(repos: Mapping[str, Any], repo_path: Path) -> Any | None:
    """The settings entry for the repository at ``repo_path`` (keys are folders, ``~`` allowed)."""
    want = os.path.realpath(repo_path)
    for key, value in repos.items():
        if os.path.realpath(os.path.expanduser(key)) == want:
            return value
    return None


def resolve_spec(spec: SessionSpec, repo_path: Path, repos: Mapping[str, Any], *,
                 default_ports: int = 1) -> SessionSpec:
    """The spec with every bootstrap field decided: its own value, else the repository's
    settings (``workstation.config.RepoSettings``), else none (``default_ports`` ports)."""
    conf = repo_settings(repos, repo_path)
    copies, links = spec.copy_files, spec.link_files
    if copies is None and links is None and conf is not None:
        copies, links = split_copy_entries(list(conf.copy_files), f"settings repos[{repo_path}]")
    ports = spec.ports if spec.ports is not None else (conf.ports if conf is not None else None)
    return replace(
        spec,
        copy_files=tuple(copies or ()), link_files=tuple(links or ()),
        setup_command=spec.setup_command if spec.setup_command is not None else (conf.setup if conf else ""),
        ports=ports or default_ports,
        run_command=spec.run_command if spec.run_command is not None else (conf.run if conf else ""),
    )


def _inside(main: Path, rel: str, what: str) -> Path:
    if not rel or os.path.isabs(rel) or rel.startswith("~"):
        raise UserError(f"{what} {rel!r} must be a path relative to the repository")
    src = Path(os.path.normpath(main / rel))
    if src == main or not src.is_relative_to(main):
        raise UserError(f"{what} {rel!r} must name something inside the repository")
    if src.name == ".git" or ".git" in src.relative_to(main).parts:
        raise UserError(f"{what} {rel!r}: git's own folder cannot be copied or linked")
    return src


async def check_bootstrap(git: GitRunner, main: Path, boot: Bootstrap) -> None:
    """Before any worktree exists: every path is inside the main checkout, exists there, is
    not tracked by git, and no path is named twice."""
    seen: set[str] = set()
    for what, items in (("copy", boot.copy), ("link", boot.link)):
        for rel in items:
            src = _inside(main, rel, what)
            key = str(src.relative_to(main))
            if key in seen:
                raise UserError(f"bootstrap path {rel!r} is named twice")
            seen.add(key)
            if not src.exists() and not src.is_symlink():
                raise UserError(f"{what} {rel!r}: {src} does not exist", hint="create it in the main checkout first")
            tracked = await git.run(["ls-files", "--error-unmatch", "--", key], cwd=main, check=False)
            if tracked.ok:
                raise UserError(f"{what} {rel!r} is tracked by git: the worktree has it already",
                                hint="bootstrap brings in untracked files only (.env, local config, caches)")


def place_files(main: Path, worktree: Path, boot: Bootstrap) -> list[str]:
    """Copy and link the bootstrap paths into a fresh worktree (blocking: run it on the git
    runner's threads). Returns what was placed; raises ``UserError`` on the first failure."""
    placed: list[str] = []
    for kind, items in (("copy", boot.copy), ("link", boot.link)):
        for rel in items:
            src = _inside(main, rel, kind)
            dest = worktree / src.relative_to(main)
            if dest.exists() or dest.is_symlink():
                raise UserError(f"{kind} {rel!r}: the new worktree already has {dest.name}")
            dest.parent.mkdir(parents=True, exist_ok=True)
            try:
                if kind == "link":
                    dest.symlink_to(src, target_is_directory=src.is_dir())
                elif src.is_dir() and not src.is_symlink():
                    shutil.copytree(src, dest, symlinks=True)
                else:
                    shutil.copy2(src, dest, follow_symlinks=False)
            except OSError as exc:
                raise UserError(f"could not {kind} {rel!r} into {worktree}: {exc}") from exc
            placed.append(rel)
    return placed


def unseen_in_sandbox(policy: Any, path: Path) -> str:
    """Why a sandboxed command would not see ``path`` (a link's target); empty when it would.
    The sandbox gives commands a private /tmp and covers the app's data and the user's
    secrets, so a link into any of them would dangle inside."""
    from workstation.agent.sandbox import SandboxMode, hidden_paths

    if policy.mode is SandboxMode.OFF:
        return ""
    real = os.path.realpath(path)
    if real == "/tmp" or real.startswith("/tmp/"):
        return f"{real} is under /tmp, which every command gets a private one of"
    for hidden in hidden_paths(policy, "/nonexistent-root"):
        if real == hidden or real.startswith(hidden.rstrip("/") + "/"):
            return f"{real} is under {hidden}, which the sandbox hides"
    return ""


@dataclass(frozen=True, slots=True)
class SetupOutcome:
    command: str
    exit_code: int | None
    """None: it did not run to an exit (refused, timed out)."""
    output: str
    duration_s: float = 0.0
    refused: str = ""
    """Why the sandbox did not run it (empty when it ran)."""

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    def summary(self) -> str:
        if self.refused:
            return f"setup was not run: {self.refused}"
        if self.exit_code is None:
            return f"setup `{self.command}` timed out after {self.duration_s:.0f} s and was stopped"
        if self.exit_code:
            return f"setup `{self.command}` failed with exit status {self.exit_code}"
        return f"setup `{self.command}` finished in {self.duration_s:.1f} s"


async def run_setup(command: str, worktree: Path, *, sandbox: Any, env: Mapping[str, str],
                    timeout_s: float, on_output: Callable[[str], None] | None = None) -> SetupOutcome:
    """Run a worktree's setup command in the sandbox, as an unattended command.

    ``sandbox`` is the session's ``SandboxPolicy``; None refuses (no policy, no command).
    """
    from workstation.agent.commands import run_command, scrubbed_environment
    from workstation.agent.tool_api import ToolError

    if sandbox is None:
        return SetupOutcome(command, None, "", refused="no sandbox policy was given to the fleet")
    try:
        result = await run_command(
            command, str(worktree), timeout_s=timeout_s, max_output_chars=SETUP_OUTPUT_MAX_CHARS,
            on_output=on_output, env={**scrubbed_environment(), **env}, sandbox=sandbox, attended=False,
        )
    except ToolError as exc:
        return SetupOutcome(command, None, "", refused=str(exc))
    return SetupOutcome(command, None if result.timed_out else result.exit_code, result.output,
                        result.duration_s)


@dataclass(frozen=True, slots=True)
class BootstrapOptions:
    """The fleet-wide side of bootstrap (from settings: ``repos`` and ``fleet.*``)."""

    repos: Mapping[str, Any] = field(default_factory=dict)
    """``Settings.repos``: per-repository ``RepoSettings``."""
    default_ports: int = 1
    port_range: range = DEFAULT_PORT_RANGE
    setup_timeout_s: float = 1800.0
    setups_at_once: int = 2

    @classmethod
    def from_settings(cls, settings: Any) -> BootstrapOptions:
        f = settings.fleet
        return cls(repos=dict(settings.repos), default_ports=f.ports_per_session, port_range=f.port_range(),
                   setup_timeout_s=f.setup_timeout_s, setups_at_once=max(1, f.setups_at_once))


class Bootstrapper:
    """Bootstrap of the fleet's sessions: resolves and checks a spec's bootstrap, places the
    files, runs the setup (bounded: ``setups_at_once``), and gives each session's commands
    their environment (the port block). Owns nothing but the setup slots; the port blocks
    are the :class:`PortBook`'s, the records the book's."""

    def __init__(self, *, options: BootstrapOptions, sandbox: Any, ports: PortBook, git: GitRunner,
                 book: SessionBook, emit_event: Callable[[str, object], None]) -> None:
        """``emit_event(session_id, agent_event)`` puts an event into the session's transcript
        (stored and shown like the agent's own)."""
        self.options = options
        self.sandbox = sandbox
        self.ports = ports
        self._git = git
        self._book = book
        self._emit_event = emit_event
        self._slots = asyncio.Semaphore(options.setups_at_once)

    async def prepare_spec(self, spec: SessionSpec, main: Path) -> SessionSpec:
        """The spec with its bootstrap decided and checked against the main checkout."""
        resolved = resolve_spec(spec, main, self.options.repos, default_ports=self.options.default_ports)
        if not 1 <= (resolved.ports or 1) <= MAX_PORTS_PER_SESSION:
            raise UserError(f"ports must be between 1 and {MAX_PORTS_PER_SESSION}, not {resolved.ports}")
        boot = bootstrap_of(resolved)
        await check_bootstrap(self._git, main, boot)
        if boot.link and self.sandbox is not None:
            for rel in boot.link:
                unseen = unseen_in_sandbox(self.sandbox, main / rel)
                if unseen:
                    raise UserError(f"link {rel!r}: commands would not see it ({unseen})",
                                    hint="copy it instead, or keep the repository outside that folder")
        return resolved

    async def place(self, main: Path, worktree: Path, spec: SessionSpec) -> list[str]:
        boot = bootstrap_of(spec)
        if not boot.paths:
            return []
        return await self._git.blocking(place_files, main, worktree, boot)

    async def port_block(self, session_id: str, spec: SessionSpec) -> PortBlock:
        """The session's ports (allocated now for a session made before blocks existed)."""
        return self.ports.get(session_id) or await self.ports.allocate(
            session_id, spec.ports or self.options.default_ports)

    async def command_env(self, session_id: str, spec: SessionSpec) -> dict[str, str]:
        """What the session's commands get besides the scrubbed environment: its port block."""
        return (await self.port_block(session_id, spec)).env()

    async def setup_session(self, session_id: str, *, again: bool = False) -> SetupOutcome | None:
        """Run a session's setup and set its state: a new worktree is ready after it (failed
        when it failed: not started, its pane says why); ``again`` for a session the user
        asks to set up once more (ready again when it only failed for its setup)."""
        rec = self._book.rec(session_id)
        if again and not rec.spec.setup_command:
            raise UserError(f"{rec.name} has no setup command",
                            hint="set `setup` for its repository (settings or the task file)")
        if not Path(rec.worktree_path).is_dir():
            raise UserError(f"the worktree of {rec.name} is gone ({rec.worktree_path})")
        outcome = await self.setup(session_id, Path(rec.worktree_path), rec.spec)
        if outcome is not None and not outcome.ok:
            self._book.set_state(session_id, S.FAILED, outcome.summary(), force=True)
        elif rec.state is S.PREPARING or (rec.state is S.FAILED and rec.error.startswith("setup")):
            self._book.set_state(session_id, S.READY,
                                 "worktree created" if outcome is None else outcome.summary(), force=True)
        return outcome

    async def setup(self, session_id: str, worktree: Path, spec: SessionSpec) -> SetupOutcome | None:
        """Run the session's setup command (None when it has none), its output into the
        session's transcript as a ``setup`` tool call."""
        command = (spec.setup_command or "").strip()
        if not command:
            return None
        env = await self.command_env(session_id, spec)
        call_id = f"setup-{time.time_ns()}"
        emit = self._emit_event
        async with self._slots:
            emit(session_id, ev.ToolCallStarted(session_id, call_id, SETUP_TOOL, {"command": command},
                                                f"setup: {command}"))
            outcome = await run_setup(
                command, worktree, sandbox=self.sandbox, env=env, timeout_s=self.options.setup_timeout_s,
                on_output=lambda text: emit(session_id, ev.CommandOutputStreamed(session_id, call_id, text)))
        body = outcome.output.strip()
        emit(session_id, ev.ToolCallFinished(
            session_id, call_id, SETUP_TOOL, "ok" if outcome.ok else "error",
            outcome.summary() + (f"\n{body}" if body else ""), outcome.duration_s))
        return outcome
