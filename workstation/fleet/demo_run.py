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

A demo session the user worked in is not the demo's any more: one with a message they sent,
an approval they answered, a commit on its branch, a file they changed, a new name, a ready
mark … (``user_work.py`` says what counts, and why) is kept with its worktree, branch and
transcript, and adopted: its id leaves its run's list before anything is removed, so no later
run takes it for the demo's again. An earlier folder no session uses is deleted only when
none of its sample repositories holds work of the user's either (a session merged into its
``main`` or a bug's branch and then removed, a commit made there by hand): such a folder is
left where it is, with a ``YOURS.txt`` saying why, and no later run looks at it again. The
run says what it kept (``DemoStart.notice``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import shutil
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from workstation.core.errors import UserError
from workstation.fleet.demo_manifest import DemoManifest, DemoSession, load_manifest, plan_sessions, prepare_repositories
from workstation.fleet.session import SessionRecord, SessionSpec
from workstation.fleet.user_work import repository_work, user_work

if TYPE_CHECKING:
    from workstation.fleet.gitproc import GitRunner
    from workstation.fleet.service import Fleet

log = logging.getLogger(__name__)

_NAMES_SHOWN = 6
MADE_FILE = "sessions.txt"
"""In a demo run's folder: the ids of the sessions that run made, one a line."""
KEPT_FILE = "YOURS.txt"
"""In an earlier run's folder kept for the user's work in it: why; such a folder is no run's."""
_RUN_FOLDER_RE = re.compile(r"^\d{8}-\d{6}(-\d+)?$")
"""A run's folder name (its start time) where it has no list yet (made before the list)."""


@dataclass(frozen=True, slots=True)
class DemoPlan:
    manifest: DemoManifest
    sessions: tuple[DemoSession, ...]
    repos: dict[str, Path]
    workdir: Path


@dataclass(frozen=True, slots=True)
class KeptSession:
    """A session an earlier demo run made that the user worked in: kept, and theirs now."""

    session_id: str
    name: str
    reasons: tuple[str, ...]
    """What of it is the user's ("you sent it 1 message", …), from ``user_work``."""


@dataclass(frozen=True, slots=True)
class KeptFolder:
    """An earlier run's folder no session uses that holds work of the user's: left in place."""

    path: Path
    reasons: tuple[str, ...]
    """Per sample repository: ``"datekit: 1 commit the sample did not make"``."""


@dataclass(frozen=True, slots=True)
class DemoStart:
    """What ``start_demo`` did: its plan, the sessions it made (in plan order), how many an
    earlier run had made that it removed first, and those of the earlier run it kept."""

    plan: DemoPlan
    session_ids: tuple[str, ...]
    replaced: int
    kept: tuple[KeptSession, ...] = ()
    kept_folders: tuple[KeptFolder, ...] = ()

    def details(self) -> str:
        """Each kept session and what of it is the user's, one per line (the notice's tooltip)."""
        return "\n".join(f"{k.name}: {'; '.join(k.reasons)}" for k in self.kept)

    def notice(self) -> str:
        """One line for the terminal and the window's status bar; empty when no earlier run
        left anything."""
        if not self.kept:
            line = f"removed the {self.replaced} session(s) an earlier demo run made" if self.replaced else ""
        else:
            names = ", ".join(k.name for k in self.kept[:_NAMES_SHOWN])
            names += " …" if len(self.kept) > _NAMES_SHOWN else ""
            line = f"kept {len(self.kept)} demo session(s) you worked in, as yours now ({names})"
            line += f"; replaced the {self.replaced} other(s) an earlier demo run made" if self.replaced else ""
        if self.kept_folders:
            where = ", ".join(str(f.path) for f in self.kept_folders)
            line += ("; " if line else "") + f"left {where} in place: work of yours is there ({KEPT_FILE} says what)"
        return line


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
    """Sort the sessions earlier demo runs made into those the user worked in — kept and
    adopted — and the rest, removed first so that those the fleet resumed at its start stop
    at once; then prepare the plan, delete the earlier folders no session uses any more, and
    create and start the plan's sessions, each written down in the plan's folder as soon as
    it exists. A bad manifest or count fails before anything is removed, and so does a store
    that cannot be read (what the user did is not known then)."""
    loaded = await asyncio.to_thread(load_manifest, manifest)
    plan_sessions(loaded, sessions)
    folders = demo_sessions_by_folder(fleet.book.records(), data_dir, loaded)
    earlier = [sid for ids in folders.values() for sid in ids]
    kept = await keep_worked_in(fleet, earlier)
    adopted = {k.session_id for k in kept}
    await asyncio.to_thread(adopt, folders, adopted)  # before anything goes: a crash keeps them kept
    for k in kept:
        log.info("demo: kept %s, which you worked in: %s", k.name, "; ".join(k.reasons))
    replaced = [sid for sid in earlier if sid not in adopted]
    if replaced:
        log.info("demo: removing the %d session(s) an earlier demo run made", len(replaced))
        await fleet.remove_many(replaced)
    plan = await asyncio.to_thread(prepare_demo, data_dir, sessions=sessions, manifest=manifest)
    unused = await asyncio.to_thread(unused_demo_folders, data_dir, fleet.book.records(), keep=plan.workdir)
    spared = await keep_folders_worked_in(fleet.git, unused)
    await asyncio.to_thread(remove_unused_demo_folders, data_dir, fleet.book.records(), keep=plan.workdir,
                            spare=[f.path for f in spared])
    made: list[str] = []
    for spec in demo_specs(plan, headless=headless):
        summary = await fleet.create_session(spec, free_names=True)  # a name the user took: a free one
        made.append(summary.session_id)
        await asyncio.to_thread(_write_made, plan.workdir, summary.session_id)
    for session_id in made:
        await fleet.start_session(session_id)
    return DemoStart(plan=plan, session_ids=tuple(made), replaced=len(replaced), kept=tuple(kept),
                     kept_folders=tuple(spared))


async def keep_worked_in(fleet: Fleet, session_ids: Sequence[str]) -> list[KeptSession]:
    """The sessions of ``session_ids`` the user worked in (``user_work``), in that order.
    Those working now (the window's fleet resumes sessions at its start) are paused first, so
    their files hold still while they are read; the kept ones among them continue after."""
    working = [sid for sid in session_ids if fleet.book.rec(sid).state.is_working]
    for sid in working:
        await fleet.pause(sid)
    try:
        found = await asyncio.gather(*(user_work(fleet.store, fleet.git, fleet.book.rec(sid)) for sid in session_ids))
    except Exception:  # the store cannot be read: nothing will be removed, so all of them go on
        for sid in working:
            await _go_on(fleet, sid)
        raise
    kept = [KeptSession(sid, fleet.book.rec(sid).name, reasons)
            for sid, reasons in zip(session_ids, found, strict=True) if reasons]
    for k in kept:
        if k.session_id in working:
            await _go_on(fleet, k.session_id)
    return kept


async def _go_on(fleet: Fleet, session_id: str) -> None:
    try:
        await fleet.start_session(session_id)
    except UserError as exc:  # it stays paused, as the user can see
        log.warning("demo: %s stays paused: %s", fleet.book.rec(session_id).name, exc)


def adopt(folders: dict[Path, list[str]], kept: set[str]) -> None:
    """Take the kept sessions off their runs' lists, so no later run takes them for the
    demo's: a list is rewritten without them, a folder from before the lists gets one naming
    the demo sessions it still has. Blocking: run it off the event loop."""
    for folder, ids in folders.items():
        if not kept.intersection(ids):
            continue
        listed = folder / MADE_FILE
        try:
            lines = listed.read_text(encoding="utf-8").splitlines() if listed.is_file() else ids
            rest = [line.strip() for line in lines if line.strip() and line.strip() not in kept]
            fresh = listed.with_name(MADE_FILE + ".new")
            fresh.write_text("".join(f"{sid}\n" for sid in rest), encoding="utf-8")
            os.replace(fresh, listed)
        except OSError as exc:  # before anything is removed: the run stops here, nothing lost
            raise UserError(f"cannot write the demo's list {listed} ({exc.strerror or exc}); no session was "
                            "removed", hint="make that folder writable and run the demo again") from exc


def earlier_demo_sessions(records: Iterable[SessionRecord], data_dir: Path, manifest: DemoManifest, *,
                          keep: Path | None = None) -> list[str]:
    """Ids of the sessions that earlier demo runs in ``data_dir`` made (never those of the
    run whose folder is ``keep``)."""
    return [sid for ids in demo_sessions_by_folder(records, data_dir, manifest, keep=keep).values() for sid in ids]


def demo_sessions_by_folder(records: Iterable[SessionRecord], data_dir: Path, manifest: DemoManifest, *,
                            keep: Path | None = None) -> dict[Path, list[str]]:
    """Each earlier run's folder → the ids of the sessions it made that still exist."""
    records = list(records)
    known = {r.session_id for r in records}
    prompts = {t.prompt for t in manifest.tasks}
    seen: set[str] = set()
    found: dict[Path, list[str]] = {}
    for folder in _run_folders(data_dir):
        if keep is not None and folder == keep.resolve():
            continue
        listed = folder / MADE_FILE
        if listed.is_file():
            ids = [line.strip() for line in listed.read_text(encoding="utf-8").splitlines()]
            mine = [i for i in dict.fromkeys(ids) if i in known and i not in seen]
        else:  # a folder made before the list: its sample repositories' sessions on the manifest's tasks
            mine = [r.session_id for r in records
                    if r.session_id not in seen and _inside(r.repo_path or r.spec.repo, folder)
                    and r.spec.task in prompts]
        if mine:
            found[folder] = mine
            seen.update(mine)
    return found


async def keep_folders_worked_in(git: GitRunner, folders: Sequence[Path]) -> list[KeptFolder]:
    """Of ``folders`` (earlier runs' folders no session uses), those where a sample repository
    holds work of the user's (``repository_work``); each gets a ``YOURS.txt`` saying why, which
    makes it no run's folder any more, so it is neither deleted nor asked about again."""
    kept: list[KeptFolder] = []
    for folder in folders:
        repos = await asyncio.to_thread(lambda f=folder: sorted(p for p in f.iterdir() if (p / ".git").exists()))
        reasons = [f"{repo.name}: {'; '.join(found)}" for repo in repos if (found := await repository_work(git, repo))]
        if reasons:
            text = ("workstation demo left this folder in place: work of yours is in its sample repositories.\n"
                    + "".join(f"- {r}\n" for r in reasons) + "Delete it yourself once you no longer need it.\n")
            try:
                await asyncio.to_thread((folder / KEPT_FILE).write_text, text, "utf-8")
            except OSError as exc:  # it stays all the same (``spare``); the next run asks again
                log.warning("demo: cannot write %s: %s", folder / KEPT_FILE, exc)
            log.info("demo: left %s in place: %s", folder, "; ".join(reasons))
            kept.append(KeptFolder(folder, tuple(reasons)))
    return kept


def unused_demo_folders(data_dir: Path, records: Iterable[SessionRecord], *, keep: Path | None = None) -> list[Path]:
    """The earlier runs' folders (sample repositories) that no session uses."""
    used = [r.repo_path or r.spec.repo for r in records]
    return [folder for folder in _run_folders(data_dir)
            if (keep is None or folder != keep.resolve()) and not any(_inside(path, folder) for path in used if path)]


def remove_unused_demo_folders(data_dir: Path, records: Iterable[SessionRecord], *,
                               keep: Path | None = None, spare: Iterable[Path] = ()) -> list[Path]:
    """Delete the earlier demo folders (sample repositories) that no session uses, but those
    in ``spare``; returns them. Blocking: run it off the event loop."""
    spared = set(spare)
    removed: list[Path] = []
    for folder in unused_demo_folders(data_dir, records, keep=keep):
        if folder in spared:
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
                  if p.is_dir() and not p.is_symlink() and not (p / KEPT_FILE).exists()
                  and (_RUN_FOLDER_RE.match(p.name) or (p / MADE_FILE).is_file()))


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
