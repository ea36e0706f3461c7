"""The window's real session path for the UI benchmarks (``ui_ingest.py``, ``record_bench.py``).

N fleet sessions, made by the app's service factory, with real agents against the
benchmark's token source (an OpenAI-compatible server that streams text, one token per
event, until its deadline): each agent's first model turn streams for the whole run, and
the tokens reach the panes through the fleet's events and the bridge, as in the app.
Worktrees of one small git repository under a temporary folder; nothing of the user's is
touched. Not a benchmark itself.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

def make_repo(root: Path) -> Path:
    from workstation.fleet.sample_repos import scratch_repository

    return scratch_repository(root / "repo", {
        "src/app.py": "def add(a, b):\n    return a + b\n",
        "tests/test_app.py": "from src.app import add\n\n\ndef test_add():\n    assert add(1, 2) == 3\n",
    }, message="start")


@dataclass
class FleetWindow:
    services: Any
    fleet: Any
    bridge: Any
    workdir: Path

    async def aclose(self) -> None:
        await self.services.close_sessions()
        self.bridge.close()
        await self.services.aclose()


async def wait_streaming(window: Any, timeout_s: float) -> tuple[int, float]:
    """Wait until every pane has received streamed text (each session's model turn streams),
    at most ``timeout_s``; (panes streaming, seconds waited). A measuring window that opens
    while sessions are still being admitted and checkpointed would count their start-up as
    tokens not delivered."""
    import asyncio
    import time

    docs = [pane.doc for pane in window.panes.values()]
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s and not all(d.tokens_flushed for d in docs):
        await asyncio.sleep(0.1)
    return sum(1 for d in docs if d.tokens_flushed), time.monotonic() - t0


async def open_fleet_window(window: Any, settings: Any, port: int, sessions: int, *,
                            workdir: Path | None = None) -> FleetWindow:
    """``sessions`` running agent sessions in ``window``, streaming from the source at ``port``."""
    from workstation.core.endpoints import Endpoint
    from workstation.fleet.session import SessionSpec
    from workstation.services import Services
    from workstation.ui.bridge import FleetBridge
    from workstation.ui.fleet_backend import FleetCommands

    workdir = workdir or Path(tempfile.mkdtemp(prefix="ws-uibench-"))
    repo = make_repo(workdir)
    services = Services(settings)
    endpoint = Endpoint(base_url=f"http://127.0.0.1:{port}", api_key="bench", model="bench",
                        name="bench-source", native_tools=True)
    # the source answers every request with a stream until its deadline: no priming request,
    # and a context window given (it serves no /v1/models)
    factory = services.agent_factory(context_window_tokens=1_000_000, prime=False)
    fleet = services.fleet(endpoints=[endpoint], data_dir=workdir / "data", agent_factory=factory,
                           max_generating=sessions, resume_on_start=False)
    bridge = FleetBridge(fleet, window)
    window.attach_bridge(bridge)
    window.commands = FleetCommands(fleet)
    await fleet.start()
    await bridge.load_existing()
    spec = SessionSpec(task="Fix the flaky test", repo=str(repo), name="session", auto_approve=("read",),
                       headless=True)
    made = await fleet.create_sessions(spec, sessions)
    for summary in made:
        await fleet.start_session(summary.session_id)
    return FleetWindow(services, fleet, bridge, workdir)
