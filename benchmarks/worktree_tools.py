"""What the worktree workflow costs: bootstrap, the port bridge, the merge queue.

With the real sandbox (bubblewrap) and real git, in a scratch folder it removes after:

- **bootstrap**: create N sessions of one repository without and with bootstrap (a copied
  ``.env``, a linked ``node_modules`` of 2,000 files, a setup command ``true`` in the
  sandbox): seconds per session for each.
- **port bridge**: a session's dev server (``python3 -m http.server``) reached from the host
  through the bridge (sandbox without network) and, for comparison, directly (a policy with
  the host's network): requests per second for a small page over one connection each
  (``--requests``), and MB/s for one ``--file-mb`` download.
- **merge queue**: three ready sessions merged into main, each gated by ``true``.

Ends with one JSON line (``bootstrap_s_per_session``, ``bridge_requests_per_s``,
``direct_requests_per_s``, ``bridge_mb_per_s``, ``direct_mb_per_s``, ``merge_queue_s`` …).

    python benchmarks/worktree_tools.py [--sessions 8] [--requests 200] [--file-mb 64]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from workstation.agent.sandbox import NetworkAccess, SandboxPolicy, probe_bwrap  # noqa: E402
from workstation.core.endpoints import Endpoint  # noqa: E402
from workstation.config import load_settings  # noqa: E402
from workstation.fleet import Fleet, SessionSpec  # noqa: E402
from workstation.fleet.sample_repos import scratch_repository  # noqa: E402
from workstation.services import Services  # noqa: E402

EP = Endpoint(base_url="http://127.0.0.1:9", api_key="k", model="m", name="bench")


def make_repo(root: Path) -> Path:
    repo = scratch_repository(root / "app", {"app.py": "print('app')\n", ".gitignore": ".env\nnode_modules\n"})
    (repo / ".env").write_text("MODE=bench\n")
    for i in range(2000):
        d = repo / "node_modules" / f"pkg{i % 50}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"f{i}.js").write_text("module.exports = 1;\n")
    return repo


def never(_setup):  # type: ignore[no-untyped-def]
    raise RuntimeError("no agent runs in this benchmark")


async def timed_create(fleet: Fleet, spec: SessionSpec, n: int) -> tuple[float, list[str]]:
    t0 = time.perf_counter()
    made = await fleet.create_sessions(spec, n)
    return time.perf_counter() - t0, [s.session_id for s in made]


async def requests_per_s(url: str, n: int) -> float:
    async with httpx.AsyncClient(timeout=10) as client:
        for _ in range(100):  # the server may still be starting
            try:
                await client.get(url)
                break
            except httpx.TransportError:
                await asyncio.sleep(0.1)
        t0 = time.perf_counter()
        for _ in range(n):
            r = await client.get(url, headers={"Connection": "close"})
            r.raise_for_status()
        return n / (time.perf_counter() - t0)


async def mb_per_s(url: str, size_mb: int) -> float:
    async with httpx.AsyncClient(timeout=120) as client:
        t0 = time.perf_counter()
        got = 0
        async with client.stream("GET", url) as r:
            async for chunk in r.aiter_bytes():
                got += len(chunk)
        assert got == size_mb << 20, got
        return size_mb / (time.perf_counter() - t0)


async def serve_numbers(fleet: Fleet, repo: Path, name: str, args: argparse.Namespace) -> tuple[float, float, bool]:
    spec = SessionSpec(task="serve", repo=str(repo), name=name,
                       run_command="exec python3 -m http.server \"$PORT\" --bind 127.0.0.1 2>/dev/null")
    (s,) = await fleet.create_sessions(spec, 1)
    wt = Path(s.worktree_path)
    (wt / "small.html").write_text("<p>hello</p>\n")
    with open(wt / "big.bin", "wb") as fh:
        fh.truncate(args.file_mb << 20)
    st = await fleet.start_dev_server(s.session_id)
    try:
        rps = await requests_per_s(st.url + "small.html", args.requests)
        mbs = await mb_per_s(st.url + "big.bin", args.file_mb)
    finally:
        await fleet.stop_dev_server(s.session_id)
    return rps, mbs, st.bridged


async def main(args: argparse.Namespace) -> dict:
    probe = await probe_bwrap()
    if not probe.usable:
        raise SystemExit(f"bubblewrap is needed here: {probe.reason}")
    scratch = Path(tempfile.mkdtemp(prefix="ws-bench-tools-", dir="/var/tmp"))
    try:
        repo = make_repo(scratch)
        data = scratch / "data"
        async with httpx.AsyncClient() as http, Services(load_settings(), http=http) as services:
            fleet = services.fleet(endpoints=[EP], data_dir=data, agent_factory=never,
                                   sandbox=SandboxPolicy(app_data_dirs=(str(data),)))
            await fleet.start()
            plain_s, _ = await timed_create(fleet, SessionSpec(task="plain", repo=str(repo)), args.sessions)
            boot_s, _ = await timed_create(fleet, SessionSpec(
                task="booted", repo=str(repo), copy_files=(".env",), link_files=("node_modules",),
                setup_command="true"), args.sessions)
            bridge_rps, bridge_mbs, bridged = await serve_numbers(fleet, repo, "via-bridge", args)
            ids = []
            for i in range(3):
                s = await fleet.create_session(SessionSpec(task="work", repo=str(repo), name=f"ready-{i}"))
                (Path(s.worktree_path) / f"work{i}.txt").write_text(f"{i}\n")
                await fleet.mark_ready(s.session_id)
                ids.append(s.session_id)
            t0 = time.perf_counter()
            report = await fleet.merge_ready(into="main", gate="true")
            merge_s = time.perf_counter() - t0
            assert report.ok, report.reason
            await fleet.aclose()
            direct = services.fleet(endpoints=[EP], data_dir=scratch / "data-host", agent_factory=never,
                                    sandbox=SandboxPolicy(app_data_dirs=(str(scratch / "data-host"),),
                                                          network=NetworkAccess.HOST))
            await direct.start()
            direct_rps, direct_mbs, direct_bridged = await serve_numbers(direct, repo, "direct", args)
            await direct.aclose()
        assert bridged and not direct_bridged
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return {
        "sessions": args.sessions,
        "plain_s_per_session": round(plain_s / args.sessions, 3),
        "bootstrap_s_per_session": round(boot_s / args.sessions, 3),
        "bridge_requests_per_s": round(bridge_rps, 1), "direct_requests_per_s": round(direct_rps, 1),
        "bridge_mb_per_s": round(bridge_mbs, 1), "direct_mb_per_s": round(direct_mbs, 1),
        "file_mb": args.file_mb, "requests": args.requests,
        "merge_queue_s": round(merge_s, 2), "merged": 3, "cpus": os.cpu_count(),
    }


def cli() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sessions", type=int, default=8)
    p.add_argument("--requests", type=int, default=200)
    p.add_argument("--file-mb", type=int, default=64)
    args = p.parse_args()
    r = asyncio.run(main(args))
    rows = [
        ("new session, no bootstrap", f"{r['plain_s_per_session']:.3f} s"),
        ("new session, .env + linked node_modules + setup", f"{r['bootstrap_s_per_session']:.3f} s"),
        ("small requests, through the bridge", f"{r['bridge_requests_per_s']:.0f} /s"),
        ("small requests, direct (host network)", f"{r['direct_requests_per_s']:.0f} /s"),
        (f"{r['file_mb']} MB download, through the bridge", f"{r['bridge_mb_per_s']:.0f} MB/s"),
        (f"{r['file_mb']} MB download, direct", f"{r['direct_mb_per_s']:.0f} MB/s"),
        ("merge queue, 3 sessions, gate `true`", f"{r['merge_queue_s']:.2f} s"),
    ]
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"{k:<{width}}  {v:>10}")
    print(json.dumps(r))


if __name__ == "__main__":
    cli()
