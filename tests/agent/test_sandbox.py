"""The command sandbox: escape attempts as root and as an ordinary user, limits, fallback.

The escape attempts run in ``sandbox_escapes.py`` as a separate "app" process (so
``/proc/<app pid>/environ`` and ``kill <app pid>`` are about a real app process), once as
root and once as ``nobody`` (dropped with ``runuser``), and once without bubblewrap as a
control: there the same attempts get through, so the sandbox is what stops them.
Work folders live under /var/tmp (not /tmp, which the sandbox replaces with its own).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.agent import sandbox_escapes as esc
from tests.helpers.prerequisites import needs_bwrap
from workstation.agent import sandbox as sb
from workstation.agent.commands import run_command
from workstation.agent.config import AgentConfig
from workstation.agent.jail import PathJail
from workstation.agent.sandbox import (
    Mount,
    NetworkAccess,
    SandboxMode,
    SandboxPolicy,
    mount_plan,
)
from workstation.agent.tool_specs import ToolError
from workstation.agent.toolbox import Toolbox
from workstation.config import SandboxSettings, Settings

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "tests" / "agent" / "sandbox_escapes.py"
ALL_ATTEMPTS = [name for name, _, _ in esc.attempts(esc.layout(Path("/x")), 1, 1)]
CONTROL = ["read_ssh", "read_aws", "write_outside", "write_home", "read_sibling", "write_sibling",
           "list_app_data", "open_sqlite", "read_app_environ", "see_app_process", "engine_port"]




@pytest.fixture
def workdir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="ws-escape-", dir="/var/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _python_for(user: str) -> list[str] | None:
    """An interpreter ``user`` can run, with this repository and its packages importable."""
    site = next((p for p in sys.path if p.endswith("site-packages") and Path(p).is_dir()), "")
    env_path = f"{REPO}:{site}"
    for exe in (sys.executable, "/usr/bin/python3"):
        probe = subprocess.run(
            ["runuser", "-u", user, "--", "env", f"PYTHONPATH={env_path}", exe, "-c",
             "import workstation.agent.sandbox, psutil"],
            capture_output=True, cwd="/", timeout=60)
        if probe.returncode == 0:
            return ["runuser", "-u", user, "--", "env", f"PYTHONPATH={env_path}", exe]
    return None


def _run_escapes(workdir: Path, *, user: str | None = None, mode: str = "auto",
                 only: list[str] | None = None) -> dict[str, dict]:
    if user is None:
        esc.make_workdir(workdir)
        prefix = ["env", f"PYTHONPATH={REPO}", sys.executable]
    else:
        prefix = _python_for(user)
        if prefix is None:
            pytest.skip(f"no Python that {user} can run with this repository importable")
        shutil.chown(workdir, user)
        made = subprocess.run([*prefix, "-c", "import sys; from pathlib import Path; "
                               "from tests.agent.sandbox_escapes import make_workdir; "
                               "make_workdir(Path(sys.argv[1]))", str(workdir)],
                              capture_output=True, text=True, cwd="/")
        assert made.returncode == 0, made.stderr
    argv = [*prefix, str(SCRIPT), str(workdir), "--mode", mode]
    if only:
        argv += ["--only", ",".join(only)]
    env = {**os.environ, esc.FAKE_KEY_NAME: esc.FAKE_KEY_VALUE}
    proc = subprocess.run(argv, capture_output=True, text=True, cwd="/", env=env, timeout=900)
    records = {}
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            rec = json.loads(line)
            records[rec["name"]] = rec
    assert proc.returncode == 0 and records.get("_notices", {}).get("alive"), \
        f"the app did not survive: rc={proc.returncode}\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
    return records


def _assert_all_blocked(records: dict[str, dict]) -> None:
    missing = [n for n in ALL_ATTEMPTS if n not in records]
    assert not missing, f"attempts that did not report: {missing}"
    escaped = {n: r["detail"] for n, r in records.items() if r.get("escaped")}
    assert not escaped, f"escapes: {json.dumps(escaped, indent=1)}"
    assert records["network_outside"]["duration_s"] < 2.5  # refused at once, nothing sent
    assert records["fork_bomb"]["limit_hit"]
    assert records["big_output"]["total_chars"] == esc.BIG_OUTPUT_BYTES
    assert records["big_output"]["output_chars"] < 4_200
    assert records["_notices"]["notices"] in ([], ["processes"])


@needs_bwrap
@pytest.mark.slow
def test_escapes_are_blocked_as_root(workdir: Path) -> None:
    if os.getuid() != 0:
        pytest.skip("not running as root")
    records = _run_escapes(workdir)
    _assert_all_blocked(records)
    # root: the tmpfs covers cannot be unmounted (no capabilities), no nested user namespace
    assert "must be superuser" in records["umount_cover"]["detail"] or "Operation not permitted" in \
        records["umount_cover"]["detail"]


@needs_bwrap
@pytest.mark.slow
def test_escapes_are_blocked_as_an_ordinary_user(workdir: Path) -> None:
    if os.getuid() == 0:
        records = _run_escapes(workdir, user="nobody")
    else:
        records = _run_escapes(workdir)
    _assert_all_blocked(records)


def test_control_without_bubblewrap_the_same_attempts_get_through(workdir: Path) -> None:
    """Proof that the attempts are real: with the sandbox off they work (only the
    environment scrub and the output scrub still hold), and the app said so once."""
    records = _run_escapes(workdir, mode="off", only=CONTROL)
    through = {n for n, r in records.items() if r.get("escaped")}
    assert through == set(CONTROL)
    assert records["_notices"]["notices"] == ["off"]
    # even unconfined, a secret printed by a command reaches the model scrubbed
    assert "FAKEKEYMATERIAL" not in records["read_ssh"]["detail"]
    assert esc.FAKE_KEY_VALUE not in records["read_app_environ"]["detail"]


def test_mount_plan_hides_data_and_siblings_and_rebinds_the_own_root(tmp_path: Path) -> None:
    data = tmp_path / "data"
    own = data / "worktrees" / "r" / "s1"
    sibling = data / "worktrees" / "r" / "s2"
    home = tmp_path / "home"
    for d in (own, sibling, home / ".ssh", home / ".config" / "gh"):
        d.mkdir(parents=True)
    (home / ".netrc").write_text("machine x login y password z\n")
    sb.register_session_root(sibling)
    plan = mount_plan(SandboxPolicy(app_data_dirs=(str(data),)), str(own), home=str(home))
    paths = [m.path for m in plan]
    assert Mount("hide", str(data)) in plan and Mount("rw", str(own)) in plan
    assert paths.index(str(data)) < paths.index(str(own))  # the own root lands on top
    for secret in (home / ".ssh", home / ".config" / "gh", home / ".netrc"):
        assert Mount("hide", str(secret)) in plan
    assert Mount("hide", str(own)) not in plan
    assert Mount("hide", str(sibling)) not in plan  # inside the hidden data dir already
    elsewhere = tmp_path / "elsewhere" / "s3"  # a live session outside the data dir
    elsewhere.mkdir(parents=True)
    sb.register_session_root(elsewhere)
    nested = own / "vendor" / "s4"  # a session inside this one's tree
    nested.mkdir(parents=True)
    sb.register_session_root(nested)
    plan = mount_plan(SandboxPolicy(app_data_dirs=(str(data),)), str(own), home=str(home))
    assert Mount("hide", str(elsewhere)) in plan and Mount("hide", str(nested)) in plan
    paths = [m.path for m in plan]
    assert paths.index(str(own)) < paths.index(str(nested))  # covered after the own root is bound


def test_settings_section_becomes_the_policy(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, sandbox=SandboxSettings(
        mode="required", network="host", cpu_time_s=30, address_space_gib=0, max_processes=64,
        file_size_gib=0.5, hidden_paths=["~/work/private"]))
    policy = SandboxPolicy.from_settings(settings)
    assert policy.mode is SandboxMode.REQUIRED and policy.network is NetworkAccess.HOST
    assert policy.cpu_time_s == 30 and policy.address_space_bytes is None
    assert policy.max_processes == 64 and policy.file_size_bytes == 512 * 1024 * 1024
    assert policy.app_data_dirs == (str(tmp_path),) and policy.hidden_paths == ("~/work/private",)
    assert AgentConfig().sandbox == SandboxPolicy()


async def test_limits_apply_and_cannot_be_raised(tmp_path: Path) -> None:
    policy = SandboxPolicy(cpu_time_s=77, file_size_bytes=1 << 20, address_space_bytes=4 << 30)
    result = await run_command("ulimit -t; ulimit -f; ulimit -v; ulimit -c; head -c 2000000 /dev/zero > big; "
                               "echo size=$(stat -c %s big); ulimit -t unlimited || echo refused",
                               str(tmp_path), timeout_s=20, max_output_chars=4000, sandbox=policy,
                               attended=True)  # with or without bubblewrap: a person approved it
    lines = result.output.splitlines()
    assert lines[:4] == ["77", "1024", str(4 << 20), "0"]  # bash: -f and -v in KiB
    assert "size=1048576" in result.output and "refused" in result.output


@needs_bwrap
async def test_timeout_ends_everything_inside(tmp_path: Path) -> None:
    ticks = tmp_path / "ticks"
    result = await run_command(f"(setsid sh -c 'while :; do echo t >> {ticks}; sleep 0.05; done' &) ; sleep 30",
                               str(tmp_path), timeout_s=1.0, max_output_chars=1000, kill_grace_s=0.3,
                               sandbox=SandboxPolicy())
    assert result.timed_out
    await asyncio.sleep(0.5)
    size = ticks.stat().st_size
    await asyncio.sleep(0.5)
    assert ticks.stat().st_size == size  # the detached writer died with the sandbox


@needs_bwrap
async def test_host_network_mode_reaches_loopback(tmp_path: Path) -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        port = listener.getsockname()[1]
        cmd = f"exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected"
        off = await run_command(cmd, str(tmp_path), timeout_s=10, max_output_chars=1000, sandbox=SandboxPolicy())
        host = await run_command(cmd, str(tmp_path), timeout_s=10, max_output_chars=1000,
                                 sandbox=SandboxPolicy(network=NetworkAccess.HOST))
    assert "connected" not in off.output and "refused" in off.output
    assert host.exit_code == 0 and "connected" in host.output


@needs_bwrap
async def test_git_in_a_worktree_reads_the_shared_repo_but_cannot_rewrite_it(tmp_path: Path, git_repo: Path) -> None:
    data = tmp_path / "data"
    wt = data / "worktrees" / "repo" / "s1"
    wt.parent.mkdir(parents=True)
    subprocess.run(["git", "-C", str(git_repo), "worktree", "add", "-q", "-b", "ws/s1", str(wt)], check=True)
    (wt / "new.py").write_text("print('hi')\n")
    before = subprocess.run(["git", "-C", str(git_repo), "rev-parse", "main"], capture_output=True, text=True).stdout
    policy = SandboxPolicy(app_data_dirs=(str(data),))
    status = await run_command("git status --short && git log --oneline | head -1 && git diff --stat",
                               str(wt), timeout_s=20, max_output_chars=4000, sandbox=policy)
    assert status.exit_code == 0 and "?? new.py" in status.output and "initial" in status.output
    commit = await run_command("git -c user.name=a -c user.email=a@b add new.py && "
                               "git -c user.name=a -c user.email=a@b commit -qm x; echo rc=$?",
                               str(wt), timeout_s=20, max_output_chars=4000, sandbox=policy)
    assert "rc=0" not in commit.output and "Read-only file system" in commit.output
    after = subprocess.run(["git", "-C", str(git_repo), "rev-parse", "main"], capture_output=True, text=True).stdout
    assert before == after


@needs_bwrap
async def test_sessions_do_not_see_each_other(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    (b / "notes.txt").write_text("b's work")
    config = AgentConfig(sandbox=SandboxPolicy())
    box_a = Toolbox(PathJail(a), config)
    Toolbox(PathJail(b), config)  # a live session
    run = await box_a.run("execute_command", {"command": f"cat {b}/notes.txt; ls -A {b} | wc -l"})
    assert "b's work" not in run.text and "No such file" in run.text


async def test_without_bubblewrap_only_an_attended_command_runs(tmp_path: Path, fresh_notices: None,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail closed at the runner itself: unconfined, a command runs only when a person
    approved it (``attended``); the fallback is said once and the limits still apply."""
    monkeypatch.setattr(sb, "BWRAP_PROGRAM", "bwrap-is-not-installed-here")
    heard: list[sb.SandboxNotice] = []
    sb.notices.noticed.connect(heard.append)
    marker = tmp_path / "ran"
    try:
        policy = SandboxPolicy(file_size_bytes=1 << 20)
        with pytest.raises(ToolError, match="not confined here .bubblewrap .bwrap. is not installed. and nobody "
                                            "approved it") as refused:
            await run_command(f"touch {marker}", str(tmp_path), timeout_s=10, max_output_chars=1000, sandbox=policy)
        assert not refused.value.mistake and not marker.exists()
        for _ in range(3):
            result = await run_command("ulimit -f; echo ran", str(tmp_path), timeout_s=10, max_output_chars=1000,
                                       sandbox=policy, attended=True)
            assert result.exit_code == 0 and result.output.splitlines() == ["1024", "ran"]
    finally:
        sb.notices.noticed.disconnect(heard.append)
    assert [n.key for n in heard] == ["unattended", "fallback"]
    assert "nobody is present to approve each one" in heard[0].message
    assert "sandbox.mode = off" in heard[0].message and "apt-get install bubblewrap" in heard[0].message
    assert "WITHOUT the bubblewrap sandbox" in heard[1].message and "not installed" in heard[1].message
    with pytest.raises(ToolError, match="sandbox is required"):
        await run_command("true", str(tmp_path), timeout_s=5, max_output_chars=100,
                          sandbox=SandboxPolicy(mode=SandboxMode.REQUIRED), attended=True)
    result = await run_command("echo off", str(tmp_path), timeout_s=5, max_output_chars=100,
                               sandbox=SandboxPolicy(mode=SandboxMode.OFF))  # the user's choice
    assert result.output.strip() == "off"


async def test_a_bwrap_setting_that_names_no_program_is_unusable(tmp_path: Path, fresh_notices: None) -> None:
    policy = SandboxPolicy(bwrap=str(tmp_path / "no-bwrap"))
    probe = await sb.probe_bwrap(bwrap=policy.bwrap)
    assert not probe.usable and "is not an executable file" in probe.reason
    with pytest.raises(ToolError, match="nobody approved it"):
        await run_command("true", str(tmp_path), timeout_s=5, max_output_chars=100, sandbox=policy)
    settings = Settings(data_dir=tmp_path, sandbox=SandboxSettings(bwrap="/opt/bwrap"))
    assert SandboxPolicy.from_settings(settings).bwrap == "/opt/bwrap"


async def test_a_vanished_session_directory_is_a_plain_error(tmp_path: Path) -> None:
    gone = tmp_path / "gone"
    with pytest.raises(ToolError, match="no longer exists"):
        await run_command("true", str(gone), timeout_s=5, max_output_chars=100, sandbox=SandboxPolicy())


@needs_bwrap
async def test_cancel_at_any_moment_of_set_up_leaves_nothing(tmp_path: Path) -> None:
    """Killing only the outer bwrap during its set-up left the namespace's init (and the
    command) running as orphans; every cancel point must leave nothing behind."""
    import psutil

    marker = f"{os.getpid()}{secrets_suffix()}"
    for i in range(30):
        task = asyncio.create_task(run_command(f"sleep {marker}{i:02d}.5 & wait", str(tmp_path), timeout_s=60,
                                               max_output_chars=100, kill_grace_s=0.2, sandbox=SandboxPolicy()))
        await asyncio.sleep(0.002 * i)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    left = [p.pid for p in psutil.process_iter(["cmdline"]) if marker in " ".join(p.info["cmdline"] or [])]
    assert left == []


def secrets_suffix() -> str:
    import secrets

    return str(secrets.randbelow(10**6))
