"""Repository rules: found from the worktree root down to the working folder, capped, and
put in the system prompt so that sessions of one repository share it byte for byte."""

from __future__ import annotations

import os
from pathlib import Path

from tests.helpers.scripted_server import Reply, ScriptedServer, ToolCall
from workstation.agent.config import ProtocolChoice
from workstation.agent.prompts import SYSTEM_PROMPT_NATIVE, SYSTEM_PROMPT_TEXT
from workstation.agent.rules import SECTION_HEAD, load_rules, rules_cap
from workstation.agent.transcript import render_line
from workstation.core import agent_events as ev
from workstation.core.agent_events import RunStatus, ToolProtocol

DONE = Reply(tool_calls=[ToolCall("attempt_completion", {"result": "ok"})])


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_nested_files_top_down_nearest_last(tmp_path: Path) -> None:
    write(tmp_path / "AGENTS.md", "Use tabs.")
    write(tmp_path / "CLAUDE.md", "Run make test.")
    write(tmp_path / ".clinerules", "Never touch vendor/.")
    write(tmp_path / "pkg" / "AGENTS.md", "Use spaces in pkg.")
    write(tmp_path / "pkg" / "sub" / ".clinerules" / "b-style.md", "B rule.")
    write(tmp_path / "pkg" / "sub" / ".clinerules" / "a-tests.md", "A rule.")
    write(tmp_path / "pkg" / "sub" / ".clinerules" / "image.png", "not a rule")
    write(tmp_path / "other" / "AGENTS.md", "not on the way down")
    rules = load_rules(tmp_path, tmp_path / "pkg" / "sub", max_chars=10_000)
    assert [f.path for f in rules.files] == [
        "AGENTS.md", "CLAUDE.md", ".clinerules", "pkg/AGENTS.md",
        "pkg/sub/.clinerules/a-tests.md", "pkg/sub/.clinerules/b-style.md",
    ]
    text = rules.section
    assert text.startswith(SECTION_HEAD) and "nearer to your working folder" in text
    assert text.index("Use tabs.") < text.index("Use spaces in pkg.") < text.index("B rule.")
    assert "not on the way down" not in text and "not a rule" not in text
    assert not rules.cut and not rules.left_out


def test_same_file_twice_is_read_once_and_links_out_are_not_followed(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    write(repo / "AGENTS.md", "The rules.")
    os.symlink("AGENTS.md", repo / "CLAUDE.md")
    secret = write(tmp_path / "secret.txt", "PRIVATE KEY")
    os.symlink(secret, repo / ".clinerules")
    rules = load_rules(repo, repo, max_chars=10_000)
    assert [f.path for f in rules.files] == ["AGENTS.md"]
    assert "PRIVATE KEY" not in rules.section
    assert rules.skipped and ".clinerules" in rules.skipped[0] and "not followed" in rules.skipped[0]


def test_cap_cuts_the_farthest_first_with_a_note(tmp_path: Path) -> None:
    write(tmp_path / "AGENTS.md", "\n".join(f"top rule {i}" for i in range(400)))  # ~4.7k chars
    write(tmp_path / "src" / "AGENTS.md", "near rule")
    rules = load_rules(tmp_path, tmp_path / "src", max_chars=1_000)
    near, top = rules.files[1], rules.files[0]
    assert near.path == "src/AGENTS.md" and not near.cut  # the nearest got its share first
    assert top.path == "AGENTS.md" and top.cut and top.chars <= 1_000 - len("near rule")
    assert rules.cut == ("AGENTS.md",)
    assert "[… AGENTS.md was cut here:" in rules.section and "fit the rules cap" in rules.section
    assert "top rule 399" not in rules.section and "top rule 0" in rules.section
    # a cap so small that the far file gets nothing: it is named, not silently dropped
    tiny = load_rules(tmp_path, tmp_path / "src", max_chars=len("near rule"))
    assert [f.path for f in tiny.files] == ["src/AGENTS.md"] and tiny.left_out == ("AGENTS.md",)
    assert "[Left out for the rules cap: AGENTS.md]" in tiny.section
    assert "cut at the cap: AGENTS.md" in render_line(ev.RulesLoaded("s", ("AGENTS.md",), cut=("AGENTS.md",)))


def test_cap_follows_the_context_window() -> None:
    assert rules_cap(12_000, 8192) == 3686
    assert rules_cap(12_000, 131_072) == 12_000


def test_extra_files_and_repository_rules_off(tmp_path: Path) -> None:
    write(tmp_path / "AGENTS.md", "repo rule")
    extra = write(tmp_path.parent / f"{tmp_path.name}-extra.md", "extra rule")
    both = load_rules(tmp_path, max_chars=10_000, extra=(str(extra),))
    assert [f.path for f in both.files] == ["AGENTS.md", extra.name]
    only = load_rules(tmp_path, max_chars=10_000, extra=(str(extra),), repository=False)
    assert "repo rule" not in only.section and "extra rule" in only.section
    assert load_rules(tmp_path, max_chars=10_000, repository=False).section == ""


async def test_rules_sit_after_the_constant_prompt_and_match_across_sessions(
        server: ScriptedServer, make_agent, git_repo: Path, tmp_path: Path) -> None:
    write(git_repo / "AGENTS.md", "Always add a test.")
    write(git_repo / "lib" / "AGENTS.md", "lib: no new dependencies.")
    server.push(DONE, DONE)
    first, rec = make_agent(server, task="task one", session_id="a", rules_root=str(git_repo))
    assert (await first.run()).status is RunStatus.COMPLETED
    second, _ = make_agent(server, task="another task", session_id="b", rules_root=str(git_repo))
    await second.run()
    one, two = server.requests[0]["messages"][0], server.requests[1]["messages"][0]
    assert one == two  # byte-identical system prompt: the prefix cache hits across sessions
    assert one["content"].startswith(SYSTEM_PROMPT_NATIVE + "\n\n" + SECTION_HEAD)
    assert "Always add a test." in one["content"] and "lib: no new" not in one["content"]
    loaded = rec.of(ev.RulesLoaded)
    assert loaded and loaded[0].files == ("AGENTS.md",) and loaded[0].chars > 0
    # a session working in lib/ follows lib's rules too, the nearer one last
    nested, rec2 = make_agent(server, task="t", session_id="c", root=git_repo / "lib", rules_root=str(git_repo))
    server.push(DONE)
    await nested.run()
    content = server.requests[-1]["messages"][0]["content"]
    assert content.index("Always add a test.") < content.index("lib: no new dependencies.")
    assert rec2.of(ev.RulesLoaded)[0].files == ("AGENTS.md", "lib/AGENTS.md")


async def test_no_rules_leaves_the_prompt_constant_and_a_protocol_switch_keeps_them(
        server: ScriptedServer, make_agent, git_repo: Path) -> None:
    server.push(DONE)
    agent, rec = make_agent(server)
    await agent.run()
    assert server.requests[0]["messages"][0] == {"role": "system", "content": SYSTEM_PROMPT_NATIVE}
    assert rec.of(ev.RulesLoaded)[0].files == ()
    write(git_repo / "CLAUDE.md", "Be brief.")
    switching = ScriptedServer([DONE], native_tools=False)
    async with switching:
        agent2, _ = make_agent(switching, protocol=ProtocolChoice.NATIVE)
        await agent2.run()
        assert agent2.protocol is ToolProtocol.TOOL_ONLY or agent2.protocol is ToolProtocol.TEXT
        system = switching.requests[-1]["messages"][0]["content"]
        assert system.endswith("## CLAUDE.md\nBe brief.")
        if agent2.protocol is ToolProtocol.TEXT:
            assert system.startswith(SYSTEM_PROMPT_TEXT)
