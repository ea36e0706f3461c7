"""Capture a traffic shape from a real fleet run: agent sessions on the demo's sample
repositories, headless, against an endpoint, for a bounded time.

The fleet (made by the app's service factory, passed in as ``fleets``) runs in its own folder
(store and worktrees under ``workdir``), so a capture never touches the user's sessions; the
recorder listens to ``Fleet.request_observers`` (one record per model request, with its ``n``). A session that
stops before the time is up (done, gave up, asks a question — a weak model does so within
seconds) gets a follow-up, as a user at the keyboard would give, so the capture sees long,
growing histories (``keep_busy``). At the end every session is paused (an in-flight turn is
dropped) and the fleet closed.

The app's own Tuning panel records the user's live fleet the same way
(``TrafficRecorder.attach_fleet``); this is the headless path for the CLI and benchmarks.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from workstation.core.endpoints import Endpoint
from workstation.core.errors import UserError
from workstation.core.session_state import SessionState
from workstation.core.traffic import TrafficShape
from workstation.fleet import Fleet, SessionSpec
from workstation.fleet.demo_manifest import load_manifest, plan_sessions, prepare_repositories
from workstation.tuning.capture import TrafficRecorder

log = logging.getLogger(__name__)

FleetMaker = Callable[..., Fleet]
"""``make(endpoints=…, data_dir=…, max_generating=…, resume_on_start=…)``: a fleet from the
app's one service factory (``Services.fleet``), so its agents run under the settings'
sandbox policy like every other fleet's."""

FOLLOW_UP = "Check your work: run the tests again, fix anything that still fails, and finish the task."
async def capture_fleet_shape(
    http: httpx.AsyncClient,
    endpoint: Endpoint,
    *,
    name: str,
    sessions: int,
    duration_s: float,
    workdir: Path,
    max_generating: int | None = None,
    keep_busy: bool = True,
    say: Callable[[str], None] | None = None,
    fleets: FleetMaker,
) -> TrafficShape:
    """``fleets`` makes the capture's fleet (``Services.fleet``)."""
    say = say or (lambda _m: None)
    manifest = load_manifest()
    planned = plan_sessions(manifest, sessions)
    repos = await asyncio.to_thread(prepare_repositories, manifest, workdir / "repos",
                                    only={p.repository.name for p in planned})
    recorder = TrafficRecorder(name, http=http, endpoint=endpoint)
    fleet = fleets(endpoints=[endpoint], data_dir=workdir / "fleet", max_generating=max_generating or sessions,
                   resume_on_start=False)
    await fleet.start()
    try:
        ids: list[str] = []
        for p in planned:
            # a task the manifest auto-approves approves everything, as in the demo (its commands
            # run in the settings' sandbox): with commands refused, a guided session cannot run
            # its tests, finishes "untested" at once, and did so again on every follow-up
            spec = SessionSpec(task=p.task.prompt, repo=str(repos[p.repository.name]), name=p.name,
                               mode=p.task.mode.value, headless=True,
                               auto_approve=("all",) if p.task.auto_approve else ("read", "edit"))
            made = await fleet.create_session(spec)
            ids.append(made.session_id)
        recorder.attach_fleet(fleet)
        await recorder.start()
        say(f"capturing {len(ids)} agent sessions for up to {duration_s:.0f} s against {endpoint.base_url}")
        t0 = time.monotonic()
        for sid in ids:
            await fleet.start_session(sid)
        nudges = 0
        while time.monotonic() - t0 < duration_s:
            await asyncio.sleep(1.0)
            if not keep_busy:
                if all(not s.state.is_active for s in fleet.sessions()):
                    break
                continue
            for s in fleet.sessions():
                # a weak model stops early (done, gave up, asks): a user would follow up
                if s.state.is_finished or s.state is SessionState.NEEDS_INPUT:
                    with contextlib.suppress(UserError):
                        await fleet.reply(s.session_id, FOLLOW_UP)
                        nudges += 1
        say(f"  {len(recorder.records)} model requests recorded in {time.monotonic() - t0:.0f} s "
            f"({nudges} follow-ups sent to sessions that had stopped)")
        await fleet.pause_all()
        await recorder.stop()
    finally:
        recorder.detach_all()
        await fleet.aclose()
    return recorder.shape()  # its common prefix estimated from what it recorded
