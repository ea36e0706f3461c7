"""Two real vLLM CPU engines serve one fleet (the engine host's replicas, bound to cores of
their own); one is killed mid-run and its sessions move to the other, with no turn lost and
none done twice (marked ``engine``, ``slow``)."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

import pytest

from tests.fleet.fakes import Script, streaming_factory
from tests.helpers.prerequisites import installed_engine, missing, prepared_model
from workstation.core import agent_events as ev
from workstation.core.fleet_events import SessionMoved
from workstation.core.replicas import CPU_BIND_ENV, plan_replicas
from workstation.core.session_state import SessionState as S
from workstation.engine.host import EngineHost, Launchers
from workstation.fleet.session import SessionSpec
from workstation.services import Services

pytestmark = [pytest.mark.engine, pytest.mark.slow]


async def test_two_cpu_engines_serve_one_fleet_and_killing_one_moves_its_sessions(
        tmp_path: Path, git_repo: Path) -> None:
    from workstation.config import load_settings

    settings = load_settings()
    installed_engine(settings)
    prepared_model(settings, "tiny")
    if (os.cpu_count() or 1) < 2:
        missing("two CPU engines need two cores")
    settings = settings.model_copy(update={"engine": settings.engine.model_copy(update={"kv_cache_gib": 0.5})})
    made_by = Launchers.from_settings(settings, "tiny")

    def launchers(profile=None, env=None, *, log_subdir: str = "", **kw):  # type: ignore[no-untyped-def]
        return made_by(profile, env, log_dir=tmp_path / "logs" / (log_subdir or "engine"), **kw)

    host = EngineHost(launchers=launchers, replicas=plan_replicas("cpu", replicas=2, cpu_count=2))
    services = Services(settings, engine=host)
    try:
        await host.start(progress=lambda m: print(m, flush=True))
        (replica,) = host.replicas
        assert host.launcher is not None and host.launcher.extra_env[CPU_BIND_ENV] == "0"
        assert replica.extra_env[CPU_BIND_ENV] == "1"
        names = [e.name for e in host.endpoints()]
        assert names == ["managed:tiny", "managed:tiny@cpu1"]

        script = Script(steps=6, tool_s=0.4, tokens_per_turn=6)
        fleet = services.fleet(data_dir=tmp_path / "data", max_generating=8,
                               agent_factory=streaming_factory(script, services.http))
        moved: list[SessionMoved] = []
        fleet.changed.connect(lambda e: moved.append(e) if isinstance(e, SessionMoved) else None)
        turns: dict[str, list[int]] = {}
        fleet.agent_event.connect(lambda e: turns.setdefault(e.session_id, []).append(e.event.turn)
                                  if isinstance(e.event, ev.UsageReported) else None)
        await fleet.start()
        made = await fleet.create_sessions(SessionSpec(task="Say something.", repo=str(git_repo), headless=True),
                                           4, start=True)
        on = {s.session_id: s.endpoint_name for s in made}
        assert sorted(on.values()) == sorted(names * 2)  # spread over both engines

        victims = [sid for sid, name in on.items() if name == replica.name]
        deadline = time.monotonic() + 300
        while min(len(turns.get(sid, ())) for sid in victims) < 2:  # a couple of turns in
            assert time.monotonic() < deadline, turns
            await asyncio.sleep(0.1)
        assert replica.pid is not None
        os.killpg(replica.pid, signal.SIGKILL)  # the engine dies; nothing of it answers any more

        await asyncio.wait_for(fleet.wait_settled(), 600)
        assert {m.session_id for m in moved} == set(victims)
        for s in fleet.sessions():
            assert s.state is S.DONE, (s.name, s.state, s.error)
            assert s.endpoint_name == "managed:tiny"
            stored = [e.turn for _, e in await fleet.transcript(s.session_id) if isinstance(e, ev.UsageReported)]
            assert stored == list(range(1, 8)), (s.name, stored)  # every turn once: none lost, none twice
            for step in range(6):  # every tool step ran once
                assert (Path(s.worktree_path) / f"{s.name}-{step}.txt").read_text() == f"{s.name}\n"
        assert fleet.router.is_drained(replica.name)
    finally:
        await services.aclose()
