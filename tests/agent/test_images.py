"""Images with a task or an answer: ``image_url`` parts in the request the engine gets, only
for a model whose config has a vision part; refused with the reason otherwise."""

from __future__ import annotations

import base64
import json
import struct
import zlib
from pathlib import Path

import pytest

from tests.helpers.scripted_server import Reply, ScriptedServer, ToolCall
from workstation.agent.images import MAX_IMAGE_BYTES, config_takes_images, load_image, load_images
from workstation.agent.model_info import fetch_takes_images
from workstation.agent.prompts import IMAGES_WITH_ANSWER
from workstation.core import agent_events as ev
from workstation.core.agent_events import RunStatus
from workstation.core.errors import UserError

DONE = Reply(tool_calls=[ToolCall("attempt_completion", {"result": "ok"})])


def png(path: Path, width: int = 2, height: int = 2, rgb: tuple[int, int, int] = (200, 30, 30)) -> Path:
    """A real PNG file (what a screenshot is), written by hand."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    raw = b"".join(b"\x00" + bytes(rgb) * width for _ in range(height))
    data = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))
    path.write_bytes(data)
    return path


def image_parts(message: dict) -> list[bytes]:
    out = []
    for part in message["content"]:
        if part["type"] == "image_url":
            url = part["image_url"]["url"]
            assert url.startswith("data:image/png;base64,")
            out.append(base64.b64decode(url.split(",", 1)[1]))
    return out


async def test_task_images_reach_a_vision_model_as_image_url_parts(server: ScriptedServer, make_agent,
                                                                    tmp_path: Path) -> None:
    shot = png(tmp_path / "screenshot.png")
    server.push(DONE)
    agent, rec = make_agent(server, task="Make the button look like this", takes_images=True,
                            task_images=load_images([shot]))
    assert (await agent.run()).status is RunStatus.COMPLETED
    first = server.requests[0]["messages"][1]
    assert first["role"] == "user" and first["content"][0]["type"] == "text"
    assert "Make the button look like this" in first["content"][0]["text"]
    assert image_parts(first) == [shot.read_bytes()]
    attached = rec.of(ev.ImagesAttached)
    assert attached and attached[0].names == ("screenshot.png",) and attached[0].with_task
    # an answer with an image: a user message with text and image parts, after the history
    second = png(tmp_path / "after.png", rgb=(0, 0, 255))
    agent.reply("now like this", load_images([second]))
    server.push(DONE)
    await agent.run()
    user = [m for m in server.requests[-1]["messages"] if m["role"] == "user"][-1]
    assert "now like this" in user["content"][0]["text"] and image_parts(user) == [second.read_bytes()]
    # the history before the reply is sent byte for byte again (the prefix cache still hits)
    assert server.requests[-1]["messages"][: len(server.requests[0]["messages"])] == server.requests[0]["messages"]


async def test_an_answer_to_a_question_with_an_image(server: ScriptedServer, make_agent, tmp_path: Path) -> None:
    server.push(Reply(tool_calls=[ToolCall("ask_followup_question", {"question": "Which colour?"})]))
    agent, _ = make_agent(server, takes_images=True)
    assert (await agent.run()).status is RunStatus.NEEDS_INPUT
    agent.reply("this one", load_images([png(tmp_path / "c.png")]))
    server.push(DONE)
    await agent.run()
    msgs = server.requests[-1]["messages"]
    tool = next(m for m in msgs if m["role"] == "tool")
    assert "this one" in tool["content"]  # the answer, as the question's result
    follow = msgs[msgs.index(tool) + 1]
    assert follow["role"] == "user" and follow["content"][0]["text"] == IMAGES_WITH_ANSWER and image_parts(follow)


async def test_refused_for_a_model_without_a_vision_part(server: ScriptedServer, make_agent, tmp_path: Path) -> None:
    shot = load_images([png(tmp_path / "s.png")])
    with pytest.raises(UserError, match="does not take images"):
        make_agent(server, takes_images=False, task_images=shot)
    with pytest.raises(UserError, match="cannot tell whether the model 'scripted' takes images"):
        make_agent(server, task_images=shot)
    server.push(DONE)
    agent, _ = make_agent(server, takes_images=False)
    await agent.run()
    with pytest.raises(UserError, match="does not take images"):
        agent.reply("look", shot)
    assert len(server.requests) == 1  # nothing was sent with the refused images


def test_image_files_are_checked(tmp_path: Path) -> None:
    assert load_image(png(tmp_path / "a.png")).mime == "image/png"
    (tmp_path / "b.jpg").write_bytes(b"\xff\xd8\xff\xe0" + b"\0" * 20)
    assert load_image(tmp_path / "b.jpg").mime == "image/jpeg"
    (tmp_path / "notes.txt").write_text("not an image")
    with pytest.raises(UserError, match="is not a PNG, JPEG, GIF or WebP image"):
        load_image(tmp_path / "notes.txt")
    with pytest.raises(UserError, match="no such file"):
        load_image(tmp_path / "missing.png")
    big = tmp_path / "big.png"
    big.write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * MAX_IMAGE_BYTES)
    with pytest.raises(UserError, match="the limit is"):
        load_image(big)
    with pytest.raises(UserError, match="at most 8"):
        load_images([tmp_path / "a.png"] * 9)


async def test_whether_a_model_takes_images_comes_from_its_config(http, tmp_path: Path) -> None:
    vision, text = tmp_path / "vlm", tmp_path / "llm"
    vision.mkdir()
    text.mkdir()
    (vision / "config.json").write_text(json.dumps({"model_type": "qwen2_vl", "vision_config": {"depth": 2}}))
    (text / "config.json").write_text(json.dumps({"model_type": "llama", "architectures": ["LlamaForCausalLM"]}))
    async with ScriptedServer(model_root=str(vision), adapters={"style": str(tmp_path / "adapter")}) as srv:
        assert await fetch_takes_images(http, srv.endpoint) is True
        from dataclasses import replace

        assert await fetch_takes_images(http, replace(srv.endpoint, model="style")) is True  # its base decides
    async with ScriptedServer(model_root=str(text)) as srv:
        assert await fetch_takes_images(http, srv.endpoint) is False
    async with ScriptedServer(model_root="org/remote-model") as srv:
        assert await fetch_takes_images(http, srv.endpoint) is None  # not readable here: unknown
    assert config_takes_images({"image_token_index": 32000}) is True
    assert config_takes_images(None) is None


# ----------------------------------------------------------------------------- the verbs and the fleet
def vision_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "vision-model"
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps({"model_type": "llava", "vision_config": {}}))
    return folder


def test_agent_verb_attaches_images_or_refuses(git_repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from workstation.cli import main

    monkeypatch.setenv("WORKSTATION_DATA_DIR", str(tmp_path / "data"))
    shot, other = png(tmp_path / "a.png"), png(tmp_path / "b.png", rgb=(1, 2, 3))
    with ScriptedServer([DONE], model_root=str(vision_folder(tmp_path))).in_thread() as srv:
        code = main(["agent", "--endpoint", srv.base_url, "--api-key", srv.api_key, "--model", srv.model,
                     "--repo", str(git_repo), "--task", "like this", "--image", str(shot), "--image", str(other)])
        out = capsys.readouterr()
        assert code == 0, out.err
        assert image_parts(srv.requests[0]["messages"][1]) == [shot.read_bytes(), other.read_bytes()]
        assert "▣ 2 images with the task: a.png, b.png" in out.out
    text_model = tmp_path / "text-model"
    text_model.mkdir()
    (text_model / "config.json").write_text("{}")
    with ScriptedServer([DONE], model_root=str(text_model)).in_thread() as srv:
        code = main(["agent", "--endpoint", srv.base_url, "--api-key", srv.api_key, "--model", srv.model,
                     "--repo", str(git_repo), "--task", "like this", "--image", str(shot)])
        assert code == 2 and not srv.requests
    assert "does not take images" in capsys.readouterr().err


def test_taskfile_images_per_session(git_repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from workstation import cli

    png(tmp_path / "mock.png")
    tasks = tmp_path / "t.toml"
    tasks.write_text(f'''
[[session]]
task = "match the mock-up"
repo = "{git_repo}"
images = ["mock.png"]
''')
    with ScriptedServer(responder=lambda body, n: DONE, model_root=str(vision_folder(tmp_path))).in_thread() as srv:
        code = cli.main(["--data-dir", str(tmp_path / "data"), "run", "--tasks", str(tasks), "--endpoint",
                         srv.base_url, "--api-key", srv.api_key, "--model", srv.model])
        assert code == 0, capsys.readouterr().err
        task_requests = [r for r in srv.requests if "<task>" in str(r["messages"][1]["content"])]
        assert image_parts(task_requests[0]["messages"][1]) == [(tmp_path / "mock.png").read_bytes()]
    with ScriptedServer(responder=lambda body, n: DONE).in_thread() as srv:  # its root is no folder here
        code = cli.main(["--data-dir", str(tmp_path / "data2"), "run", "--tasks", str(tasks), "--endpoint",
                         srv.base_url, "--api-key", srv.api_key, "--model", srv.model])
    assert code == 2 and "cannot tell whether the model 'scripted' takes images" in capsys.readouterr().err
    tasks.write_text(f'[[session]]\ntask = "x"\nrepo = "{git_repo}"\nimages = ["missing.png"]\n')
    from workstation.fleet.taskfile import load_taskfile

    with pytest.raises(UserError, match="image .*missing.png: no such file"):
        load_taskfile(tasks)


async def test_fleet_reply_with_an_image(git_repo: Path, tmp_path: Path) -> None:
    import asyncio

    from workstation.core.session_state import SessionState as S
    from workstation.engine.http import make_http_client
    from workstation.fleet import Fleet, SessionSpec, real_agent_factory

    question = Reply(tool_calls=[ToolCall("ask_followup_question", {"question": "Which look?"})])
    async with ScriptedServer([question, DONE], model_root=str(vision_folder(tmp_path))) as srv, \
            make_http_client() as http:
        fleet = Fleet(data_dir=tmp_path / "data", endpoints=[srv.endpoint], http=http,
                      agent_factory=real_agent_factory(http, prime=False))
        await fleet.start()
        try:
            (s,) = await fleet.create_sessions(SessionSpec(task="style it", repo=str(git_repo), name="img"), 1,
                                               start=True)
            for _ in range(200):
                if fleet.summary(s.session_id).state is S.NEEDS_INPUT:
                    break
                await asyncio.sleep(0.05)
            shot = png(tmp_path / "pick.png")
            await fleet.reply(s.session_id, "this one", images=(str(shot),))
            await asyncio.wait_for(fleet.wait_settled(), 30)
            assert fleet.summary(s.session_id).state is S.DONE
            events = [e for _, e in await fleet.transcript(s.session_id)]
            assert any(isinstance(e, ev.ImagesAttached) and e.paths == (str(shot),) for e in events)
        finally:
            await fleet.aclose()
    msgs = srv.requests[-1]["messages"]
    assert any(m["role"] == "user" and isinstance(m["content"], list) and image_parts(m) == [shot.read_bytes()]
               for m in msgs)
