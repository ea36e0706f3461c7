"""The guided protocol in the real agent loop (scripted server, real tools, real pytest in a
real sample repository): every reply must match the request's regular expression, the
calls follow the task's state, and the repository's tests pass at the end."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.agent.conftest import git
from tests.helpers.scripted_server import Reply, ScriptedServer, ToolCall
from workstation.agent.guided.actions import call_text
from workstation.agent.guided.texts import SYSTEM_PROMPT_GUIDED
from workstation.core import agent_events as ev
from workstation.core.agent_events import RunStatus, ToolProtocol
from workstation.fleet.sample_repos import create_sample_repository

SMOLLM2_PARAMETERS = 134_515_008
GOOD = ("```python\ndef total_value(self):\n"
        '    """What the whole stock is worth: price times quantity, summed over items."""\n'
        "    return sum(item.price * item.quantity for item in self._items.values())\n```")
EXPLICIT = ("Inventory.total_value in inventory/stock.py ignores the quantity: it must multiply each price "
            "by its quantity, item.price * item.quantity. Then run the tests.")


@pytest.fixture
def bug_repo(tmp_path: Path) -> Path:
    repo = create_sample_repository("inventory", tmp_path / "inventory")
    git(repo, "checkout", "-q", "bug/fix-total-value")
    return repo


def suite_passes(repo: Path) -> bool:
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"], cwd=repo,
                          capture_output=True, text=True, check=False).returncode == 0


def answering(*texts: str, sampled: tuple[str, ...] = ()):
    """A responder: choices and greedy drafts get ``texts`` in order; sampled drafts
    (temperature > 0, drawn at the same time as a greedy one) get ``sampled`` in order.
    Every answer is checked against the request's regex."""
    queue, samples = list(texts), list(sampled)
    seen: list[tuple[str, str]] = []

    def respond(body: dict[str, Any], n: int) -> Reply:
        regex = body["structured_outputs"]["regex"]
        assert "tools" not in body  # byte-stable prompt: the schema travels apart
        source = samples if body.get("temperature") and regex.startswith("```") else queue
        text = source.pop(0)
        assert re.fullmatch(regex, text), f"reply {n} does not match its regex:\n{text}\n{regex}"
        seen.append((regex, text))
        return Reply(text=text)

    respond.seen = seen  # type: ignore[attr-defined]
    return respond


COPY = ("```python\ndef total_value(self):\n"
        '    """What the whole stock is worth: price times quantity, summed over items."""\n'
        "    return sum(item.price for item in self._items.values())\n```")


async def test_an_explicit_task_asks_the_model_only_for_the_code(make_agent, bug_repo: Path) -> None:
    respond = answering(GOOD, sampled=(COPY,))
    async with ScriptedServer(responder=respond) as srv:
        agent, rec = make_agent(srv, root=bug_repo, task=EXPLICIT, model_parameters=SMOLLM2_PARAMETERS,
                                user_present=False)
        outcome = await agent.run()
    assert outcome.status is RunStatus.COMPLETED, outcome
    assert rec.of(ev.ProtocolSelected)[0].protocol is ToolProtocol.GUIDED
    tools = [e.tool for e in rec.of(ev.ToolCallStarted)]
    assert tools == ["read_file", "replace_in_file", "execute_command", "attempt_completion"]
    # the steps the task's state decides take no model turn: only the code is asked for,
    # a greedy draft and, at the same time, sampled ones
    assert sorted((r["temperature"], r.get("n", 1)) for r in srv.requests) == [(0.0, 1), (0.5, 6)]
    request = srv.requests[0]
    assert request["messages"][0]["content"] == SYSTEM_PROMPT_GUIDED
    assert "Write the new code of `Inventory.total_value` in inventory/stock.py" in request["messages"][-1]["content"]
    assert suite_passes(bug_repo)
    assert rec.of(ev.ToolCallFinished)[2].result.startswith("Exit code: 0")
    assert "inventory/stock.py" in outcome.result and "passes" in outcome.result
    shown = "".join(e.text for e in rec.of(ev.TextStreamed))
    assert shown.startswith(GOOD) and "2 drafts, 1 usable" in shown  # the pane shows the code as it comes


async def test_a_vague_task_lets_the_model_choose_and_redraws_broken_code(make_agent, bug_repo: Path) -> None:
    broken = "```python\ndef total_value(self):\n    return sum(item.price *\n```"
    respond = answering(
        call_text("execute_command", {"command": "python -m pytest -q"}),
        call_text("read_file", {"path": "inventory/stock.py"}),
        call_text("replace_in_file", {"path": "inventory/stock.py", "target": "Inventory.total_value"}),
        broken, sampled=(broken, GOOD),
    )
    async with ScriptedServer(responder=respond) as srv:
        agent, rec = make_agent(srv, root=bug_repo, task="A test fails. Fix the code.",
                                model_parameters=SMOLLM2_PARAMETERS, user_present=False)
        outcome = await agent.run()
    assert outcome.status is RunStatus.COMPLETED, outcome
    calls = [(e.tool, e.arguments.get("path") or e.arguments.get("command")) for e in rec.of(ev.ToolCallStarted)]
    assert calls == [("execute_command", "python -m pytest -q"), ("read_file", "inventory/stock.py"),
                     ("replace_in_file", "inventory/stock.py"), ("execute_command", "python -m pytest -q"),
                     ("attempt_completion", None)]
    regexes = [regex for regex, _ in respond.seen]
    reads = [[part for part in rx.split("<tool_call>") if "read_file" in part] for rx in regexes[:3]]
    assert "tests\\/test_inventory\\.py" in reads[0][0]  # any file at first …
    assert "inventory\\/stock" not in reads[2][0]  # … but not one shown as it is now
    assert len(srv.requests) == 6  # three choices; drafts that do not parse are drawn again once
    assert suite_passes(bug_repo)
    assert rec.of(ev.MistakeCounted) == []


async def test_a_draft_that_uses_names_nothing_defines_is_not_tried(make_agent, bug_repo: Path) -> None:
    """SmolLM2 wrote ``return a + m(m(calc.plro, b, 1))`` and ``np.add(a, b)`` into files that
    define neither; both parse, so they were tried (and kept, where no test ran)."""
    garbage = ("```python\ndef total_value(self):\n"
               "    return np.sum(item.price * qty for item in self._items.values())\n```")
    respond = answering(garbage, sampled=(garbage, GOOD))
    async with ScriptedServer(responder=respond) as srv:
        agent, rec = make_agent(srv, root=bug_repo, task=EXPLICIT, model_parameters=SMOLLM2_PARAMETERS,
                                user_present=False)
        outcome = await agent.run()
    assert outcome.status is RunStatus.COMPLETED, outcome
    tools = [e.tool for e in rec.of(ev.ToolCallStarted)]
    assert tools == ["read_file", "replace_in_file", "execute_command", "attempt_completion"]  # GOOD, first time
    shown = "".join(e.text for e in rec.of(ev.TextStreamed))
    assert "3 drafts, 1 usable" in shown  # the greedy one and a sampled one use np and qty
    assert suite_passes(bug_repo)


async def test_a_function_the_task_adds_is_written_alone_and_appended(make_agent, tmp_path: Path) -> None:
    """Asked for the whole file with one function more, SmolLM2 renamed add and mul and
    invented four more; asked for the new function alone, under the task's signature, it
    writes that, and the file keeps the rest."""
    from workstation.fleet.sample_repos import scratch_repository

    calc = "def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    return a * b\n"
    repo = scratch_repository(tmp_path / "calc", {
        "calc.py": calc, "pyproject.toml": "[project]\nname = 'calc'\n",
        "test_calc.py": "from calc import sub\n\n\ndef test_sub():\n    assert sub(5, 3) == 2\n"})
    good = "```python\ndef sub(a, b):\n    return a - b\n```"
    respond = answering(good, sampled=("```python\ndef sub(a, b):\n    return a + b\n```",))
    async with ScriptedServer(responder=respond) as srv:
        agent, rec = make_agent(srv, root=repo, task="Add a function sub(a, b) to calc.py that returns a - b.",
                                model_parameters=SMOLLM2_PARAMETERS, user_present=False)
        outcome = await agent.run()
    assert outcome.status is RunStatus.COMPLETED, outcome
    tools = [e.tool for e in rec.of(ev.ToolCallStarted)]
    assert tools == ["read_file", "write_to_file", "execute_command", "attempt_completion"]
    regex, _ = respond.seen[0]
    assert regex.startswith("```python\\ndef sub\\(a, b\\):\\n")  # held to the task's signature
    assert "Write the new function `sub(a, b)` to add to calc.py" in srv.requests[0]["messages"][-1]["content"]
    assert (repo / "calc.py").read_text() == calc + "\n\ndef sub(a, b):\n    return a - b\n"
    # the sampled draft is add's body copied: no new function
    assert "2 drafts, 1 usable" in "".join(e.text for e in rec.of(ev.TextStreamed))
    assert suite_passes(repo)


async def test_failed_tests_try_the_next_queued_draft_without_asking_again(make_agent, bug_repo: Path) -> None:
    wrong = GOOD.replace("item.price * item.quantity", "item.price * item.quantity * 2")
    respond = answering(wrong, sampled=(GOOD,))
    async with ScriptedServer(responder=respond) as srv:
        agent, rec = make_agent(srv, root=bug_repo, task=EXPLICIT, model_parameters=SMOLLM2_PARAMETERS,
                                user_present=False)
        outcome = await agent.run()
    assert outcome.ok
    tools = [e.tool for e in rec.of(ev.ToolCallStarted)]
    assert tools == ["read_file", "replace_in_file", "execute_command", "replace_in_file", "execute_command",
                     "attempt_completion"]
    assert len(srv.requests) == 2  # the second draft came from the queue: generate, then test
    assert suite_passes(bug_repo)


async def test_with_no_draft_left_new_ones_see_the_failure_and_the_code_as_read(make_agent, bug_repo: Path) -> None:
    wrong = GOOD.replace("item.price * item.quantity", "item.price + item.quantity")
    respond = answering(wrong, sampled=(COPY, GOOD))
    async with ScriptedServer(responder=respond) as srv:
        agent, rec = make_agent(srv, root=bug_repo, task=EXPLICIT, model_parameters=SMOLLM2_PARAMETERS,
                                user_present=False)
        outcome = await agent.run()
    assert outcome.ok
    third = srv.requests[2]
    assert (third["temperature"], third["n"]) == (0.55, 6)  # a little hotter after a failed draft
    ask = third["messages"][-1]["content"]
    assert "The tests failed with:" in ask and "assert" in ask
    assert "item.price for item" in ask  # drawn from the code as it was read, not the wrong draft
    assert [e.tool for e in rec.of(ev.ToolCallStarted)].count("execute_command") == 2
    assert suite_passes(bug_repo)


async def test_a_draft_that_does_what_the_code_as_read_does_is_never_tried(make_agent, bug_repo: Path) -> None:
    """The bug without its docstring is not a change: it is not queued after the first draft
    failed, so the next edit draws anew instead of running the tests on the bug again."""
    wrong = GOOD.replace("item.price * item.quantity", "item.quantity")
    undocumented = ("```python\ndef total_value(self):\n"
                    "    return sum(item.price for item in self._items.values())  # the total\n```")
    respond = answering(wrong, sampled=(undocumented, GOOD))
    async with ScriptedServer(responder=respond) as srv:
        agent, rec = make_agent(srv, root=bug_repo, task=EXPLICIT, model_parameters=SMOLLM2_PARAMETERS,
                                user_present=False)
        outcome = await agent.run()
    assert outcome.ok
    tools = [e.tool for e in rec.of(ev.ToolCallStarted)]
    assert tools == ["read_file", "replace_in_file", "execute_command", "replace_in_file", "execute_command",
                     "attempt_completion"]
    assert len(srv.requests) == 3  # the second edit drew anew: the queue held nothing worth a test run
    assert suite_passes(bug_repo)


async def test_a_repeated_call_switches_a_free_session_to_guided(make_agent, bug_repo: Path) -> None:
    read = Reply(tool_calls=[ToolCall("read_file", {"path": "inventory/stock.py"})])
    respond = answering(GOOD, sampled=(COPY,))

    def script(body: dict[str, Any], n: int) -> Reply:
        return read if n < 2 else respond(body, n)

    async with ScriptedServer(responder=script) as srv:
        agent, rec = make_agent(srv, root=bug_repo, task=EXPLICIT, user_present=False)
        outcome = await agent.run()
    assert [e.protocol for e in rec.of(ev.ProtocolSelected)] == [ToolProtocol.NATIVE, ToolProtocol.GUIDED]
    assert rec.of(ev.MistakeCounted) == []  # a recovery step, not a mistake
    assert srv.requests[2]["messages"][0]["content"] == SYSTEM_PROMPT_GUIDED
    assert outcome.ok and suite_passes(bug_repo)


async def test_a_guided_turn_that_fails_still_counts_its_finished_requests(make_agent, bug_repo: Path) -> None:
    """The greedy draft finished (its tokens are spent) when the sampled drafts' request
    failed: the failed turn reports the greedy draft's usage, and the run counts it."""
    from tests.helpers.scripted_server import Fault

    def respond(body: dict[str, Any], n: int) -> Reply | Fault:
        if body.get("temperature"):
            return Fault.http(400, "scripted refusal")
        return Reply(text=GOOD, prompt_tokens=111, completion_tokens=22, delay_s=0.01)

    async with ScriptedServer(responder=respond) as srv:
        agent, rec = make_agent(srv, root=bug_repo, task=EXPLICIT, model_parameters=SMOLLM2_PARAMETERS,
                                user_present=False)
        outcome = await agent.run()
    assert outcome.status is RunStatus.FAILED and "scripted refusal" in outcome.message
    assert len(srv.requests) == 2  # the greedy draft and the sampled ones, at once
    assert [(u.prompt_tokens, u.completion_tokens) for u in rec.of(ev.UsageReported)] == [(111, 22)]
    assert (outcome.prompt_tokens, outcome.completion_tokens) == (111, 22)
