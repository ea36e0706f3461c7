"""LoRA adapters: the launcher's flags, the session's requests naming its adapter, loading at
run time, and tokens per adapter in the meters — against the scripted server, and the real
CPU engine serving the tiny model with a real adapter built with peft (``tiny-lora``)."""

from __future__ import annotations

import asyncio
import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.helpers.prerequisites import installed_engine, prepared_model
from tests.helpers.scripted_server import Reply, ScriptedServer, ToolCall
from workstation.core.endpoints import Endpoint
from workstation.core.errors import UserError
from workstation.engine.chat_client import ChatClient
from workstation.engine.http import make_http_client
from workstation.engine.lora import ensure_adapter, find_adapters, lora_args, rank_for, served_adapters
from workstation.fleet.taskfile import load_taskfile
from workstation.telemetry.streams import StreamCounters

DONE = Reply(tool_calls=[ToolCall("attempt_completion", {"result": "ok"})])


def fake_adapter(folder: Path, rank: int = 8) -> Path:
    folder.mkdir(parents=True)
    (folder / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": rank}))
    (folder / "adapter_model.safetensors").write_bytes(b"\0" * 8)
    return folder


def test_flags_from_a_folder_of_adapters(tmp_path: Path) -> None:
    fake_adapter(tmp_path / "style", rank=8)
    fake_adapter(tmp_path / "terse", rank=24)
    (tmp_path / "notes").mkdir()  # not an adapter: left alone
    adapters = find_adapters(tmp_path)
    assert [a.name for a in adapters] == ["style", "terse"]
    args = lora_args(adapters, runtime=False, max_loras=4, max_rank=None)
    assert args[:5] == ["--enable-lora", "--max-loras", "4", "--max-lora-rank", "32"]
    assert args[5:] == ["--lora-modules", f"style={tmp_path / 'style'}", f"terse={tmp_path / 'terse'}"]
    assert lora_args((), runtime=False, max_loras=4, max_rank=None) == []  # no adapters: LoRA stays off
    assert lora_args((), runtime=True, max_loras=2, max_rank=None) == ["--enable-lora", "--max-loras", "2",
                                                                      "--max-lora-rank", "16"]
    with pytest.raises(UserError, match="at most 512"):
        rank_for([1024])


def test_launcher_adds_them_as_base_arguments(tmp_path: Path) -> None:
    from workstation.config import load_settings
    from workstation.engine.launcher import EngineLauncher

    settings = load_settings()
    fake_adapter(tmp_path / "style")
    with_lora = settings.model_copy(update={"engine": settings.engine.model_copy(
        update={"lora_dir": tmp_path, "lora_runtime": True})})
    launcher = EngineLauncher(with_lora, installed_engine(settings), prepared_model(settings, "tiny"))
    argv = launcher.command()
    assert "--enable-lora" in argv and f"style={tmp_path / 'style'}" in argv
    launcher._api_key = "k"
    assert launcher.environment()["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "True"
    launcher._validate(argv)  # the installed engine knows every LoRA flag


def test_taskfile_adapter(tmp_path: Path) -> None:
    f = tmp_path / "t.toml"
    fake_adapter(tmp_path / "ad" / "x")
    f.write_text('[[session]]\ntask = "t"\nrepo = "."\nadapter = "style"\n'
                 '[[session]]\ntask = "u"\nrepo = "."\nadapter = { name = "x", path = "ad/x" }\n')
    one, two = load_taskfile(f)
    assert (one.spec.adapter, one.spec.adapter_path) == ("style", None)
    assert (two.spec.adapter, two.spec.adapter_path) == ("x", str(tmp_path / "ad" / "x"))
    f.write_text('[[session]]\ntask = "t"\nrepo = "."\nadapter = { name = "x", path = "nope" }\n')
    with pytest.raises(UserError, match="not a LoRA adapter"):
        load_taskfile(f)


async def test_requests_name_the_adapter_and_a_missing_one_is_refused(tmp_path: Path) -> None:
    async with ScriptedServer([DONE], adapters={"style": "/a/style"}) as srv, make_http_client() as http:
        assert await served_adapters(http, srv.endpoint) == {"style": "/a/style"}
        await ensure_adapter(http, srv.endpoint, "style")
        with pytest.raises(UserError, match="serves no LoRA adapter 'other' \\(it serves: style\\)"):
            await ensure_adapter(http, srv.endpoint, "other")
        client = ChatClient(http, srv.endpoint, model="style")
        seen = []
        client.observers.append(seen.append)
        await client.complete([{"role": "user", "content": "hi"}], max_tokens=4)
        assert srv.requests[0]["model"] == "style" and seen[0].model == "style"


# ----------------------------------------------------------------------------- the real engine
@pytest.fixture(scope="module")
def lora_engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Endpoint, Path]]:
    """The tiny model on the real CPU engine, LoRA on: ``tiny-lora`` served from a folder of
    adapters, loading at run time allowed. Started here (the shared test engines have no LoRA)."""
    from workstation.config import load_settings
    from workstation.engine.adapter_prep import prepare_adapter
    from workstation.engine.launcher import EngineLauncher

    settings = load_settings()
    engine = installed_engine(settings)
    model = prepared_model(settings, "tiny")
    built = prepare_adapter(settings, engine, "tiny-lora")
    folder = tmp_path_factory.mktemp("adapters")
    shutil.copytree(built, folder / "tiny-lora")
    lora = settings.model_copy(update={"engine": settings.engine.model_copy(
        update={"lora_dir": folder, "lora_runtime": True, "max_loras": 2})})
    loop = asyncio.new_event_loop()
    launcher = EngineLauncher(lora, engine, model, log_dir=folder.parent / "lora-engine-log", profile="default")
    try:
        loop.run_until_complete(launcher.start())
        yield launcher.endpoint, built
    finally:
        loop.run_until_complete(launcher.stop())
        loop.close()


async def _complete(http: httpx.AsyncClient, endpoint: Endpoint, model: str | None) -> str:
    text, _ = await ChatClient(http, endpoint, model=model).complete(
        [{"role": "user", "content": "def class return"}], max_tokens=12, temperature=0.0)
    return text


@pytest.mark.engine
async def test_the_cpu_engine_applies_a_real_adapter(lora_engine: tuple[Endpoint, Path]) -> None:
    endpoint, built = lora_engine
    async with make_http_client(read_timeout_s=120.0) as http:
        served = await served_adapters(http, endpoint)
        assert set(served) == {"tiny-lora"}
        base, adapted = await _complete(http, endpoint, None), await _complete(http, endpoint, "tiny-lora")
        assert adapted != base  # the adapter changes what the model writes…
        assert adapted == await _complete(http, endpoint, "tiny-lora")  # …the same way each time
        # loaded at run time through vLLM's API, then served like the rest
        await ensure_adapter(http, endpoint, "late", str(built))
        assert "late" in await served_adapters(http, endpoint)
        assert await _complete(http, endpoint, "late") == adapted


@pytest.mark.engine
async def test_a_session_on_an_adapter_and_its_tokens_apart(lora_engine: tuple[Endpoint, Path], git_repo: Path,
                                                           tmp_path: Path) -> None:
    from workstation.core import agent_events as ev
    from workstation.fleet import Fleet, SessionSpec, real_agent_factory

    endpoint, _ = lora_engine
    counters = StreamCounters()
    usages: list[ev.UsageReported] = []

    def on_event(item) -> None:  # type: ignore[no-untyped-def]
        if isinstance(item.event, ev.UsageReported):
            usages.append(item.event)
            counters.on_usage(item.session_id, item.event)

    async with make_http_client(read_timeout_s=120.0) as http:
        fleet = Fleet(data_dir=tmp_path / "data", endpoints=[endpoint], http=http,
                      agent_factory=real_agent_factory(http, overrides={"max_tokens_per_turn": 64}))
        fleet.agent_event.connect(on_event)
        await fleet.start()
        try:
            for name, adapter in (("plain", None), ("styled", "tiny-lora")):
                await fleet.create_sessions(SessionSpec(task="say hi", repo=str(git_repo), name=name,
                                                        headless=True, max_steps=1, adapter=adapter), 1, start=True)
            await asyncio.wait_for(fleet.wait_settled(), 300)
        finally:
            await fleet.aclose()
    models = {u.model for u in usages}
    assert models == {"tiny", "tiny-lora"}, usages
    per_model = {m.model: m for m in counters.by_model()}
    assert per_model["tiny-lora"].completion_tokens > 0 and per_model["tiny"].completion_tokens > 0
    assert per_model["tiny-lora"].prompt_tokens == sum(u.prompt_tokens for u in usages if u.model == "tiny-lora")


def test_agent_verb_takes_an_adapter(git_repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from workstation.cli import main

    monkeypatch.setenv("WORKSTATION_DATA_DIR", str(tmp_path / "data"))
    with ScriptedServer([DONE], adapters={"style": "/a/style"}).in_thread() as srv:
        argv = ["agent", "--endpoint", srv.base_url, "--api-key", srv.api_key, "--model", srv.model,
                "--repo", str(git_repo), "--task", "t"]
        assert main([*argv, "--adapter", "style"]) == 0
        assert srv.requests[-1]["model"] == "style"
        assert main([*argv, "--adapter", "nope"]) == 2
    assert "serves no LoRA adapter 'nope'" in capsys.readouterr().err


def test_stream_counters_keep_tokens_per_model() -> None:
    from workstation.core import agent_events as ev

    counters = StreamCounters()
    counters.on_usage("a", ev.UsageReported("a", 1, 100, 10, 50, 110, 8192, "tiny-lora"))
    counters.on_usage("b", ev.UsageReported("b", 1, 30, 3, 0, 33, 8192, "tiny"))
    counters.on_usage("a", ev.UsageReported("a", 2, 120, 12, 100, 132, 8192, "tiny-lora"))
    by = {m.model: m for m in counters.by_model()}
    assert (by["tiny-lora"].requests, by["tiny-lora"].prompt_tokens, by["tiny-lora"].completion_tokens) == (2, 220, 22)
    assert by["tiny"].completion_tokens == 3 and by["tiny-lora"].cached_prompt_tokens == 150
