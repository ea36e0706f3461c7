"""A pids cgroup per command, where the app may create one: a process-count bound for root.

``RLIMIT_NPROC`` does not apply to root (the kernel exempts uid 0), so a fork bomb run by an
app running as root would only be stopped by the command's timeout. Where a pids controller
is writable (cgroup v1 ``pids`` hierarchy or a cgroup v2 tree as root, or a delegated v2
subtree), each command gets ``<base>/cmd-<n>`` with ``pids.max``; the child joins it
before it execs (see :meth:`CommandCgroup.join`). Where none is writable,
:meth:`PidsCgroups.create` returns None and the caller relies on ``RLIMIT_NPROC``.

Directories are named after the app's pid (``workstation-<pid>``); ones left behind by a
dead app are removed when the next app finds them.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import logging
import os
import threading
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

PREFIX = "workstation-"


@dataclass(slots=True)
class CommandCgroup:
    """One command's cgroup; ``procs_fd`` is open for writing so the child can join it."""

    path: Path
    procs_fd: int

    def join(self) -> None:
        """Move the calling process into the cgroup (called in the child before exec)."""
        os.write(self.procs_fd, str(os.getpid()).encode())

    def close_fd(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.procs_fd)

    def try_remove(self) -> bool:
        """Remove the cgroup once its processes are gone; False while some remain."""
        try:
            os.rmdir(self.path)
        except FileNotFoundError:
            return True
        except OSError:
            return False
        return True


def _hierarchies() -> list[tuple[str, Path]]:
    """``(kind, directory of this process's cgroup)`` for the pids v1 and the v2 hierarchy."""
    try:
        own = Path("/proc/self/cgroup").read_text().splitlines()
        mounts = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return []
    paths: dict[str, str] = {}
    for line in own:
        hid, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if hid == "0" and controllers == "":
            paths["v2"] = path
        elif "pids" in controllers.split(","):
            paths["v1"] = path
    found: list[tuple[str, Path]] = []
    for line in mounts:
        left, _, right = line.partition(" - ")
        fields, rfields = left.split(), right.split()
        if len(fields) < 5 or len(rfields) < 3:
            continue
        root, mountpoint, fstype, superopts = fields[3], fields[4], rfields[0], rfields[2]
        if fstype == "cgroup" and "pids" in superopts.split(","):
            kind = "v1"
        elif fstype == "cgroup2":
            kind = "v2"
        else:
            continue
        path = paths.get(kind)
        if path is None:
            continue
        rel = path[len(root):] if root != "/" and path.startswith(root) else path
        found.append((kind, Path(mountpoint) / rel.lstrip("/")))
    found.sort(key=lambda kp: kp[0])  # v1 first: its pids controller needs no enabling
    return found


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _sweep(parent: Path) -> None:
    """Remove cgroups left by apps that are gone."""
    with contextlib.suppress(OSError):
        for entry in parent.iterdir():
            if not entry.name.startswith(PREFIX) or not entry.is_dir():
                continue
            pid = entry.name[len(PREFIX):]
            if pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)):
                for child in entry.iterdir():
                    if child.is_dir():
                        with contextlib.suppress(OSError):
                            child.rmdir()
                with contextlib.suppress(OSError):
                    entry.rmdir()


class PidsCgroups:
    """Finds a writable pids controller once; hands out per-command cgroups."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._base: Path | None = None
        self._probed = False
        self._reason = ""
        self._ids = itertools.count(1)
        self._leftovers: list[CommandCgroup] = []

    @property
    def reason(self) -> str:
        """Why no cgroup can be made (empty when one can)."""
        return self._reason

    def available(self) -> bool:
        with self._lock:
            self._probe()
            return self._base is not None

    def _probe(self) -> None:
        if self._probed:
            return
        self._probed = True
        candidates = _hierarchies()
        if not candidates:
            self._reason = "no cgroup hierarchy with a pids controller is mounted"
            return
        tried: list[str] = []
        for kind, own in candidates:
            # the app's own cgroup first, then the hierarchy's top (writable for root)
            top = _top(own)
            for parent in dict.fromkeys(p for p in (own, top) if p is not None):
                base = self._try_base(kind, parent)
                if base is not None:
                    self._base = base
                    atexit.register(self.close)
                    return
                tried.append(str(parent))
        self._reason = f"no writable pids controller (tried {', '.join(tried)})"

    @staticmethod
    def _try_base(kind: str, parent: Path) -> Path | None:
        base = parent / f"{PREFIX}{os.getpid()}"
        try:
            _sweep(parent)
            base.mkdir(exist_ok=True)
            if kind == "v2":
                with contextlib.suppress(OSError):
                    (base / "cgroup.subtree_control").write_text("+pids")
            probe = base / "probe"
            probe.mkdir(exist_ok=True)
            try:
                ok = (probe / "pids.max").exists()
                if ok:
                    (probe / "pids.max").write_text("max")
            finally:
                probe.rmdir()
        except OSError as exc:
            log.debug("no pids cgroup under %s: %s", parent, exc)
            with contextlib.suppress(OSError):
                base.rmdir()
            return None
        if not ok:
            with contextlib.suppress(OSError):
                base.rmdir()
            return None
        return base

    def create(self, max_pids: int) -> CommandCgroup | None:
        """A fresh cgroup allowing ``max_pids`` tasks, or None where none can be made."""
        with self._lock:
            self._probe()
            base = self._base
            self._leftovers = [cg for cg in self._leftovers if not cg.try_remove()]
        if base is None:
            return None
        path = base / f"cmd-{next(self._ids)}"
        try:
            path.mkdir()
            (path / "pids.max").write_text(str(max(1, max_pids)))
            fd = os.open(path / "cgroup.procs", os.O_WRONLY | os.O_CLOEXEC)
        except OSError as exc:
            log.warning("cannot create a pids cgroup at %s: %s", path, exc)
            with contextlib.suppress(OSError):
                path.rmdir()
            return None
        return CommandCgroup(path, fd)

    def release(self, cgroup: CommandCgroup) -> None:
        """Close and remove (now, or at a later call once its last processes are reaped)."""
        cgroup.close_fd()
        if not cgroup.try_remove():
            with self._lock:
                self._leftovers.append(cgroup)

    def close(self) -> None:
        with self._lock:
            for cg in self._leftovers:
                cg.try_remove()
            self._leftovers.clear()
            if self._base is not None:
                with contextlib.suppress(OSError):
                    self._base.rmdir()


def _top(own: Path) -> Path | None:
    """The hierarchy's mount point (``/sys/fs/cgroup/pids`` or ``/sys/fs/cgroup``)."""
    parts = own.parts
    for i in range(len(parts), 0, -1):
        candidate = Path(*parts[:i])
        if (candidate / "cgroup.procs").exists() and not (candidate.parent / "cgroup.procs").exists():
            return candidate
    return None
