"""Against the real vLLM CPU engine: start, health, stream, /metrics, stop, restart, errors."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys

import httpx
import psutil
import pytest

from tests.helpers.prerequisites import installed_engine, missing, prepared_model
from workstation.config import load_settings
from workstation.engine.chat_client import ChatClient
from workstation.engine.flags import UnknownFlagError
from workstation.engine.http import make_http_client
from workstation.engine.launcher import EngineLauncher, EngineStartCancelled, EngineStartError, EngineState

pytestmark = pytest.mark.engine


def _tiny_launcher(tmp_path, **kwargs) -> EngineLauncher:
    settings = load_settings()
    engine = installed_engine(settings)
    model = prepared_model(settings, "tiny")
    return EngineLauncher(settings, engine, model, log_dir=tmp_path, profile="default", **kwargs)


def _group_members(pid: int) -> list[psutil.Process]:
    try:
        pgid = os.getpgid(pid)
    except ProcessLookupError:
        return []
    found = []
    for proc in psutil.process_iter(["pid"]):
        try:
            if os.getpgid(proc.pid) == pgid:
                found.append(proc)
        except (ProcessLookupError, PermissionError):
            continue
    return found


async def test_smollm2_streams_a_real_answer(smollm2_engine):
    async with make_http_client() as http:
        client = ChatClient(http, smollm2_engine)
        text, usage = await client.complete(
            [{"role": "user", "content": "Write a Python function that adds two numbers."}],
            max_tokens=60, temperature=0.0,
        )
    assert usage is not None and usage.completion_tokens > 10
    assert "def " in text


async def test_health_and_metrics_are_served(smollm2_engine):
    async with make_http_client() as http:
        health = await http.get(smollm2_engine.base_url + "/health")
        metrics = await http.get(
            smollm2_engine.base_url + "/metrics",
            headers={"Authorization": f"Bearer {smollm2_engine.api_key}"},
        )
    assert health.status_code == 200
    assert metrics.status_code == 200
    assert "vllm:generation_tokens_total" in metrics.text


async def test_wrong_api_key_is_refused(smollm2_engine):
    async with make_http_client() as http:
        response = await http.post(
            smollm2_engine.v1 + "/chat/completions",
            json={"model": smollm2_engine.model, "messages": [{"role": "user", "content": "hi"}]},
            headers={"Authorization": "Bearer wrong"},
        )
    assert response.status_code == 401


async def test_tiny_engine_start_stream_stop_restart_leaves_nothing_behind(tmp_path):
    launcher = _tiny_launcher(tmp_path)
    states = []
    launcher.state_changed.connect(lambda state, _detail: states.append(state))
    try:
        endpoint = await launcher.start()
        assert endpoint.base_url.startswith("http://127.0.0.1:")
        first_pid = launcher.pid
        async with make_http_client() as http:
            text, usage = await ChatClient(http, endpoint).complete(
                [{"role": "user", "content": "hello"}], max_tokens=8, temperature=0.0
            )
            emitted: list[str] = []
            launcher.log_line.connect(emitted.append)
            for _ in range(3):  # what the meters do every second
                scrape = await http.get(f"{endpoint.base_url.removesuffix('/v1')}/metrics",
                                        headers={"Authorization": f"Bearer {endpoint.api_key}"})
                assert scrape.status_code == 200
            await asyncio.sleep(1.0)
        assert usage is not None and usage.completion_tokens >= 1
        assert launcher.log_tail and launcher.log_path.read_text()
        assert launcher.log_path.read_text().count('"GET /metrics HTTP/1.1" 200') >= 3  # the file keeps all
        assert not [ln for ln in (*launcher.log_tail, *emitted) if "GET /metrics" in ln]  # the dock does not
        assert endpoint.api_key not in launcher.log_path.read_text()
        members = _group_members(first_pid)
        assert members, "the engine runs in its own process group"

        await launcher.restart()
        assert launcher.state is EngineState.READY and launcher.pid != first_pid
        assert not [p for p in members if p.is_running()], "old engine processes survived a restart"
        second_pid = launcher.pid
        second_members = _group_members(second_pid)
    finally:
        await launcher.stop()
    assert launcher.state is EngineState.STOPPED
    assert not [p for p in second_members if p.is_running()]
    assert EngineState.STARTING in states and EngineState.READY in states and EngineState.STOPPED in states


async def test_a_start_is_cancelled_by_stop_and_leaves_nothing_behind(tmp_path):
    launcher = _tiny_launcher(tmp_path)
    said: list[str] = []
    starting = asyncio.create_task(launcher.start(said.append))
    for _ in range(100):  # until the engine process runs (it then loads for many seconds)
        if launcher.pid is not None:
            break
        await asyncio.sleep(0.1)
    pid = launcher.pid
    assert pid is not None and launcher.state is EngineState.STARTING
    await asyncio.sleep(1.0)
    members = _group_members(pid)
    await launcher.stop()  # the dock's "Cancel start"
    with pytest.raises(EngineStartCancelled, match="cancelled"):
        await starting
    assert launcher.state is EngineState.STOPPED and launcher.pid is None
    assert not [p for p in members if p.is_running()], "engine processes survived a cancelled start"
    assert "engine start cancelled" in said


async def test_port_already_taken_is_a_clear_error_before_launch(tmp_path):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        launcher = _tiny_launcher(tmp_path, port=port)
        with pytest.raises(EngineStartError, match=f"port {port} .* already in use"):
            await launcher.start()
    assert launcher.pid is None


async def test_unknown_flag_is_refused_before_launch(tmp_path):
    launcher = _tiny_launcher(tmp_path, extra_args=["--max-num-seq", "4"])
    with pytest.raises(UnknownFlagError, match="did you mean --max-num-seqs"):
        await launcher.start()
    assert launcher.pid is None


async def test_engine_that_exits_during_startup_reports_its_log(tmp_path):
    # vLLM accepts the flag but refuses the value once it reads the model's config.
    launcher = _tiny_launcher(tmp_path, extra_args=["--max-model-len", "999999999"])
    with pytest.raises(EngineStartError) as err:
        await launcher.start()
    message = err.value.describe()
    assert "during start-up" in message and "last log lines" in message
    assert launcher.pid is None and launcher.state is EngineState.FAILED


def _cli(*args: str, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "workstation", *args], capture_output=True, text=True,
        timeout=timeout, env={**os.environ, **(env or {})},
    )


def test_headless_demo_against_a_running_engine(smollm2_engine):
    out = _cli("demo", "--headless", "--endpoint", smollm2_engine.base_url,
               "--api-key", smollm2_engine.api_key, "--max-tokens", "40")
    assert out.returncode == 0, out.stderr
    assert "time to first token" in out.stderr
    assert '"tokens"' in out.stdout.splitlines()[-1]


@pytest.mark.parametrize(
    "setup, expected",
    [
        ("no-engine", "the vLLM engine is not installed"),
        ("no-model", "model 'smollm2' is not ready"),
        ("corrupt-model", "corrupt"),
    ],
)
def test_bad_setups_give_a_clear_message_and_no_traceback(tmp_path, setup, expected):
    data = tmp_path / "data"
    env = {"WORKSTATION_DATA_DIR": str(data)}
    real = load_settings()
    if setup != "no-engine":
        installed_engine(real)
        (data / "engine").mkdir(parents=True)
        (data / "engine" / "venv").symlink_to(real.engine_venv)
    if setup == "corrupt-model":
        src = real.models_dir / "smollm2"
        if not src.is_dir():
            missing("smollm2 not prepared (run `workstation model prepare smollm2`)")
        dst = data / "models" / "smollm2"
        dst.mkdir(parents=True)
        for f in src.iterdir():
            (dst / f.name).symlink_to(f)
        (dst / "model.safetensors").unlink()
        (dst / "model.safetensors").write_bytes(b"truncated")
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    out = _cli("demo", "--headless", env=env, timeout=120)
    assert out.returncode == 2
    assert expected in out.stderr
    assert "Traceback" not in out.stderr
    after = {p.pid for p in psutil.Process().children(recursive=True)}
    assert after <= before, "no process may be left behind"


def test_external_endpoint_that_is_down_is_a_clear_error():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    out = _cli("demo", "--headless", "--endpoint", f"http://127.0.0.1:{port}", timeout=60)
    assert out.returncode == 2
    assert "cannot reach" in out.stderr and "Traceback" not in out.stderr


def test_metrics_endpoint_is_plain_http(smollm2_engine):
    """/metrics answers without the API key (the meters scrape it plainly); the API does not."""
    response = httpx.get(smollm2_engine.base_url + "/metrics", timeout=10, trust_env=False)
    assert response.status_code == 200
    assert "vllm:generation_tokens_total" in response.text
    if smollm2_engine.api_key:
        api = httpx.get(smollm2_engine.base_url + "/v1/models", timeout=10, trust_env=False)
        assert api.status_code == 401


ORPHAN_SCRIPT = """
import asyncio, sys
from workstation.config import load_settings
from workstation.engine.environment import find_engine
from workstation.engine.launcher import EngineLauncher
from workstation.engine.models import resolve_model

async def main():
    s = load_settings()
    launcher = EngineLauncher(s, find_engine(s), resolve_model(s, "tiny"), log_dir=__import__("pathlib").Path(sys.argv[1]))
    await launcher.start()
    print(launcher.pid, flush=True)
    await asyncio.sleep(600)

asyncio.run(main())
"""


def test_engine_dies_with_the_app_when_the_app_is_killed(tmp_path):
    installed_engine(load_settings())
    app = subprocess.Popen([sys.executable, "-c", ORPHAN_SCRIPT, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        line = app.stdout.readline()
        assert line.strip().isdigit(), "the engine did not start"
        engine_pid = int(line)
        members = _group_members(engine_pid)
        assert members
    finally:
        app.kill()
        app.wait()
    gone, alive = psutil.wait_procs(members, timeout=30)
    assert not alive, f"engine processes outlived the app: {[p.pid for p in alive]}"
