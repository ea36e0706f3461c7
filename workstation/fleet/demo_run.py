"""Turn a demo manifest into fleet sessions (Qt-free; used by the window and headless runs).

``prepare_demo`` reads the manifest, plans N sessions and creates the sample repositories
in a fresh folder under ``<data_dir>/demo/``; ``demo_specs`` gives one ``SessionSpec`` per
planned session, ready for ``Fleet.create_session``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from workstation.fleet.demo_manifest import DemoManifest, DemoSession, load_manifest, plan_sessions, prepare_repositories
from workstation.fleet.session import SessionSpec


@dataclass(frozen=True, slots=True)
class DemoPlan:
    manifest: DemoManifest
    sessions: tuple[DemoSession, ...]
    repos: dict[str, Path]
    workdir: Path


def prepare_demo(data_dir: Path, *, sessions: int | None = None, manifest: str | Path | None = None,
                 workdir: Path | None = None) -> DemoPlan:
    """Blocking (git): run it off the event loop."""
    loaded = load_manifest(manifest)
    planned = plan_sessions(loaded, sessions)
    where = workdir or Path(data_dir) / "demo" / time.strftime("%Y%m%d-%H%M%S")
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
