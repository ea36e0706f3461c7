"""Dev servers with the real sandbox: each session's server on its own ports, reached from
the host through the port bridge while it has no network of its own; stopped from the
fleet and with its session; a server that exits, a taken port, ``workstation serve``."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.fleet.conftest import EngineSwitch
from tests.fleet.fakes import Script, factory
from tests.helpers.prerequisites import needs_bwrap
from workstation.agent.sandbox import NetworkAccess, SandboxPolicy
from workstation.core.endpoints import Endpoint
from workstation.core.errors import UserError
from workstation.core.fleet_events import DevServerChanged
from workstation.fleet import Fleet, SessionSpec
from workstation.fleet.ports import port_free

EP = Endpoint(base_url="http://127.0.0.1:9", api_key="k", model="m", name="e1")
PROBE = ("import socket, sys\n"
         "s = socket.socket()\n"
         "s.settimeout(2)\n"
         "try:\n"
         "    s.connect(('127.0.0.1', int(sys.argv[1])))\n"
         "    print('reached-the-host')\n"
         "except OSError:\n"
         "    print('no-network')\n")


def _serve(probe_port: int) -> str:
    """A dev server: first it tries to reach a port of the host, then it serves its worktree."""
    return (f"python3 probe.py {probe_port} > probe.txt; "
            "exec python3 -m http.server \"$PORT\" --bind 127.0.0.1")


async def _fleet(data: Path, http: httpx.AsyncClient, **policy: object) -> Fleet:
    fleet = Fleet(data_dir=data, endpoints=[EP], agent_factory=factory(Script()), http=http,
                  sandbox=SandboxPolicy(app_data_dirs=(str(data),), **policy))  # type: ignore[arg-type]
    await fleet.start()
    return fleet


async def _get(url: str, timeout_s: float = 30.0) -> httpx.Response:
    deadline = time.monotonic() + timeout_s
    async with httpx.AsyncClient(timeout=5.0) as client:
        while True:
            try:
                return await client.get(url)
            except httpx.TransportError:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.2)


@pytest.fixture
def host_listener() -> socket.socket:
    """A port on the host's loopback a sandboxed server must not reach."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    yield sock
    sock.close()


async def _sessions(fleet: Fleet, repo: Path, run: str, n: int) -> list[str]:
    made = await fleet.create_sessions(SessionSpec(task="serve", repo=str(repo), run_command=run, ports=2), n)
    for s in made:
        (Path(s.worktree_path) / "probe.py").write_text(PROBE)
        (Path(s.worktree_path) / "index.html").write_text(f"this is {s.name}\n")
    return [s.session_id for s in made]


@needs_bwrap
async def test_two_servers_on_their_own_ports_bridged_out_of_the_sandbox(
        tmp_path: Path, git_repo: Path, mock_http: httpx.AsyncClient, host_listener: socket.socket) -> None:
    fleet = await _fleet(tmp_path / "data", mock_http)
    events: list[DevServerChanged] = []
    fleet.changed.connect(lambda e: events.append(e) if isinstance(e, DevServerChanged) else None)
    ids = await _sessions(fleet, git_repo, _serve(host_listener.getsockname()[1]), 2)
    statuses = [await fleet.start_dev_server(sid) for sid in ids]
    assert statuses[0].url != statuses[1].url
    for sid, st in zip(ids, statuses, strict=True):
        assert st.sandboxed and st.bridged
        assert st.ports == fleet.ports.get(sid) and st.url == f"http://127.0.0.1:{st.ports.first}/"
        page = await _get(st.url + "index.html")
        assert page.text == f"this is {fleet.summary(sid).name}\n"  # its own worktree, nobody else's
        assert (Path(fleet.summary(sid).worktree_path) / "probe.txt").read_text() == "no-network\n"
        assert not port_free(st.ports.first)
    assert [e.running for e in events] == [True, True] and events[0].url == statuses[0].url
    assert await fleet.stop_dev_server(ids[0])
    assert fleet.dev_server(ids[0]) is None and port_free(statuses[0].ports.first)
    with pytest.raises(httpx.TransportError):
        await _get(statuses[0].url, timeout_s=0)
    await fleet.stop(ids[1])  # the server stops with its session
    assert fleet.dev_server(ids[1]) is None and port_free(statuses[1].ports.first)
    assert [e.running for e in events] == [True, True, False, False]
    transcript = await fleet.transcript(ids[0])
    ends = [e for _, e in transcript if type(e).__name__ == "ToolCallFinished" and e.tool == "dev_server"]
    assert len(ends) == 1 and ends[0].result.startswith("stopped after")
    await fleet.aclose()


@needs_bwrap
async def test_a_server_that_exits_a_taken_port_and_no_run_command(
        tmp_path: Path, git_repo: Path, mock_http: httpx.AsyncClient) -> None:
    fleet = await _fleet(tmp_path / "data", mock_http)
    (quits,) = await _sessions(fleet, git_repo, "echo starting; exit 4", 1)
    events: list[DevServerChanged] = []
    fleet.changed.connect(lambda e: events.append(e) if isinstance(e, DevServerChanged) else None)
    await fleet.start_dev_server(quits)
    for _ in range(200):
        if fleet.dev_server(quits) is None:
            break
        await asyncio.sleep(0.05)
    assert fleet.dev_server(quits) is None
    assert not events[-1].running and "exited with status 4" in events[-1].message
    transcript = await fleet.transcript(quits)
    (end,) = [e for _, e in transcript if type(e).__name__ == "ToolCallFinished" and e.tool == "dev_server"]
    assert end.status == "error" and "starting" in end.result
    block = fleet.ports.get(quits)
    assert block is not None
    taken = socket.socket()
    taken.bind(("127.0.0.1", block.first + 1))
    taken.listen()
    try:
        with pytest.raises(UserError, match=f"port {block.first + 1} of this session is in use"):
            await fleet.start_dev_server(quits)
    finally:
        taken.close()
    plain = await fleet.create_session(SessionSpec(task="no server", repo=str(git_repo), name="plain"))
    with pytest.raises(UserError, match="has no dev server"):
        await fleet.start_dev_server(plain.session_id)
    await fleet.aclose()


@needs_bwrap
async def test_host_network_policy_serves_without_the_bridge(
        tmp_path: Path, git_repo: Path, mock_http: httpx.AsyncClient, host_listener: socket.socket) -> None:
    fleet = await _fleet(tmp_path / "data", mock_http, network=NetworkAccess.HOST)
    (sid,) = await _sessions(fleet, git_repo, _serve(host_listener.getsockname()[1]), 1)
    st = await fleet.start_dev_server(sid)
    assert st.sandboxed and not st.bridged
    assert (await _get(st.url + "index.html")).status_code == 200
    assert (Path(fleet.summary(sid).worktree_path) / "probe.txt").read_text() == "reached-the-host\n"
    await fleet.aclose()  # closing the fleet stops its servers
    assert port_free(st.ports.first)


@needs_bwrap
def test_serve_verb(tmp_path: Path, git_repo: Path, engine_switch: EngineSwitch, host_listener: socket.socket) -> None:
    data = tmp_path / "data"

    async def make() -> str:
        async with httpx.AsyncClient(transport=httpx.MockTransport(engine_switch.handler)) as http:
            fleet = await _fleet(data, http)
            (sid,) = await _sessions(fleet, git_repo, _serve(host_listener.getsockname()[1]), 1)
            block = fleet.ports.get(sid)
            await fleet.aclose()
            assert block is not None
            return f"http://127.0.0.1:{block.first}/"

    url = asyncio.run(make())
    proc = subprocess.Popen([sys.executable, "-m", "workstation", "--data-dir", str(data), "serve", "serve",
                             "--json", "--for-s", "120"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "WORKSTATION_DATA_DIR": str(data)})
    try:
        page = asyncio.run(_get(url + "index.html", timeout_s=60))
        assert page.text == "this is serve\n"
    finally:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert f"serving serve at {url}" in err
    last = json.loads(out.strip().splitlines()[-1])
    assert last["url"] == url and last["bridged"] and last["sandboxed"] and last["stopped"]
    assert "GET /index.html" in out  # the server's own output
    assert port_free(int(url.rsplit(":", 1)[1].strip("/")))
