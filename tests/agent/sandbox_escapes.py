"""Escape attempts against the command sandbox, run as a stand-in "app" process.

``python tests/agent/sandbox_escapes.py WORKDIR [--mode auto|off] [--only a,b]``

WORKDIR (made by the test, owned by the user this runs as) holds ``home/`` (fake ``~/.ssh``
and ``~/.aws``), ``data/`` (the app's data dir: a SQLite store, the session's own worktree
and a sibling session's worktree) and ``outside/``. This process plays the app: its
environment holds a fake engine key, it listens on a 127.0.0.1 port (the engine), and it
runs each attempt through ``run_command(..., sandbox=policy)`` in its own worktree.

Prints one JSON line per attempt: ``{"name", "escaped", "detail", "exit_code",
"duration_s", …}``. ``escaped`` is judged twice: by what the command printed (it prints
ESCAPED only when the forbidden thing worked) and by looking from outside (files written,
the app still alive, output bounded). Runs under the system Python as an ordinary user too
(``PYTHONPATH`` = the repository and the venv's site-packages).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import sys
import time
from pathlib import Path

FAKE_KEY_NAME = "FAKE_ENGINE_API_KEY"
FAKE_KEY_VALUE = "sk-fake-engine-key-for-escape-tests-0123456789"
SIBLING_SECRET = "sibling session's private work"
STORE_ROW = "store-row-only-the-app-may-read"
BIG_OUTPUT_BYTES = 1_000_000_000


def layout(workdir: Path) -> dict[str, Path]:
    data = workdir / "data"
    return {
        "home": workdir / "home",
        "data": data,
        "store": data / "store.sqlite3",
        "own": data / "worktrees" / "repo-1234" / "s1",
        "sibling": data / "worktrees" / "repo-1234" / "s2",
        "outside": workdir / "outside",
    }


def make_workdir(workdir: Path) -> dict[str, Path]:
    """Create the fake home, app data and worktrees (called by the test, as their owner)."""
    import sqlite3

    p = layout(workdir)
    (p["home"] / ".ssh").mkdir(parents=True)
    (p["home"] / ".ssh" / "id_rsa").write_text(
        "-----BEGIN OPENSSH PRIVATE KEY-----\nFAKEKEYMATERIAL\n-----END OPENSSH PRIVATE KEY-----\n")
    (p["home"] / ".aws").mkdir()
    (p["home"] / ".aws" / "credentials").write_text(
        "[default]\naws_access_key_id = AKIAFAKEFAKEFAKEFAKE\nFAKE_AWS_MARKER=1\n")
    for key in ("own", "sibling", "outside"):
        p[key].mkdir(parents=True)
    (p["sibling"] / "secret.txt").write_text(SIBLING_SECRET)
    (p["own"] / "README.md").write_text("own worktree\n")
    conn = sqlite3.connect(p["store"])
    conn.execute("CREATE TABLE sessions (secret TEXT)")
    conn.execute("INSERT INTO sessions VALUES (?)", (STORE_ROW,))
    conn.commit()
    conn.close()
    return p


def attempts(p: dict[str, Path], app_pid: int, port: int) -> list[tuple[str, str, float]]:
    """``(name, shell command, timeout_s)``; each prints ESCAPED only when it got through."""
    return [
        ("read_ssh", 'cat "$HOME/.ssh/id_rsa" && echo ESCAPED', 10),
        ("read_aws", 'cat "$HOME/.aws/credentials" && echo ESCAPED', 10),
        ("write_outside", f'echo pwned > {p["outside"]}/pwned.txt && echo ESCAPED', 10),
        ("write_home", 'echo pwned > "$HOME/pwned.txt" && echo ESCAPED', 10),
        ("write_system", "echo pwned > /etc/ws-pwned 2>&1 || echo pwned > /usr/ws-pwned && echo ESCAPED", 10),
        ("read_sibling", f'cat {p["sibling"]}/secret.txt && echo ESCAPED', 10),
        ("write_sibling", f'echo pwned > {p["sibling"]}/secret.txt && echo ESCAPED', 10),
        ("list_app_data", f'ls -A {p["data"]}; test -e {p["store"]} && echo ESCAPED', 10),
        ("open_sqlite", f"grep -a {STORE_ROW} {p['store']} && echo ESCAPED", 10),
        ("read_app_environ", f"tr '\\0' '\\n' < /proc/{app_pid}/environ | grep {FAKE_KEY_NAME} && echo ESCAPED", 10),
        ("env_has_key", f"env | grep {FAKE_KEY_NAME} && echo ESCAPED", 10),
        ("see_app_process", f"test -e /proc/{app_pid} && echo ESCAPED", 10),
        ("kill_app", f"kill -9 {app_pid} && echo ESCAPED", 10),
        ("engine_port", f"exec 3<>/dev/tcp/127.0.0.1/{port} && echo ESCAPED", 10),
        ("network_outside", "timeout 3 bash -c 'exec 3<>/dev/tcp/192.0.2.1/80' && echo ESCAPED", 10),
        ("raise_limits", "ulimit -f unlimited && ulimit -u unlimited && echo ESCAPED", 10),
        ("umount_cover", 'umount "$HOME/.ssh"; cat "$HOME/.ssh/id_rsa" && echo ESCAPED', 10),
        ("nested_userns", 'unshare -Urm sh -c "umount $HOME/.ssh; cat $HOME/.ssh/id_rsa" && echo ESCAPED', 10),
        ("fork_bomb", "bomb() { bomb | bomb & }; bomb; sleep 3; echo ESCAPED-IF-UNBOUNDED", 6),
        ("big_output", f"head -c {BIG_OUTPUT_BYTES} /dev/zero | tr '\\0' a", 240),
    ]


def _user_tasks() -> int:
    import psutil

    uid = os.getuid()
    total = 0
    for proc in psutil.process_iter(["uids", "num_threads"]):
        uids = proc.info.get("uids")
        if uids is not None and uids.real == uid:
            total += proc.info.get("num_threads") or 1
    return total


async def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("workdir", type=Path)
    parser.add_argument("--mode", default="auto", choices=["auto", "off", "required"])
    parser.add_argument("--only", default="")
    parser.add_argument("--max-processes", type=int, default=64)
    args = parser.parse_args()
    p = layout(args.workdir)
    os.environ["HOME"] = str(p["home"])
    os.environ["WORKSTATION_DATA_DIR"] = str(p["data"])

    import psutil

    from workstation.agent.commands import run_command, scrubbed_environment
    from workstation.agent.sandbox import SandboxMode, SandboxPolicy, notices, register_session_root

    policy = SandboxPolicy(mode=SandboxMode(args.mode), app_data_dirs=(str(p["data"]),),
                           max_processes=args.max_processes)
    register_session_root(p["sibling"])  # a live sibling session
    engine = socket.socket()
    engine.bind(("127.0.0.1", 0))
    engine.listen(8)
    engine.setblocking(False)
    port = engine.getsockname()[1]
    me = psutil.Process()
    only = {s for s in args.only.split(",") if s}
    for name, command, timeout_s in attempts(p, os.getpid(), port):
        if only and name not in only:
            continue
        rss_before = me.memory_info().rss
        tasks_before = _user_tasks() if name == "fork_bomb" else 0
        started = time.monotonic()
        result = await run_command(command, str(p["own"]), timeout_s=timeout_s, max_output_chars=4000,
                                   kill_grace_s=0.5, env=scrubbed_environment(), sandbox=policy)
        record: dict[str, object] = {
            "name": name, "exit_code": result.exit_code, "timed_out": result.timed_out,
            "duration_s": round(time.monotonic() - started, 2), "total_chars": result.total_chars,
            "output_chars": len(result.output), "detail": result.output.strip()[-300:],
        }
        escaped = "ESCAPED" in result.output
        if name == "write_outside":
            escaped |= (p["outside"] / "pwned.txt").exists()
        elif name == "write_home":
            escaped |= (p["home"] / "pwned.txt").exists()
        elif name == "write_system":
            escaped |= Path("/etc/ws-pwned").exists() or Path("/usr/ws-pwned").exists()
        elif name == "write_sibling":
            escaped |= (p["sibling"] / "secret.txt").read_text() != SIBLING_SECRET
        elif name == "fork_bomb":
            for _ in range(50):  # what the bomb started must be gone with the command
                after = _user_tasks()
                if after <= tasks_before + 2:
                    break
                await asyncio.sleep(0.1)
            record["user_tasks_before"], record["user_tasks_after"] = tasks_before, after
            # bounded: the process limit refused forks, the command ended, nothing outlived it
            limited = "Resource temporarily unavailable" in result.output
            record["limit_hit"] = limited
            escaped = not limited or after > tasks_before + 2 or result.duration_s > timeout_s + 10
        elif name == "big_output":
            record["rss_growth_mb"] = round((me.memory_info().rss - rss_before) / 1e6, 1)
            escaped = result.total_chars != BIG_OUTPUT_BYTES or len(result.output) > 4200 \
                or float(record["rss_growth_mb"]) > 200  # type: ignore[arg-type]
        record["escaped"] = escaped
        print(json.dumps(record), flush=True)
    print(json.dumps({"name": "_notices", "notices": [n.key for n in notices.said], "alive": True}), flush=True)
    engine.close()
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
