"""The guided protocol's parts: symbols, workspace, state from a history, the narrowed
choice and its regular expressions (checked with Python's ``re``, whose dialect covers the
subset the engine's xgrammar compiles), model sizes and protocol choice."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from workstation.agent.config import AgentConfig, ProtocolChoice
from workstation.agent.guided import actions
from workstation.agent.guided.actions import Arg, Choice, Option, call_text, choice_regex, choose, parse_call
from workstation.agent.guided.state import read_state
from workstation.agent.guided.symbols import (
    WHOLE_FILE, find_symbol, header_line, parses, python_symbols, replace_symbol, symbol_source,
)
from workstation.agent.guided.drafts import code_regex
from workstation.agent.guided.workspace import Workspace, detect_test_command, look, mentioned_paths
from workstation.agent.model_size import model_parameters, parameters_from_config, parameters_from_name
from workstation.agent.protocols import choose_protocol
from workstation.core.agent_events import ToolProtocol
from workstation.core.endpoints import Endpoint

SOURCE = '''"""Stock."""

LIMIT = [
    1,
    2,
]


class Inventory:
    def __init__(self):
        self._items = {}

    @property
    def size(self):
        return len(self._items)

    def total_value(self):
        return sum(item.price for item in self._items.values())


def helper(x):
    return x + 1
'''


def test_symbols_and_rewriting_one() -> None:
    names = [s.name for s in python_symbols(SOURCE)]
    assert names == ["LIMIT", "Inventory", "Inventory.__init__", "Inventory.size", "Inventory.total_value",
                     "helper"]
    method = find_symbol(SOURCE, "Inventory.total_value")
    assert method.indent == 4 and header_line(SOURCE, method) == "def total_value(self):"
    assert symbol_source(SOURCE, method).startswith("def total_value(self):\n    return sum(")
    new = "def total_value(self):\n    return sum(i.price * i.quantity for i in self._items.values())\n"
    changed = replace_symbol(SOURCE, method, new)
    assert parses(changed) is None
    assert "        return sum(i.price * i.quantity" in changed and "helper" in changed
    assert find_symbol(SOURCE, "Inventory.size").start_line == find_symbol(changed, "Inventory.size").start_line
    assert python_symbols("def broken(:\n") is None
    assert parses("def broken(:\n").startswith("line 1")


def test_workspace_files_mentions_and_test_command(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "core.py").write_text("x = 1\n")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_core.py").write_text("def test(): pass\n")
    (tmp_path / ".gitignore").write_text("*.pyc\n")
    (tmp_path / "logo.png").write_bytes(b"\x89PNG")
    (tmp_path / "__pycache__").mkdir()
    (tmp_path / "__pycache__" / "x.pyc").write_bytes(b"0")
    task = "total_value in pkg/core.py must use item.price * item.quantity; also add pkg/extra.py. Run pytest."
    assert mentioned_paths(task) == ["pkg/core.py", "pkg/extra.py"]  # item.price is no file
    ws = look(tmp_path, task)
    assert ws.files == ("pkg/core.py", "tests/test_core.py")  # named first; no dot-files, binaries, caches
    assert ws.mentioned == ("pkg/core.py",) and ws.new_paths == ("pkg/extra.py",)
    assert ws.test_command == "python -m pytest -q" and "total_value" in ws.words
    assert detect_test_command(tmp_path, "then run python -m pytest -q tests/test_core.py") == \
        "python -m pytest -q tests/test_core.py"
    node = tmp_path / "node"
    node.mkdir()
    (node / "package.json").write_text(json.dumps({"scripts": {"test": "jest"}}))
    assert detect_test_command(node) == "npm test --silent"
    assert detect_test_command(tmp_path / "pkg") is None


def _call(cid: str, name: str, **args: str) -> dict:
    return {"role": "assistant", "content": None,
            "tool_calls": [{"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}]}


def _result(cid: str, text: str) -> dict:
    return {"role": "tool", "tool_call_id": cid, "content": text}


def test_state_is_read_from_the_history() -> None:
    history = [
        {"role": "system", "content": "s"}, {"role": "user", "content": "task"},
        _call("1", "read_file", path="a.py"), _result("1", "def f():\n    return 1\n"),
        _call("2", "read_file", path="nope.py"), _result("2", "[ERROR] nope.py does not exist."),
        _call("3", "replace_in_file", path="a.py", target="f", diff="..."), _result("3", "Applied 1 block to a.py."),
    ]
    state = read_state(history, "python -m pytest -q")
    assert list(state.reads) == ["a.py"] and state.first_reads["a.py"].startswith("def f()")
    assert state.changed_since_test == 1 and state.shown_current("a.py") and state.attempts("a.py", "f") == 1
    history += [_call("4", "execute_command", command="python -m pytest -q"),
                _result("4", "Exit code: 1\nOutput:\nE   assert 1 == 2\n1 failed")]
    state = read_state(history, "python -m pytest -q")
    assert (state.test_runs, state.last_test_passed, state.changed_since_test) == (1, False, 0)
    history += [_call("5", "replace_in_file", path="a.py", target="f", diff="..."),
                _result("5", "a.py is unchanged (the REPLACE parts equal the SEARCH parts).")]
    assert read_state(history, "python -m pytest -q").changed_since_test == 0  # no change, no test due


WS_FILES = ("pkg/core.py", "README.md", "tests/test_core.py")


def _ws(tmp_path: Path, task: str) -> Workspace:
    (tmp_path / "pkg").mkdir(exist_ok=True)
    (tmp_path / "pkg" / "core.py").write_text(SOURCE)
    (tmp_path / "README.md").write_text("# pkg\n")
    (tmp_path / "tests").mkdir(exist_ok=True)
    (tmp_path / "tests" / "test_core.py").write_text("def test(): pass\n")
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'pkg'\n")
    return look(tmp_path, task)


def test_the_choice_follows_the_task(tmp_path: Path) -> None:
    ws = _ws(tmp_path, "Inventory.total_value in pkg/core.py ignores the quantity. Then run the tests.")
    fresh = read_state([], ws.test_command)
    first = choose(fresh, ws, {})
    assert [o.tool for o in first.options] == ["read_file"]  # the named file, and only it
    assert first.options[0].args == (Arg("path", ("pkg/core.py",)),)
    read = read_state([_call("1", "read_file", path="pkg/core.py"), _result("1", SOURCE)], ws.test_command)
    targets = {"pkg/core.py": actions.edit_targets([s.name for s in python_symbols(SOURCE)])}
    second = choose(read, ws, targets)
    assert second.options == (Option("replace_in_file", (Arg("path", ("pkg/core.py",)),
                                                         Arg("target", ("Inventory.total_value",)))),)
    edited = read_state([_call("1", "read_file", path="pkg/core.py"), _result("1", SOURCE),
                         _call("2", "replace_in_file", path="pkg/core.py", target="Inventory.total_value"),
                         _result("2", "Applied 1 SEARCH/REPLACE block to pkg/core.py.")], ws.test_command)
    assert choose(edited, ws, targets).tools == ("execute_command",)  # run the tests after an edit


def test_a_vague_task_offers_every_file_and_target(tmp_path: Path) -> None:
    ws = _ws(tmp_path, "Something is off. Fix it.")
    first = choose(read_state([], ws.test_command), ws, {})
    assert first.tools == ("read_file", "execute_command")
    assert set(first.options[0].args[0].values) == {"pkg/core.py", "README.md", "pyproject.toml",
                                                     "tests/test_core.py"}
    history = [_call("1", "read_file", path="pkg/core.py"), _result("1", SOURCE),
               _call("2", "read_file", path="tests/test_core.py"), _result("2", "def test(): pass\n")]
    targets = {"pkg/core.py": actions.edit_targets(["helper"]), "tests/test_core.py": actions.edit_targets(["test"])}
    choice = choose(read_state(history, ws.test_command), ws, targets)
    edit_paths = [o.args[0].values for o in choice.options if o.tool == "replace_in_file"]
    assert edit_paths == [("pkg/core.py",)]  # test files are not offered while code was read
    read_again = [o for o in choice.options if o.tool == "read_file"][0].args[0].values
    assert "pkg/core.py" not in read_again  # a file shown as it is now is not offered again


def test_finish_comes_once_the_tests_pass_after_a_change(tmp_path: Path) -> None:
    ws = _ws(tmp_path, "Fix helper in pkg/core.py.")
    history = [_call("1", "read_file", path="pkg/core.py"), _result("1", SOURCE),
               _call("2", "replace_in_file", path="pkg/core.py", target="helper"), _result("2", "Applied 1 block."),
               _call("3", "execute_command", command="python -m pytest -q"), _result("3", "Exit code: 0\nOutput:\n1 passed")]
    assert choose(read_state(history, ws.test_command), ws, {}).tools == ("attempt_completion",)


@pytest.mark.parametrize("refusal", [
    "[REFUSED] This action needs approval (command actions need approval), but no one can approve actions "
    "in this session, so it was not run.",
    "[DENIED] The user denied this action.",
])
def test_a_test_command_that_may_not_run_is_not_asked_again(tmp_path: Path, refusal: str) -> None:
    """A headless session with commands not auto-approved ran `python -m pytest -q` four times
    in a row, each refused, until its turn limit (the tuner's agent check, on the CPU engine)."""
    from workstation.agent.guided.texts import completion_result

    ws = _ws(tmp_path, "Fix helper in pkg/core.py.")
    history = [_call("1", "read_file", path="pkg/core.py"), _result("1", SOURCE),
               _call("2", "replace_in_file", path="pkg/core.py", target="helper"), _result("2", "Applied 1 block."),
               _call("3", "execute_command", command="python -m pytest -q"), _result("3", refusal)]
    state = read_state(history, ws.test_command)
    assert state.tests_refused.startswith(refusal[:10]) and state.test_runs == 0
    choice = choose(state, ws, {})
    assert choice.tools == ("attempt_completion",) and "may not run" in choice.hint
    assert "not allowed to run" in completion_result(["pkg/core.py"], ws.test_command, None, state.tests_refused)
    # another command refused is not the tests: they are still due
    other = [*history[:4], _call("3", "execute_command", command="rm -rf build"), _result("3", refusal)]
    assert choose(read_state(other, ws.test_command), ws, {}).tools == ("execute_command",)
    # a person's follow-up after the refusal and the finish: the tests are asked for again
    # (a headless session, refused again, then finishes: one refusal per message)
    from workstation.agent.prompts import user_feedback

    finished = [*history, _call("4", "attempt_completion", result="done"), _result("4", "The result was shown.")]
    assert read_state(finished, ws.test_command).completed
    followed = [*finished, {"role": "user", "content": user_feedback("Run the tests again and fix what fails.")}]
    again = read_state(followed, ws.test_command)
    assert not again.tests_refused and not again.completed
    assert choose(again, ws, {}).tools == ("execute_command",)
    refused_again = [*followed, _call("5", "execute_command", command="python -m pytest -q"), _result("5", refusal)]
    assert choose(read_state(refused_again, ws.test_command), ws, {}).tools == ("attempt_completion",)


def test_a_function_the_task_adds_is_offered_as_a_new_function(tmp_path: Path) -> None:
    ws = _ws(tmp_path, "Add a new function double(x) to pkg/core.py that returns x * 2.")
    assert ws.new_functions == ("double(x)",)
    targets = {"pkg/core.py": actions.edit_targets([s.name for s in python_symbols(SOURCE)])}
    assert actions.narrow_targets(targets, ws) == {"pkg/core.py": ["(new function double(x))"]}
    # once the file has it, it is a function like the others (named by the task: offered alone)
    had = {"pkg/core.py": actions.edit_targets(["helper", "double"])}
    assert actions.narrow_targets(had, ws) == {"pkg/core.py": ["double"]}
    # a method, or a function the task only names, is no new function
    assert _ws(tmp_path, "Add a method undo(self) to Stack in pkg/core.py.").new_functions == ()
    assert _ws(tmp_path, "The function helper(x) in pkg/core.py is wrong.").new_functions == ()


def test_a_new_function_that_copies_its_neighbour_is_its_twin() -> None:
    from workstation.agent.guided.symbols import twin_function

    text = 'def add(a, b):\n    """Sum."""\n    return a + b\n\n\ndef mul(a, b):\n    return a * b\n'
    assert twin_function("def sub(a, b):\n    return a + b\n", text) == "add"  # docstrings aside
    assert twin_function("def sub(a, b):\n    return a - b\n", text) is None
    assert twin_function("def sub(a, b):\n    return (\n", text) is None


def test_choice_regex_accepts_exactly_the_allowed_calls() -> None:
    choice = Choice((
        Option("read_file", (Arg("path", ("a.py", 'we"ird/b.py')),)),
        Option("replace_in_file", (Arg("path", ("a.py",)), Arg("target", ("Inventory.total_value", WHOLE_FILE)))),
        Option("execute_command", (Arg("command", ("python -m pytest -q",)),)),
        Option("attempt_completion"),
        Option("write_to_file", (Arg("path", pattern="(pkg/)?" + actions.NEW_NAME_PATTERN),)),
    ), "hint")
    rx = re.compile(choice_regex(choice))
    good = [call_text("read_file", {"path": "a.py"}), call_text("read_file", {"path": 'we"ird/b.py'}),
            call_text("replace_in_file", {"path": "a.py", "target": "Inventory.total_value"}),
            call_text("replace_in_file", {"path": "a.py", "target": WHOLE_FILE}),
            call_text("execute_command", {"command": "python -m pytest -q"}),
            call_text("attempt_completion", {}), call_text("write_to_file", {"path": "pkg/new_mod.py"})]
    for text in good:
        assert rx.fullmatch(text), text
        name, args = parse_call(text)
        assert call_text(name, args) == text
    bad = [call_text("read_file", {"path": "c.py"}), call_text("replace_in_file", {"path": "a.py", "target": "x"}),
           call_text("execute_command", {"command": "rm -rf /"}), call_text("write_to_file", {"path": "../x.py"}),
           call_text("write_to_file", {"path": "other/x.py"}), '<tool_call>\n{"name": "read_file"}\n</tool_call>']
    for text in bad:
        assert not rx.fullmatch(text), text
    assert parse_call("no call") is None


def test_code_regex_holds_the_draft_to_the_function() -> None:
    rx = re.compile(code_regex("python", "def total_value(self):", "def"))
    assert rx.fullmatch("```python\ndef total_value(self):\n    return 1\n\n    # done `here`\n```")
    assert not rx.fullmatch("```python\ndef total_value(self):\n```")  # a body is needed
    assert not rx.fullmatch("```python\ndef other(self):\n    return 1\n```")
    assert not rx.fullmatch("```python\ndef total_value(self):\n    return 1\ndef more():\n    pass\n```")
    assign = re.compile(code_regex("python", "LIMIT = [", "assign"))
    assert assign.fullmatch("```python\nLIMIT = [\n    1,\n]\n```")
    whole = re.compile(code_regex("markdown", None, "file"))
    assert whole.fullmatch("```markdown\n# title\n\ntext with `code`\n```")
    assert not whole.fullmatch("```markdown\n```inner\n```")


def test_model_sizes() -> None:
    smollm2 = {"hidden_size": 576, "num_hidden_layers": 30, "vocab_size": 49152, "intermediate_size": 1536,
               "num_attention_heads": 9, "num_key_value_heads": 3, "head_dim": 64, "tie_word_embeddings": True}
    assert parameters_from_config(smollm2) == 134_515_008  # transformers counts 134,515,008
    qwen7b = {"hidden_size": 3584, "num_hidden_layers": 28, "vocab_size": 152064, "intermediate_size": 18944,
              "num_attention_heads": 28, "num_key_value_heads": 4, "tie_word_embeddings": False}
    assert 7.0e9 < parameters_from_config(qwen7b) < 7.8e9
    assert parameters_from_config({"hidden_size": 8}) is None
    assert parameters_from_name("SmolLM2-135M-Instruct") == 135_000_000
    assert parameters_from_name("Qwen2.5-Coder-1.5B") == 1_500_000_000
    assert parameters_from_name("gpt-4.1-mini") is None
    assert model_parameters(None, "llama-3-70b") == 70_000_000_000


@pytest.mark.parametrize("size,name,native,expected", [
    (134_515_008, "smollm2", True, ToolProtocol.GUIDED),
    (7_600_000_000, "qwen", True, ToolProtocol.NATIVE),
    (7_600_000_000, "qwen", False, ToolProtocol.TEXT),
    (None, "SmolLM2-135M", True, ToolProtocol.GUIDED),  # size unknown: by name
    (None, "big-model", None, ToolProtocol.NATIVE),
])
def test_protocol_by_model_size(size, name, native, expected) -> None:
    endpoint = Endpoint("http://127.0.0.1:9", "", name, native_tools=native)
    protocol, why = choose_protocol(AgentConfig(model_parameters=size), endpoint)
    assert protocol is expected, why
    if size and native:
        assert "parameters" in why


def test_the_threshold_is_a_setting() -> None:
    endpoint = Endpoint("http://127.0.0.1:9", "", "qwen")
    assert choose_protocol(AgentConfig(model_parameters=7_600_000_000, guided_max_parameters=8_000_000_000),
                           endpoint)[0] is ToolProtocol.GUIDED
    assert choose_protocol(AgentConfig(model_parameters=134_515_008, protocol=ProtocolChoice.NATIVE),
                           endpoint)[0] is ToolProtocol.NATIVE


def test_the_kept_draft_parses_changes_something_and_does_what_the_task_spells_out() -> None:
    from workstation.agent.guided.drafts import Draft, max_draft_tokens, pick

    before = 'def complete(self, number):\n    self.items[number]["done"] = True\n    self.save()\n'
    task = "complete marks the wrong item. Numbers start at 1, so use self.items[number - 1]."

    def draft(body: str, problem: str | None = None) -> Draft:
        return Draft(f"```python\n{body}```", body, problem)

    copied = draft(before, "changes nothing")
    broken = draft('def complete(self, number):\n    self.items[number - 1]["done"] = (\n', "line 2: '(' was never closed")
    rambling = draft('def complete(self, number):\n    self.items[number]["done"] = True\n    self.items[0] = 1\n'
                     '    self.save()\n')
    right = draft('def complete(self, number):\n    self.items[number - 1]["done"] = True\n    self.save()\n')
    assert pick([copied, broken, rambling, right], before, task) is right
    assert pick([copied, rambling], before, task) is rambling  # the only usable one
    assert pick([copied, broken], before, task) is copied  # none usable: the first (the tests will say so)
    assert 128 <= max_draft_tokens(before, 1024) < 1024 and max_draft_tokens("x" * 9000, 1024) == 1024


def test_new_undefined_names_are_what_a_draft_adds() -> None:
    from workstation.agent.guided.symbols import new_undefined_names, undefined_names

    before = "def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    return a * b\n"
    assert new_undefined_names(before, before.replace("a + b", "a + m(m(calc.plro, b, 1))")) == ["calc", "m"]
    assert new_undefined_names(before, before.replace("a + b", "a + b, np.add(a, b)")) == ["np"]
    # an import inside the function, a builtin, a local: all defined
    assert new_undefined_names(before, before.replace("return a + b", "import math\n    s = abs(a)\n"
                                                                       "    return math.fsum([s, b])")) == []
    # a name the file already leaves undefined (a star import, a global set elsewhere) is not the draft's
    assert new_undefined_names("def f():\n    return G\n", "def f():\n    return G + 1\n") == []
    assert undefined_names("def (") is None


def test_a_guided_turn_sends_a_bounded_view_of_the_history() -> None:
    from workstation.agent.guided.state import request_view

    head = [{"role": "system", "content": "s"}, {"role": "user", "content": "task"}]
    steps = []
    for i in range(6):
        steps += [_call(str(i), "read_file", path="a.py"), _result(str(i), f"text {i}")]
    view = request_view(head + steps)
    assert view[:2] == head and "4 earlier steps not shown" in view[2]["content"]
    assert view[3:] == steps[-4:]  # the last two calls with their results
    assert request_view(head + steps[:4]) == head + steps[:4]


def test_the_memory_keeps_untried_drafts_of_one_function() -> None:
    from workstation.agent.guided.drafts import GuidedMemory, same_code

    memory = GuidedMemory()
    key = ("a.py", "f", "def f():\n    return 1\n")
    assert memory.take(key) is None
    memory.keep(key, "d1", ["d2", "d3", "d1"])
    assert memory.take(key) == "d2" and memory.take(("a.py", "g", "")) is None
    memory.keep(key, "d2", ["d3", "d4"])
    assert [memory.take(key), memory.take(key), memory.take(key)] == ["d3", "d4", None]
    memory.keep(("a.py", "g", ""), "x", ["y"])  # another function: the old drafts are gone
    assert memory.take(key) is None and memory.take(("a.py", "g", "")) == "y"
    assert same_code("a = 1  \n\n\n", "a = 1\n") and not same_code("a = 1\n", "a = 2\n")


def test_drafts_get_hotter_as_drafts_fail() -> None:
    from workstation.agent.guided.turn import MAX_DRAFT_TEMPERATURE, draft_temperature

    assert draft_temperature(0.5, 0) == 0.5 and draft_temperature(0.5, 4) == 0.7
    assert draft_temperature(0.5, 100) == MAX_DRAFT_TEMPERATURE


def test_drafts_that_do_the_same_are_one_draft() -> None:
    from workstation.agent.guided.drafts import Draft, rank
    from workstation.agent.guided.symbols import program_key

    bug = 'def mean(values):\n    """Arithmetic mean."""\n    return sum(values) / (len(values) - 1)\n'
    same = [
        "def mean(values):\n    return sum(values) / (len(values) - 1)\n",  # no docstring
        "def mean(values):\n    'The mean.'\n    return sum(values)/(len(values)-1)  # mean\n",
    ]
    fixed = "def mean(values):\n    return sum(values) / len(values)\n"
    assert all(program_key(code) == program_key(bug) for code in same)
    assert program_key(fixed) != program_key(bug) and program_key("def mean(:\n") is None
    drafts = [Draft(f"```python\n{c}```", c, None, ident=program_key(c) or "") for c in (*same, fixed)]
    assert [d.text for d in rank(drafts, bug, "Divide the sum by len(values).")] == [drafts[0].text, drafts[2].text]


def test_the_memorys_queue_is_the_order_it_hands_drafts_out() -> None:
    """The check processes walk ``waiting`` as it is (``check_queue``): it holds each draft
    once, none tried, in the order ``take`` gives them."""
    from workstation.agent.guided.drafts import GuidedMemory

    memory = GuidedMemory()
    key = ("a.py", "f", "")
    memory.keep(key, "d1", ["d2", "d1", "d2", "d3"])
    memory.keep(key, "d3", ["d4", "d2", "d5"])
    assert memory.waiting == ["d4", "d2", "d5"]
    queued = list(memory.waiting)
    assert [memory.take(key) for _ in range(4)] == [*queued, None]
