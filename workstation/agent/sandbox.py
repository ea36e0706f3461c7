"""The sandbox of ``execute_command``: bubblewrap where it works, resource limits always.

With bubblewrap (``bwrap``, Debian package ``bubblewrap``) a command sees

- its session's directory read-write (``--bind``), the rest of the system read-only
  (``--ro-bind / /``), a private ``/tmp`` (a size-bounded tmpfs), a minimal ``/dev``;
- nothing of: the app's data directory (store, logs, settings, other worktrees, engine
  files), other live sessions' directories, the user's secrets (``~/.ssh``, ``~/.aws``,
  ``~/.config/gh``, ``~/.gnupg``, keyrings, ``~/.netrc`` …), the user's runtime directory
  (D-Bus, agent sockets) and container-engine sockets — each covered by an empty tmpfs
  (folders) or ``/dev/null`` (files);
- its own pid namespace (``--unshare-pid``: the app cannot be signalled, ``/proc/<app
  pid>/environ`` does not exist), its own user, IPC, UTS and cgroup namespaces, no
  capabilities (``--cap-drop ALL``: as root, too — else root could unmount the tmpfs
  covers), no further user namespaces (``--disable-userns`` where supported), its own
  session (``--new-session``), and ``--die-with-parent``;
- **no network** by default (``--unshare-net``: only a loopback of its own, so the engine's
  port on the host's 127.0.0.1 is unreachable too). ``network="host"`` shares the host's
  network for commands that need it (pip, git fetch); bubblewrap cannot limit it to one
  port, so that mode reaches the engine's port as well (its API key stays unreadable).

Git inside the sandbox: for a worktree, the repository's shared ``.git`` is read-only and
the worktree's own admin folder (index, HEAD) writable: status, diff and log work; add and
commit do not (they write shared objects and refs) — commits are the app's job (review →
commit), checkpoints are made by the agent outside the sandbox.

Killing: a sandboxed command is ended through :func:`end_sandbox` (freeze the outer bwrap,
end what runs below it, kill the namespace's init), never by signalling the outer bwrap
alone, which during its set-up would leave the namespace running as an orphan.

Always (with or without bubblewrap), set in the child before it execs: ``RLIMIT_CPU``,
``RLIMIT_AS``, ``RLIMIT_FSIZE``, ``RLIMIT_NPROC`` (for an ordinary user: the user's current
thread count plus ``max_processes``, since the kernel counts all of the user's threads;
root is exempt from it, so root gets a pids cgroup where one can be made, see
``pids_cgroup.py``), ``RLIMIT_CORE`` 0; soft = hard, so a command cannot raise them.

Fail closed. Where bubblewrap is missing or refused (no unprivileged user namespaces, an
AppArmor rule), a command never runs unattended: in ``mode="auto"`` (the default) it runs
only when a person approved that very command (``attended=True``, which the agent passes
after asking — see ``sandbox_status.py``), with the limits and the scrubbed environment
only; unattended it is refused. ``mode="required"`` refuses every command there.
``mode="off"`` is the user's explicit choice in settings: no bubblewrap, limits only, the
approval policy as configured. :data:`notices` says each of these once — a log warning and
a :class:`SandboxNotice` on ``notices.noticed`` for the UI.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import resource
import shutil
import signal
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

import psutil
from workstation.agent.pids_cgroup import CommandCgroup, PidsCgroups
from workstation.agent.sandbox_notices import (  # noqa: F401 - re-exported: the UI reads them here
    SandboxNotice,
    fallback_message,
    notices,
    unattended_message,
)
from workstation.agent.tool_api import ToolError
from workstation.config import Settings, default_data_dir

log = logging.getLogger(__name__)

GIB = 1 << 30
MIB = 1 << 20

HOME_SECRETS: tuple[str, ...] = (
    ".ssh", ".aws", ".config/gh", ".gnupg", ".local/share/keyrings", ".password-store",
    ".netrc", ".git-credentials", ".config/git/credentials", ".docker/config.json", ".kube/config",
    ".config/gcloud", ".azure", ".pypirc", ".npmrc", ".yarnrc", ".cargo/credentials",
    ".cargo/credentials.toml", ".cache/huggingface/token", ".huggingface/token",
    ".config/hub", ".terraform.d/credentials.tfrc.json", ".vault-token", ".pgpass",
    ".my.cnf", ".config/op", ".local/share/workstation", ".config/workstation",
)
"""Paths under the user's home that commands never see (those that exist are covered)."""

SYSTEM_SECRETS: tuple[str, ...] = (
    "/run/user", "/run/docker.sock", "/var/run/docker.sock", "/run/containerd",
    "/run/podman", "/run/dbus/system_bus_socket",
)
"""Sockets that give more power than the user's files (container engines, D-Bus)."""


class SandboxMode(str, Enum):
    AUTO = "auto"
    """bubblewrap where it works; otherwise limits + environment scrub, said once."""
    REQUIRED = "required"
    """bubblewrap or nothing: commands are refused where it does not work."""
    OFF = "off"
    """No bubblewrap (said once): limits + environment scrub only."""


class NetworkAccess(str, Enum):
    NONE = "none"
    """A network namespace of its own: no network, not even the host's loopback."""
    HOST = "host"
    """The host's network (loopback included, so the engine's port too)."""


@dataclass(frozen=True, slots=True)
class SandboxPolicy:
    """How one session's commands are confined. ``None`` for a limit means no limit."""

    mode: SandboxMode = SandboxMode.AUTO
    network: NetworkAccess = NetworkAccess.NONE
    cpu_time_s: int | None = 900
    """CPU seconds per process (``RLIMIT_CPU``); the wall-clock timeout is separate."""
    address_space_bytes: int | None = 16 * GIB
    """Virtual memory per process (``RLIMIT_AS``)."""
    max_processes: int | None = 512
    """Processes (threads) a command may add (``RLIMIT_NPROC`` / ``pids.max``)."""
    file_size_bytes: int | None = 1 * GIB
    """Largest file a command may write (``RLIMIT_FSIZE``)."""
    tmp_size_bytes: int = 1 * GIB
    """Size of the private ``/tmp`` (where bubblewrap supports ``--size``)."""
    app_data_dirs: tuple[str, ...] = ()
    """The app's data folders (hidden); the default data dir is always added."""
    hidden_paths: tuple[str, ...] = ()
    """More paths to hide."""
    bwrap: str = ""
    """The bubblewrap program; empty looks up ``bwrap`` on PATH."""

    @classmethod
    def from_settings(cls, settings: Settings) -> SandboxPolicy:
        s = settings.sandbox

        def limit(value: float, unit: int) -> int | None:
            return int(value * unit) if value > 0 else None

        return cls(
            mode=SandboxMode(s.mode), network=NetworkAccess(s.network),
            cpu_time_s=limit(s.cpu_time_s, 1), address_space_bytes=limit(s.address_space_gib, GIB),
            max_processes=limit(s.max_processes, 1), file_size_bytes=limit(s.file_size_gib, GIB),
            tmp_size_bytes=max(16 * MIB, int(s.tmp_size_mib * MIB)),
            app_data_dirs=(str(settings.data_dir),), hidden_paths=tuple(s.hidden_paths), bwrap=s.bwrap,
        )


_session_roots: set[str] = set()


def register_session_root(root: str | os.PathLike[str]) -> None:
    """A session's directory: hidden from every other session's commands."""
    _session_roots.add(os.path.realpath(os.fspath(root)))


# ----------------------------------------------------------------------------- bubblewrap
@dataclass(frozen=True, slots=True)
class BwrapProbe:
    usable: bool
    path: str
    reason: str
    """Why it is not usable (empty when it is)."""
    features: frozenset[str] = frozenset()
    """Optional flags this bwrap knows (``--disable-userns``, ``--size``)."""


BWRAP_PROGRAM = "bwrap"
"""The program looked up on PATH."""

_probes: dict[tuple[str, NetworkAccess], BwrapProbe] = {}
_OPTIONAL_FLAGS = ("--disable-userns", "--size")


async def probe_bwrap(network: NetworkAccess = NetworkAccess.NONE, *, bwrap: str | None = None) -> BwrapProbe:
    """Whether bubblewrap runs here with the flags commands get (cached per process)."""
    path = bwrap or shutil.which(BWRAP_PROGRAM) or ""
    key = (path, network)
    cached = _probes.get(key)
    if cached is not None:
        return cached
    if not path:
        probe = BwrapProbe(False, "", "bubblewrap (bwrap) is not installed")
    elif not (os.path.isfile(path) and os.access(path, os.X_OK)):
        probe = BwrapProbe(False, path, f"the bubblewrap program {path} (sandbox.bwrap) is not an executable file")
    else:
        probe = await _run_probe(path, network)
    _probes[key] = probe
    return probe


async def _run_probe(path: str, network: NetworkAccess) -> BwrapProbe:
    rc, text = await _quiet(path, "--help")
    features = frozenset(f for f in _OPTIONAL_FLAGS if f in text)
    argv = [path, *_base_flags(features, network, 16 * MIB), "--", "/bin/sh", "-c", "exit 0"]
    rc, text = await _quiet(*argv)
    if rc == 0:
        return BwrapProbe(True, path, "", features)
    reason = text.strip().splitlines()[-1] if text.strip() else f"exit status {rc}"
    return BwrapProbe(False, path, f"bubblewrap is installed but refused to run ({reason})", features)


async def _quiet(*argv: str) -> tuple[int, str]:
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT, start_new_session=True,
        )
    except OSError as exc:
        return 127, str(exc)
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), timeout=15)
    except asyncio.TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()
        return 124, "timed out"
    return proc.returncode or 0, out.decode("utf-8", "replace")


def _base_flags(features: frozenset[str], network: NetworkAccess, tmp_size_bytes: int) -> list[str]:
    flags = ["--die-with-parent", "--new-session", "--unshare-all", "--cap-drop", "ALL"]
    if "--disable-userns" in features:
        flags += ["--unshare-user", "--disable-userns"]
    if network is NetworkAccess.HOST:
        flags.append("--share-net")
    flags += ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    if "--size" in features:
        flags += ["--size", str(tmp_size_bytes)]
    flags += ["--tmpfs", "/tmp"]
    return flags


@dataclass(frozen=True, slots=True)
class Mount:
    kind: str
    """``hide`` (an empty tmpfs or /dev/null over it), ``ro`` or ``rw`` (bind)."""
    path: str


def _depth(path: str) -> int:
    return len(Path(path).parts)


def _git_dirs(root: Path) -> tuple[str, str] | None:
    """``(worktree admin dir, shared git dir)`` when ``root`` is a linked worktree."""
    dot_git = root / ".git"
    if not dot_git.is_file():
        return None
    try:
        text = dot_git.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return None
    if not text.startswith("gitdir:"):
        return None
    admin = Path(os.path.realpath(root / text[len("gitdir:"):].strip()))
    common = admin
    with contextlib.suppress(OSError):
        common = Path(os.path.realpath(admin / (admin / "commondir").read_text().strip()))
    return str(admin), str(common)


def hidden_paths(policy: SandboxPolicy, root: str, *, home: str | None = None) -> list[str]:
    """Every path this session's commands must not see (only those that exist)."""
    home_dir = home if home is not None else os.path.expanduser("~")
    candidates: list[str] = [*policy.app_data_dirs, str(default_data_dir()), *policy.hidden_paths]
    if home_dir and home_dir != "/":
        candidates += [os.path.join(home_dir, rel) for rel in HOME_SECRETS]
    candidates += SYSTEM_SECRETS
    candidates += [r for r in _session_roots if r != root]
    out: list[str] = []
    for path in candidates:
        real = os.path.realpath(os.path.expanduser(path))
        if real in ("/", root) or real in out or not os.path.lexists(real):
            continue
        out.append(real)  # an ancestor of ``root`` too: the root is bound again on top of it

    def under(path: str, top: str) -> bool:
        return path.startswith(top.rstrip("/") + "/")

    # a path inside another hidden one is hidden already (covering it again would only make
    # its name appear as an empty folder), unless it lies inside the session's own root
    return [p for p in out if under(p, root) or not any(q != p and under(p, q) for q in out)]


def mount_plan(policy: SandboxPolicy, root: str, *, home: str | None = None) -> list[Mount]:
    """The mounts over ``/`` (read-only) for one session, in the order bwrap applies them:
    shallower first, so a deeper mount (the session's own root inside the hidden data dir)
    lands on top of a shallower one."""
    mounts = [Mount("hide", p) for p in hidden_paths(policy, root, home=home)]
    git = _git_dirs(Path(root))
    if git is not None:
        admin, common = git
        mounts.append(Mount("ro", common))
        mounts.append(Mount("rw", admin))
    mounts.append(Mount("rw", root))
    order = {"hide": 0, "ro": 1, "rw": 2}
    return sorted(mounts, key=lambda m: (_depth(m.path), order[m.kind]))


def bwrap_argv(probe: BwrapProbe, policy: SandboxPolicy, root: str, command: Sequence[str], *,
               home: str | None = None) -> list[str]:
    argv = [probe.path, *_base_flags(probe.features, policy.network, policy.tmp_size_bytes)]
    covers: list[str] = []
    for m in mount_plan(policy, root, home=home):
        if m.kind == "hide":
            if os.path.isdir(m.path) and not os.path.islink(m.path):
                argv += ["--tmpfs", m.path]
                covers.append(m.path)
            else:
                argv += ["--ro-bind", "/dev/null", m.path]
        elif m.kind == "ro":
            argv += ["--ro-bind", m.path, m.path]
        else:
            argv += ["--bind", m.path, m.path]
    for path in covers:  # read-only once the mounts inside them exist: writes fail, not vanish
        argv += ["--remount-ro", path]
    argv += ["--chdir", root, "--", *command]
    return argv


# ----------------------------------------------------------------------------- limits
_cgroups = PidsCgroups()
_nproc_cache: tuple[float, int] = (0.0, 0)


def _user_threads() -> int:
    """Threads the real user runs now (what the kernel counts against ``RLIMIT_NPROC``)."""
    global _nproc_cache
    now = time.monotonic()
    if now - _nproc_cache[0] < 2.0:
        return _nproc_cache[1]
    uid = os.getuid()
    count = 0
    for proc in psutil.process_iter(["uids", "num_threads"]):
        info = proc.info
        uids = info.get("uids")
        if uids is not None and uids.real == uid:
            count += info.get("num_threads") or 1
    _nproc_cache = (now, count)
    return count


def _capped(res: int, value: int) -> int:
    _, hard = resource.getrlimit(res)
    return value if hard == resource.RLIM_INFINITY else min(value, hard)


def _rlimits(policy: SandboxPolicy, extra_processes: int) -> list[tuple[int, int]]:
    limits: list[tuple[int, int]] = [(resource.RLIMIT_CORE, 0)]
    if policy.cpu_time_s:
        limits.append((resource.RLIMIT_CPU, _capped(resource.RLIMIT_CPU, policy.cpu_time_s)))
    if policy.address_space_bytes:
        limits.append((resource.RLIMIT_AS, _capped(resource.RLIMIT_AS, policy.address_space_bytes)))
    if policy.file_size_bytes:
        limits.append((resource.RLIMIT_FSIZE, _capped(resource.RLIMIT_FSIZE, policy.file_size_bytes)))
    if policy.max_processes and extra_processes >= 0:
        limits.append((resource.RLIMIT_NPROC,
                       _capped(resource.RLIMIT_NPROC, extra_processes + policy.max_processes)))
    return limits


def _preexec(limits: list[tuple[int, int]], cgroup: CommandCgroup | None) -> Callable[[], None]:
    setrlimit = resource.setrlimit

    def apply() -> None:  # runs in the child between fork and exec: syscalls only
        if cgroup is not None:
            try:
                cgroup.join()
            except OSError:
                pass
        for res, value in limits:
            setrlimit(res, (value, value))

    return apply


# ----------------------------------------------------------------------------- preparing a command
@dataclass(slots=True)
class PreparedCommand:
    argv: list[str]
    env: dict[str, str]
    preexec_fn: Callable[[], None]
    sandboxed: bool
    """True when it runs under bubblewrap."""
    cgroup: CommandCgroup | None = None
    limits: list[tuple[int, int]] = field(default_factory=list)

    def release(self) -> None:
        """After the command ended: remove its cgroup (now or later, once it is empty)."""
        if self.cgroup is not None:
            _cgroups.release(self.cgroup)
            self.cgroup = None


def _descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []


def _signal_all(procs: Iterable[psutil.Process], sig: int) -> None:
    for proc in procs:  # os.kill: psutil refuses when it cannot read a fresh child's identity
        with contextlib.suppress(OSError):
            os.kill(proc.pid, sig)


def _running(proc: psutil.Process) -> bool:
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


async def end_sandbox(proc: asyncio.subprocess.Process, grace_s: float) -> None:
    """Stop a command running under bubblewrap, and everything inside its namespaces.

    Killing the outer ``bwrap`` alone is not enough: during the few milliseconds of its
    set-up the namespace's init has no parent-death signal yet, and it would live on as an
    orphan with the command. So: freeze the outer bwrap (it starts nothing more), SIGTERM
    everything below it, wait up to ``grace_s``, then SIGKILL the namespace's init (the
    kernel kills every process of a pid namespace whose init dies) and the rest.
    """
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(proc.pid, signal.SIGSTOP)
        for _ in range(100):  # a signal is delivered asynchronously: wait until it has stopped
            try:
                if psutil.Process(proc.pid).status() in (psutil.STATUS_STOPPED, psutil.STATUS_ZOMBIE):
                    break
            except psutil.Error:
                break
            await asyncio.sleep(0.005)
    inside = _descendants(proc.pid)
    _signal_all(inside, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while inside and time.monotonic() < deadline:
        alive = [p for p in inside[1:] if _running(p)]
        if not alive:
            break
        await asyncio.sleep(0.05)
    _signal_all(inside, signal.SIGKILL)
    # the init reaps its namespace before it is gone (a process in the middle of a mount
    # operation can take a moment): wait for it, so the caller sees nothing left running
    deadline = time.monotonic() + 5.0
    while inside and _running(inside[0]) and time.monotonic() < deadline:
        _signal_all(inside[:1], signal.SIGKILL)
        await asyncio.sleep(0.02)
    # let the outer bwrap reap its child and exit by itself (no orphan for pid 1 to reap)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(proc.pid, signal.SIGCONT)
    try:
        await asyncio.wait_for(proc.wait(), timeout=1.0)
    except asyncio.TimeoutError:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(proc.pid, signal.SIGKILL)
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(proc.wait(), timeout=5.0)


async def prepare(command: str, cwd: str, policy: SandboxPolicy, env: dict[str, str],
                  shell: Sequence[str], *, attended: bool = False) -> PreparedCommand:
    """The argv, environment and child set-up that run ``command`` under ``policy``.

    ``attended``: a person approved this very command. Without bubblewrap (``mode="auto"``)
    only such a command runs; unattended ones are refused.

    Raises :class:`ToolError` (not a mistake of the model) when the command cannot run at
    all: the session's directory is gone, or bubblewrap is unusable and the command is
    unattended (``auto``) or the sandbox required (``required``).
    """
    root = os.path.realpath(cwd)
    if not os.path.isdir(root):
        raise ToolError(f"the session's directory {cwd} no longer exists; commands cannot run",
                        mistake=False)
    register_session_root(root)
    cgroup = None
    extra = -1
    if policy.max_processes:
        cgroup = await asyncio.to_thread(_cgroups.create, policy.max_processes)
        if os.getuid() != 0:
            extra = await asyncio.to_thread(_user_threads)
        elif cgroup is None:
            notices.say("processes", (
                "The app runs as root: the kernel does not apply RLIMIT_NPROC to root and no pids "
                f"cgroup could be made ({_cgroups.reason}), so the number of processes an agent's "
                "command may start is bounded only by its timeout."))
    limits = _rlimits(policy, extra)
    try:
        argv = [*shell, command]
        sandboxed = False
        if policy.mode is SandboxMode.OFF:
            notices.say("off", fallback_message("it is turned off in settings (sandbox.mode = off)",
                                                 "your choice, so commands follow the approval policy as set"))
        else:
            probe = await probe_bwrap(policy.network, bwrap=policy.bwrap or None)
            if probe.usable:
                argv = bwrap_argv(probe, policy, root, argv, home=env.get("HOME"))
                env = {k: v for k, v in env.items() if k not in ("XDG_RUNTIME_DIR", "DBUS_SESSION_BUS_ADDRESS")}
                env["TMPDIR"] = "/tmp"
                sandboxed = True
            elif policy.mode is SandboxMode.REQUIRED:
                notices.say("required", f"Agent commands are refused: the sandbox is required by settings "
                                        f"(sandbox.mode = required) but {probe.reason}.")
                raise ToolError(f"commands cannot run here: the sandbox is required but {probe.reason}",
                                mistake=False)
            elif not attended:
                notices.say("unattended", unattended_message(probe.reason))
                raise ToolError(f"this command was not run: commands are not confined here ({probe.reason}) "
                                "and nobody approved it", mistake=False)
            else:
                notices.say("fallback", fallback_message(
                    probe.reason, "each command runs only after a person approved it"))
    except BaseException:
        if cgroup is not None:
            _cgroups.release(cgroup)
        raise
    return PreparedCommand(argv, env, _preexec(limits, cgroup), sandboxed, cgroup, limits)


def forget_probes() -> None:
    """Probe again at the next command (after bubblewrap was installed, in tests)."""
    _probes.clear()
