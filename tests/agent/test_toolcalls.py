"""Tool-call delta accumulation, raw ``<tool_call>`` recovery, text-protocol parsing."""

from __future__ import annotations

import pytest

from workstation.agent.protocols import native_reply, text_reply
from workstation.agent.tool_specs import (
    SPECS_BY_NAME, ToolArgumentError, canonical_tool_name, normalize_arguments,
)
from workstation.agent.toolcalls import RawCall, ToolCallAccumulator, parse_text_protocol, recover_tool_calls


def test_accumulates_vllm_deltas() -> None:
    acc = ToolCallAccumulator()
    acc.add([{"id": "chatcmpl-tool-1", "type": "function", "index": 0, "function": {"name": "read_file"}}])
    for piece in ['{"', "path", '":', ' "', "app", ".py", '"}']:
        acc.add([{"index": 0, "function": {"arguments": piece}}])
    [call] = acc.finish()
    assert (call.id, call.name, call.arguments) == ("chatcmpl-tool-1", "read_file", '{"path": "app.py"}')
    assert call.parsed_arguments() == {"path": "app.py"}


def test_accumulates_interleaved_calls_by_index() -> None:
    acc = ToolCallAccumulator()
    acc.add([{"id": "a", "index": 0, "function": {"name": "read_file", "arguments": ""}}])
    acc.add([{"id": "b", "index": 1, "function": {"name": "list_files", "arguments": '{"path"'}}])
    acc.add([{"index": 0, "function": {"arguments": '{"path": "x"}'}}])
    acc.add([{"index": 1, "function": {"arguments": ': "."}'}}])
    calls = acc.finish()
    assert [(c.id, c.name, c.parsed_arguments()) for c in calls] == [
        ("a", "read_file", {"path": "x"}), ("b", "list_files", {"path": "."})]


def test_tolerates_missing_index_repeated_name_object_args_and_late_id() -> None:
    acc = ToolCallAccumulator()
    acc.add([{"function": {"name": "read_file"}}])
    acc.add([{"id": "late", "function": {"name": "read_file", "arguments": {"path": "a.py"}}}])
    acc.add([{"id": "second", "function": {"name": "list_files", "arguments": '{"path": "."}'}}])
    calls = acc.finish()
    assert [(c.name, c.parsed_arguments()) for c in calls] == [
        ("read_file", {"path": "a.py"}), ("list_files", {"path": "."})]
    assert calls[0].id == "late"
    assert calls[1].id == "second"


def test_name_split_over_deltas_is_joined() -> None:
    acc = ToolCallAccumulator()
    acc.add([{"index": 0, "id": "x", "function": {"name": "read_"}}])
    acc.add([{"index": 0, "function": {"name": "file", "arguments": "{}"}}])
    assert acc.finish()[0].name == "read_file"


def test_missing_id_gets_one_and_empty_call_is_dropped() -> None:
    acc = ToolCallAccumulator()
    acc.add([{"index": 0, "function": {"name": "read_file", "arguments": '{"path":"a"}'}}])
    acc.add([{"index": 3, "function": {}}])
    [call] = acc.finish()
    assert call.id.startswith("call_ws_")


def test_cut_off_arguments_say_so() -> None:
    call = RawCall("i", "write_to_file", '{"path": "a.py", "content": "print(')
    with pytest.raises(ValueError, match="cut off"):
        call.parsed_arguments()


def test_recovers_hermes_tool_call_text() -> None:
    text = 'Let me look.\n<tool_call>\n{"name": "read_file", "arguments": {"path": "app.py"}}\n</tool_call>'
    calls, rest = recover_tool_calls(text)
    assert [(c.name, c.parsed_arguments()) for c in calls] == [("read_file", {"path": "app.py"})]
    assert rest == "Let me look."


def test_recovers_cut_off_tool_call_and_bare_json() -> None:
    calls, _ = recover_tool_calls('<tool_call>\n{"name": "list_files", "arguments": {"path": "."')
    assert [(c.name, c.parsed_arguments()) for c in calls] == [("list_files", {"path": "."})]
    calls, rest = recover_tool_calls('[{"name": "read_file", "parameters": {"path": "b.py"}}]')
    assert [(c.name, c.parsed_arguments()) for c in calls] == [("read_file", {"path": "b.py"})]
    assert rest == ""
    calls, rest = recover_tool_calls("Just prose {not json}")
    assert calls == [] and rest == "Just prose {not json}"


def test_native_reply_recovers_and_stores_only_valid_json_arguments() -> None:
    reply = native_reply('<tool_call>{"name": "read_file", "arguments": {"path": "a"}}</tool_call>', [])
    assert reply.recovered and reply.message["tool_calls"][0]["function"]["name"] == "read_file"
    broken = native_reply("", [RawCall("c1", "read_file", '{"path": ')])
    assert broken.message["tool_calls"][0]["function"]["arguments"] == "{}"
    assert broken.message["content"] is None


def test_text_protocol_blocks() -> None:
    text = (
        "I will write the file.\n<write_to_file>\n<path>hello.py</path>\n<content>\n"
        "x = '<content>inner</content>'\nprint(x)\n</content>\n</write_to_file>\n"
        "And then <read_file><path>b.py</path></read_file> hallucinated result"
    )
    blocks = parse_text_protocol(text)
    assert [b.name for b in blocks] == ["write_to_file", "read_file"]
    assert blocks[0].arguments == {"path": "hello.py", "content": "x = '<content>inner</content>'\nprint(x)\n"}
    assert blocks[0].complete
    reply = text_reply(text)
    assert reply.ignored_blocks == 1
    assert reply.message["content"].endswith("</write_to_file>")
    assert reply.calls[0].parsed_arguments()["path"] == "hello.py"


def test_text_protocol_unclosed_block() -> None:
    [block] = parse_text_protocol("<read_file>\n<path>a.py</path>\n")
    assert block.arguments == {"path": "a.py"} and not block.complete
    assert parse_text_protocol("no tools here") == []


def test_normalize_arguments_coerces_and_ignores_extras() -> None:
    spec = SPECS_BY_NAME["read_file"]
    assert normalize_arguments(spec, {"path": "a", "start_line": "3", "end_line": 7.0, "junk": 1}) == {
        "path": "a", "start_line": 3, "end_line": 7}
    assert normalize_arguments(SPECS_BY_NAME["list_files"], {"path": ".", "recursive": "true"})["recursive"] is True
    assert normalize_arguments(SPECS_BY_NAME["ask_followup_question"],
                               {"question": "q", "options": '["a", "b"]'})["options"] == ["a", "b"]
    with pytest.raises(ToolArgumentError, match="missing the required argument 'path'"):
        normalize_arguments(spec, {"file": "a"})
    with pytest.raises(ToolArgumentError, match="must be an integer"):
        normalize_arguments(spec, {"path": "a", "start_line": "ten"})
    with pytest.raises(ToolArgumentError, match="JSON object"):
        normalize_arguments(spec, ["a"])


def test_canonical_tool_names() -> None:
    assert canonical_tool_name("functions.read_file") == "read_file"
    assert canonical_tool_name("Read-File") == "read_file"
    assert canonical_tool_name("rm_rf") is None


def test_every_tool_spec_carries_what_runs_and_shows_it() -> None:
    from workstation.agent.tool_specs import COMPLETION_TOOL, QUESTION_TOOL, TOOL_SPECS

    for spec in TOOL_SPECS:
        interaction = spec.name in (COMPLETION_TOOL, QUESTION_TOOL)
        assert (spec.run is None) == interaction, spec.name
        assert spec.mark and spec.mark != "•", spec.name


def test_edit_line_counts_read_both_marker_forms_the_agent_accepts() -> None:
    from workstation.agent.tool_specs import SPECS_BY_NAME

    replace = SPECS_BY_NAME["replace_in_file"]
    new_form = "------- SEARCH\na\nb\n=======\nc\n+++++++ REPLACE"
    old_form = "<<<<<<< SEARCH\na\nb\n=======\nc\n>>>>>>> REPLACE\n"
    assert replace.edit_line_counts({"diff": new_form}) == (1, 2)
    assert replace.edit_line_counts({"diff": old_form}) == (1, 2)  # was +0 −0 in the panes
    assert SPECS_BY_NAME["write_to_file"].edit_line_counts({"content": "x\ny"}) == (2, 0)
    assert SPECS_BY_NAME["read_file"].edit_line_counts({"path": "a"}) is None


def test_edit_counts_come_from_the_parser_the_agent_applies_edits_with() -> None:
    """One parser: the counts a pane shows are the lines of the blocks parse_blocks applies, in
    both marker forms; a malformed or unfinished diff (still streaming) is counted, never raises."""
    from workstation.agent.diff_blocks import count_changed_lines, parse_blocks

    blocks = parse_blocks(MIXED_FORMS_DIFF)
    assert count_changed_lines(MIXED_FORMS_DIFF) == (
        sum(len(b.replace.split("\n")) for b in blocks), sum(len(b.search.split("\n")) for b in blocks)) == (4, 3)
    assert count_changed_lines("<<<<<<< SEARCH\na\nb\n=======\nc") == (1, 2)  # still streaming
    assert count_changed_lines("<<<<<<< SEARCH\na\n>>>>>>> REPLACE") == (0, 1)  # no divider
    assert count_changed_lines("<<<<<<< SEARCH\na\n=======\nb\n------- SEARCH\nc\n=======\n") == (1, 2)
    assert count_changed_lines("no blocks at all") == (0, 0)


MIXED_FORMS_DIFF = ("prose\n<<<<<<< SEARCH\na\nb\n=======\nc\n>>>>>>> REPLACE\n"
                    "------- SEARCH\nd\n=======\ne\nf\ng\n+++++++ REPLACE\n")
