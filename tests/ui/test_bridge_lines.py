"""What a pane's transcript line says of a tool call, read from the tool's spec."""

from __future__ import annotations

from tests.agent.test_toolcalls import MIXED_FORMS_DIFF
from workstation.core import agent_events as ev
from workstation.ui.bridge import tool_line


def test_an_edit_in_either_marker_form_shows_its_line_counts() -> None:
    for diff, counts in ((MIXED_FORMS_DIFF, "+4 −3"),
                         ("<<<<<<< SEARCH\na\nb\n=======\nc\n>>>>>>> REPLACE", "+1 −2")):  # was +0 −0
        event = ev.ToolCallStarted(session_id="s", call_id="c1", tool="replace_in_file",
                                   arguments={"path": "x.py", "diff": diff}, summary="x.py")
        assert tool_line(event)[0] == f"✎ x.py  {counts}"
