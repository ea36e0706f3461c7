"""Turn a demo manifest into fleet sessions (Qt-free; used by the window and headless runs).

``prepare_demo`` reads the manifest, plans N sessions and creates the sample repositories
in a fresh folder under ``<data_dir>/demo/``; ``demo_specs`` gives one ``SessionSpec`` per
planned session, ready for ``Fleet.create_session``; ``start_demo`` does all of it on a
fleet and starts the sessions.

Running the demo again replaces the set an earlier run made instead of adding to it (three
runs of the quick start had left 96 sessions in the window, "fix-…-3" on page 3/3): a demo
is a showcase of agents working, and sessions that finished on throwaway sample repositories
show nothing on a second run. Every run writes the ids of the sessions it made into its
folder (``sessions.txt``); the next run removes those sessions (worktrees and branches too)
and then the earlier folders that no remaining session uses. Sessions the user made are
never touched, even on a demo's sample repository: only what a demo run wrote down is
removed (folders from before the list existed: the sessions on their sample repositories
whose task is one of the manifest's, word for word).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import shutil
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from workstation.fleet.demo_manifest import DemoManifest, DemoSession, load_manifest, plan_sessions, prepare_repositories
from workstation.fleet.session import SessionRecord, SessionSpec

if TYPE_CHECKING:
    from workstation.fleet.service import Fleet

log = logging.getLogger(__name__)

MADE_FILE = "sessions.txt"
"""In a demo run's folder: the ids of the sessions that run made, one a line."""
_RUN_FOLDER_RE = re.compile(r"^\d{8}-\d{6}(-\d+)?$")
"""A run's folder name (its start time) where it has no list yet (made before the list)."""


@dataclass(frozen=True, slots=True)
class DemoPlan:
    manifest: DemoManifest
    sessions: tuple[DemoSession, ...]
    repos: dict[str, Path]
    workdir: Path


@dataclass(frozen=True, slots=True)
class DemoStart:
    """What ``start_demo`` did: its plan, the sessions it made (in plan order) and how many
    an earlier run had made that it removed first."""

    plan: DemoPlan
    session_ids: tuple[str, ...]
    replaced: int


def demo_root(data_dir: Path) -> Path:
    return Path(data_dir) / "demo"


def prepare_demo(data_dir: Path, *, sessions: int | None = None, manifest: str | Path | None = None,
                 workdir: Path | None = None) -> DemoPlan:
    """Blocking (git): run it off the event loop."""
    loaded = load_manifest(manifest)
    planned = plan_sessions(loaded, sessions)
    where = workdir or _fresh_folder(demo_root(data_dir), time.strftime("%Y%m%d-%H%M%S"))
    where.mkdir(parents=True, exist_ok=True)
    repos = prepare_repositories(loaded, where, only={s.repository.name for s in planned})
    return DemoPlan(manifest=loaded, sessions=planned, repos=repos, workdir=where)


def demo_specs(plan: DemoPlan, *, headless: bool) -> list[SessionSpec]:
    return [
        SessionSpec(
            task=s.task.prompt,
            repo=str(plan.repos[s.repository.name]),
            name=s.name,
            base_branch=s.task.base_branch,
            mode=s.task.mode.value,
            auto_approve=("all",) if s.task.auto_approve else ("read",),
            headless=headless,
        )
        for s in plan.sessions
    ]


async def start_demo(fleet: Fleet, data_dir: Path, *, sessions: int | None = None,
                     manifest: str | Path | None = None, headless: bool) -> DemoStart:
    """Remove the sessions earlier demo runs made — first, so that those the fleet resumed
    at its start stop at once — then prepare the plan, delete the earlier folders no session
    uses any more, and create and start the plan's sessions, each written down in the plan's
    folder as soon as it exists. A bad manifest or count fails before anything is removed."""
    loaded = await asyncio.to_thread(load_manifest, manifest)
    plan_sessions(loaded, sessions)
    earlier = earlier_demo_sessions(fleet.book.records(), data_dir, loaded)
    if earlier:
        log.info("demo: removing the %d session(s) an earlier demo run made", len(earlier))
        await fleet.remove_many(earlier)
    plan = await asyncio.to_thread(prepare_demo, data_dir, sessions=sessions, manifest=manifest)
    await asyncio.to_thread(remove_unused_demo_folders, data_dir, fleet.book.records(), keep=plan.workdir)
    made: list[str] = []
    for spec in demo_specs(plan, headless=headless):
        summary = await fleet.create_session(spec, free_names=True)  # a name the user took: a free one
        made.append(summary.session_id)
        await asyncio.to_thread(_write_made, plan.workdir, summary.session_id)
    for session_id in made:
        await fleet.start_session(session_id)
    return DemoStart(plan=plan, session_ids=tuple(made), replaced=len(earlier))


def earlier_demo_sessions(records: Iterable[SessionRecord], data_dir: Path, manifest: DemoManifest, *,
                          keep: Path | None = None) -> list[str]:
    """Ids of the sessions that earlier demo runs in ``data_dir`` made (never those of the
    run whose folder is ``keep``)."""
    records = list(records)
    known = {r.session_id for r in records}
    prompts = {t.prompt for t in manifest.tasks}
    found: list[str] = []
    for folder in _run_folders(data_dir):
        if keep is not None and folder == keep.resolve():
            continue
        listed = folder / MADE_FILE
        if listed.is_file():
            ids = [line.strip() for line in listed.read_text(encoding="utf-8").splitlines()]
            found.extend(i for i in ids if i in known and i not in found)
        else:  # a folder made before the list: its sample repositories' sessions on the manifest's tasks
            found.extend(r.session_id for r in records
                         if r.session_id not in found and _inside(r.repo_path or r.spec.repo, folder)
                         and r.spec.task in prompts)
    return found


def remove_unused_demo_folders(data_dir: Path, records: Iterable[SessionRecord], *,
                               keep: Path | None = None) -> list[Path]:
    """Delete the earlier demo folders (sample repositories) that no session uses; returns
    them. Blocking: run it off the event loop."""
    used = [r.repo_path or r.spec.repo for r in records]
    removed: list[Path] = []
    for folder in _run_folders(data_dir):
        if keep is not None and folder == keep.resolve():
            continue
        if any(_inside(path, folder) for path in used if path):
            continue
        shutil.rmtree(folder, ignore_errors=True)
        removed.append(folder)
    if removed:  # the removed sessions' worktrees are gone; so are the folders that held them
        for holder in (Path(data_dir) / "worktrees").glob("*"):
            with contextlib.suppress(OSError):  # one in use is not empty: it stays
                holder.rmdir()
    return removed


def _run_folders(data_dir: Path) -> list[Path]:
    root = demo_root(data_dir)
    if not root.is_dir():
        return []
    return sorted(p.resolve() for p in root.iterdir()
                  if p.is_dir() and not p.is_symlink() and (_RUN_FOLDER_RE.match(p.name) or (p / MADE_FILE).is_file()))


def _fresh_folder(root: Path, stamp: str) -> Path:
    """``root/stamp``, or ``stamp-2``, ``-3`` … where a run of the same second made it."""
    where, n = root / stamp, 1
    while where.exists():
        n += 1
        where = root / f"{stamp}-{n}"
    return where


def _inside(path: str, folder: Path) -> bool:
    try:
        return Path(path).resolve().is_relative_to(folder)
    except (OSError, ValueError):
        return False


def _write_made(workdir: Path, session_id: str) -> None:
    with (workdir / MADE_FILE).open("a", encoding="utf-8") as out:
        out.write(session_id + "\n")
