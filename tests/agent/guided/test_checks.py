"""The guided protocol's draft checks run off the event loop (in the check pool's
processes), give what they gave on the loop, in order, and a cancelled turn leaves nothing
running."""

from __future__ import annotations

import asyncio
import contextlib
import os
import select
import signal
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.agent import test_guided_loop
from tests.agent.test_guided_loop import EXPLICIT, GOOD, SMOLLM2_PARAMETERS, answering
from tests.helpers.scripted_server import ScriptedServer
from workstation.agent.config import AgentConfig
from workstation.agent.guided import checks
from workstation.agent.guided import turn as guided_turn
from workstation.agent.guided.drafts import GuidedMemory
from workstation.agent.guided.symbols import WHOLE_FILE, parses
from workstation.core import agent_events as ev
from workstation.core.agent_events import RunStatus
from workstation.engine.chat_client import ChatDelta

bug_repo = test_guided_loop.bug_repo  # the fixture: the inventory sample on its bug branch
CALC = "def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    return a * b\n"


def _fence(code: str) -> str:
    return f"```python\n{code}```"


SUB_DRAFTS = [_fence("def sub(a, b):\n    return a +\n"), _fence("def sub(a, b):\n    return np.subtract(a, b)\n"),
              _fence("def sub(a, b):\n    return a + b\n"), "```python\ndef sub(a, b):\n    return a - b\n",
              _fence("def sub(a, b):\n    return a - b\n"), _fence("def sub(a, b):\n    return b - a\n")]


async def test_the_check_pool_runs_work_in_another_process() -> None:
    assert await checks.off_loop(os.getpid) != os.getpid()
    assert await checks.off_loop(os.getppid) == os.getpid()  # a child of this one, not the loop's thread


async def test_a_check_process_that_dies_is_replaced_and_the_pool_closes() -> None:
    os.kill(await checks.off_loop(os.getpid), signal.SIGKILL)  # killed (out of memory, by hand)
    for _ in range(3):  # the work goes to a new pool (once the old one is seen broken)
        assert await checks.off_loop(os.getppid) == os.getpid()
    old = await checks.off_loop(os.getpid)
    checks.close_check_pool()  # the app's shut-down: its processes end
    with pytest.raises(ProcessLookupError):
        os.kill(old, 0)
    assert await checks.off_loop(os.getpid) != old  # a later check starts a new pool


# A process running agents (a benchmark, headless): its check processes started and one busy,
# or still starting (importing the package) when it is stopped
POOL_OWNER = """
import asyncio, sys, time
from workstation.agent.guided import checks

async def main():
    if sys.argv[1] == "started":
        await asyncio.gather(*(checks.off_loop(time.sleep, 0.3) for _ in range(checks.CHECK_PROCESSES)))
    busy = [asyncio.ensure_future(checks.off_loop(time.sleep, 120)) for _ in range(checks.CHECK_PROCESSES)]
    await asyncio.sleep(0.3)
    print("ready", flush=True)
    await asyncio.gather(*busy)

asyncio.run(main())
"""


def _spawned(owner: subprocess.Popen[str]) -> list[psutil.Process]:
    found = []
    for child in psutil.Process(owner.pid).children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if "multiprocessing" in " ".join(child.cmdline()):  # the pool's, and the resource tracker
                found.append(child)
    return found


@pytest.mark.slow
@pytest.mark.parametrize("when", ["started", "starting"])
def test_no_check_process_outlives_a_pool_owner_stopped_by_sigterm(when: str) -> None:
    root = Path(__file__).resolve().parents[3]
    env = {**os.environ, "PYTHONPATH": str(root)}  # this checkout's package, in the owner and its pool
    owner = subprocess.Popen([sys.executable, "-c", POOL_OWNER, when], cwd=root, env=env, stdout=subprocess.PIPE,
                             text=True)
    workers: list[psutil.Process] = []
    try:
        ready, _, _ = select.select([owner.stdout], [], [], 120)
        assert ready and owner.stdout is not None and owner.stdout.readline() == "ready\n", owner.poll()
        for _ in range(600):
            workers = _spawned(owner)
            if len(pool := [w for w in workers if "spawn_main" in " ".join(w.cmdline())]) == checks.CHECK_PROCESSES:
                break
            time.sleep(0.05)
        assert len(pool) == checks.CHECK_PROCESSES, workers
        owner.send_signal(signal.SIGTERM)  # no exit handler runs, no shut-down stage
        assert owner.wait(10) == -signal.SIGTERM
        # started: they end at once; starting: once started (a spawned child imports the package first)
        _, alive = psutil.wait_procs(workers, timeout=10 if when == "started" else 60)
        assert alive == []  # the check processes (and multiprocessing's resource tracker) went with it
    finally:
        if owner.poll() is None:
            owner.kill()
            owner.wait(10)
        for worker in workers:
            with contextlib.suppress(psutil.NoSuchProcess):
                worker.kill()  # what this test started and survived it


async def test_a_real_turn_checks_its_drafts_only_off_the_loop(make_agent, bug_repo: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """The app's process never checks a draft: every check of the turn goes through the pool."""
    loop_thread = threading.current_thread()
    sent: list[str] = []
    real = checks.off_loop

    async def spy(work: Any, *args: Any) -> Any:
        sent.append(work.__name__)
        return await real(work, *args)

    def never_here(*_: Any, **__: Any) -> None:
        raise AssertionError(f"a draft was checked in the app's process ({threading.current_thread().name}, "
                             f"the loop's: {threading.current_thread() is loop_thread})")

    monkeypatch.setattr(guided_turn, "off_loop", spy)
    for name in ("parsed", "python_symbols", "find_symbol", "new_undefined_names", "twin_function", "rank"):
        monkeypatch.setattr(checks, name, never_here)  # here only: the pool's processes import their own
    respond = answering(GOOD, sampled=(GOOD.replace("item.price * item.quantity", "item.price"),))
    async with ScriptedServer(responder=respond) as srv:
        agent, rec = make_agent(srv, root=bug_repo, task=EXPLICIT, model_parameters=SMOLLM2_PARAMETERS,
                                user_present=False)
        outcome = await agent.run()
    assert outcome.status is RunStatus.COMPLETED, outcome
    assert "2 drafts, 1 usable" in "".join(e.text for e in rec.of(ev.TextStreamed))
    assert sent == ["edit_targets_of", "edit_targets_of", "edit_site", "check_draw", "edit_targets_of",
                    "edit_targets_of"]  # read, edit (site, one draw), test, finish: one call per batch


async def test_the_pool_gives_what_the_checks_give_here_in_order() -> None:
    site = checks.edit_site("calc.py", "(new function sub(a, b))", CALC, CALC, False)
    assert site.header == "def sub(a, b):" and site.before == ""
    here = checks.check_draw(site, SUB_DRAFTS, "Add sub(a, b) that returns a - b.", frozenset())
    there = await checks.off_loop(checks.check_draw, site, SUB_DRAFTS, "Add sub(a, b) that returns a - b.",
                                  frozenset())
    assert [(d.text, d.problem, d.new_text) for d in there.drafts] == [(d.text, d.problem, d.new_text)
                                                                       for d in here.drafts]
    assert [d.problem for d in there.drafts] == [
        "line 10: invalid syntax", "uses names nothing defines: np", "does what add does", "cut off", None, None]
    assert [d.text for d in there.ranked] == [SUB_DRAFTS[4], SUB_DRAFTS[5]]
    # a draft tried before (or one that does the same) is not tried again
    again = await checks.off_loop(checks.check_draw, site, SUB_DRAFTS[4:], "", frozenset({SUB_DRAFTS[4]}))
    assert [d.problem for d in again.drafts] == ["tried before", None]


def test_the_queue_is_checked_as_the_memory_hands_it_out() -> None:
    site = checks.edit_site("calc.py", "(new function sub(a, b))", CALC, CALC, False)
    memory = GuidedMemory()
    memory.keep(site.key, SUB_DRAFTS[0], [SUB_DRAFTS[2], SUB_DRAFTS[0], SUB_DRAFTS[2], SUB_DRAFTS[4], SUB_DRAFTS[5]])
    checked = checks.check_queue(site, list(memory.waiting), frozenset(memory.tried))
    assert [d.text for d in checked] == [SUB_DRAFTS[2], SUB_DRAFTS[4]]  # up to the first usable one
    assert [memory.take(site.key) for _ in checked] == [d.text for d in checked]
    assert checked[-1].problem is None and memory.waiting == [SUB_DRAFTS[5]]


async def test_a_turn_sends_the_checks_only_the_texts_of_the_files_read_that_still_exist(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Not the session's state (every file as first read, the last test output) nor the
    worktree's listing: the texts whose edit targets are asked for."""
    (tmp_path / "calc.py").write_text(CALC)
    history: list[dict[str, Any]] = [{"role": "system", "content": "s"}, {"role": "user", "content": "Fix calc.py."}]
    for index, path in enumerate(("calc.py", "gone.py")):
        history += [{"role": "assistant", "content": None, "tool_calls": [
                        {"id": f"c{index}", "type": "function",
                         "function": {"name": "read_file", "arguments": f'{{"path": "{path}"}}'}}]},
                    {"role": "tool", "tool_call_id": f"c{index}", "content": CALC}]
    sent: list[tuple[str, tuple[Any, ...]]] = []

    class Stop(Exception):
        pass

    async def spy(work: Any, *args: Any) -> Any:
        sent.append((work.__name__, args))
        raise Stop

    monkeypatch.setattr(guided_turn, "off_loop", spy)
    turn = guided_turn.GuidedTurn(_SlowDrafts(SUB_DRAFTS[4]), history, root=tmp_path,  # type: ignore[arg-type]
                                  task="Fix calc.py.", config=AgentConfig(), session_id="s1", turn=3,
                                  max_tokens=512, emit=lambda e: None)
    with pytest.raises(Stop):
        await turn.run()
    assert sent == [("edit_targets_of", ({"calc.py": CALC},))]  # gone.py was deleted since it was read
    assert checks.edit_targets_of({"calc.py": CALC, "notes.md": "x\n", "broken.py": "def (\n"}) == {
        "calc.py": ["add", "mul", WHOLE_FILE], "notes.md": [WHOLE_FILE], "broken.py": [WHOLE_FILE]}


class _SlowDrafts:
    """A stand-in model: each request gets ``n`` copies of the draft."""

    def __init__(self, text: str) -> None:
        self.text = text

    async def stream_chat(self, messages: Any, *, extra: dict[str, Any] | None = None, **_: Any):
        for index in range(int((extra or {}).get("n", 1))):
            yield ChatDelta(content=self.text, index=index)


def held_batch(started: Path, go: Path) -> str:
    """A batch that runs until the test lets it end (in a check process: it imports this module)."""
    started.touch()
    for _ in range(6000):
        if go.exists():
            return "done"
        time.sleep(0.01)
    return "never let go"


async def test_a_turn_cancelled_while_its_drafts_are_checked_leaves_nothing_running(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "calc.py").write_text(CALC)
    task = "Add a function sub(a, b) to calc.py that returns a - b."
    history = [{"role": "system", "content": "s"}, {"role": "user", "content": task},
               {"role": "assistant", "content": None, "tool_calls": [
                   {"id": "c1", "type": "function", "function": {"name": "read_file",
                                                                  "arguments": '{"path": "calc.py"}'}}]},
               {"role": "tool", "tool_call_id": "c1", "content": CALC}]
    started, go = tmp_path / "started", tmp_path / "go"
    real = checks.off_loop
    answered: list[str] = []

    async def held(work: Any, *args: Any) -> Any:
        if work is checks.check_draw:  # the draw's batch is held in its process until the test says go
            answered.append(await real(held_batch, started, go))
        return await real(work, *args)

    monkeypatch.setattr(guided_turn, "off_loop", held)
    memory = GuidedMemory()
    turn = guided_turn.GuidedTurn(_SlowDrafts(SUB_DRAFTS[4]), history, root=tmp_path, task=task,  # type: ignore[arg-type]
                                  config=AgentConfig(), session_id="s1", turn=2, max_tokens=512,
                                  emit=lambda e: None, memory=memory)
    running = asyncio.create_task(turn.run(), name="guided-turn")
    for _ in range(3000):
        if started.exists() or running.done():
            break
        await asyncio.sleep(0.01)
    assert started.exists(), running
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(running, 30)  # ends while the batch still runs: it is not waited for
    assert not go.exists() and answered == [] and memory.key == ()  # the memory is as it was
    assert [t for t in asyncio.all_tasks() if t is not asyncio.current_task()] == []
    go.touch()  # the batch ends; its answer goes nowhere, and the pool serves on
    assert await real(os.getppid) == os.getpid()


def test_a_draft_is_parsed_without_warnings_on_stderr() -> None:
    with warnings.catch_warnings(record=True) as seen:
        assert parses("x = 1if True else 2\ny = '\\d'\n") is None
    assert [w for w in seen if issubclass(w.category, (SyntaxWarning, DeprecationWarning))] == []
