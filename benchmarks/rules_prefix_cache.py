"""Do repository rules keep the prefix cache hitting? Two sessions of one repository, then one
of another, each with the repository's AGENTS.md in its system prompt, measured with the
engine's own ``/metrics`` (``vllm:prefix_cache_hits_total`` / ``_queries_total`` deltas).

    python benchmarks/rules_prefix_cache.py [--model tiny] [--rules-chars 3000]
    python benchmarks/rules_prefix_cache.py --endpoint URL --api-key KEY --model NAME   # an engine that runs

Without ``--endpoint`` it starts a fresh managed engine (only this benchmark's traffic in its
counters) and stops it after. Each session runs one model turn (tool-only protocol) in its
own worktree-like folder: session 1 on repository A computes everything; session 2 on A
(another task) should find the system prompt, tools and A's rules cached; session 3 on B
(other rules) only the constant part before the rules. Ends with one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.prefix_cache import scrape  # noqa: E402
from workstation.agent import Agent, AgentConfig, ProtocolChoice  # noqa: E402
from workstation.agent.model_info import fetch_context_window  # noqa: E402
from workstation.core import agent_events as ev  # noqa: E402
from workstation.core.approvals import ApprovalPolicy  # noqa: E402
from workstation.core.endpoints import Endpoint  # noqa: E402
from workstation.engine.chat_client import ChatClient  # noqa: E402
from workstation.engine.http import make_http_client  # noqa: E402


def _rules(tag: str, chars: int) -> str:
    lines = [f"# Rules of repository {tag}"]
    i = 0
    while sum(len(x) + 1 for x in lines) < chars:
        lines.append(f"- Rule {i} of {tag}: keep functions short, name things for what they hold, test each change.")
        i += 1
    return "\n".join(lines) + "\n"


def _repo(base: Path, tag: str, chars: int) -> Path:
    repo = base / tag
    repo.mkdir()
    (repo / "AGENTS.md").write_text(_rules(tag, chars))
    (repo / "app.py").write_text("def add(a, b):\n    return a + b\n")
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    return repo


async def _session(http, endpoint: Endpoint, repo: Path, task: str, window: int) -> dict:  # type: ignore[no-untyped-def]
    rules: list[ev.RulesLoaded] = []
    config = AgentConfig(protocol=ProtocolChoice.TOOL_ONLY, approval=ApprovalPolicy.parse("read"), max_turns=1,
                         max_tokens_per_turn=16, temperature=0.0, user_present=False, checkpoints=False,
                         context_window_tokens=window)
    agent = Agent(f"rules-{repo.name}-{len(task)}", repo, task, ChatClient(http, endpoint), config,
                  on_event=lambda e: rules.append(e) if isinstance(e, ev.RulesLoaded) else None)
    before = await scrape(http, endpoint)
    outcome = await agent.run()
    after = await scrape(http, endpoint)
    return {"repo": repo.name, "queried": int(after["queries"] - before["queries"]),
            "hits": int(after["hits"] - before["hits"]), "prompt_tokens": outcome.prompt_tokens,
            "rules_chars": rules[0].chars if rules else 0}


async def _bench(endpoint: Endpoint, chars: int) -> list[dict]:
    base = Path(tempfile.mkdtemp(prefix="ws-rules-cache-"))
    a, b = _repo(base, "alpha", chars), _repo(base, "beta", chars)
    async with make_http_client(read_timeout_s=300.0) as http:
        window = await fetch_context_window(http, endpoint) or 8192
        return [
            await _session(http, endpoint, a, "Read app.py and add a function mul(a, b).", window),
            await _session(http, endpoint, a, "Read app.py and add a docstring to add().", window),
            await _session(http, endpoint, b, "Read app.py and add a function sub(a, b).", window),
        ]


async def _managed(args: argparse.Namespace) -> list[dict]:
    from workstation.config import load_settings
    from workstation.engine.host import Launchers

    settings = load_settings()
    launcher = Launchers.from_settings(settings, args.model)(log_dir=Path(tempfile.mkdtemp(prefix="ws-rules-engine-")))
    try:
        endpoint = await launcher.start(lambda m: print(m, file=sys.stderr, flush=True))
        return await _bench(endpoint, args.rules_chars)
    finally:
        await launcher.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="tiny", help="managed engine's model (tiny: fast to start)")
    parser.add_argument("--rules-chars", type=int, default=3000, help="size of each repository's AGENTS.md")
    parser.add_argument("--endpoint", help="an engine that already runs (its counters may hold others' traffic)")
    parser.add_argument("--api-key", default="")
    args = parser.parse_args()
    if args.endpoint:
        endpoint = Endpoint(args.endpoint.rstrip("/").removesuffix("/v1"), args.api_key, args.model, name="external")
        rows, where = asyncio.run(_bench(endpoint, args.rules_chars)), "existing engine"
    else:
        rows, where = asyncio.run(_managed(args)), f"fresh managed engine ({args.model})"
    labels = ["1st session, repo alpha (cold)", "2nd session, repo alpha", "1st session, repo beta"]
    print(f"rules prefix cache on the {where}, AGENTS.md of {args.rules_chars:,} characters each\n")
    print(f"{'session':<34}{'rules chars':>12}{'queried':>10}{'hit':>8}{'hit rate':>10}")
    for label, r in zip(labels, rows):
        rate = r["hits"] / r["queried"] if r["queried"] else 0.0
        print(f"{label:<34}{r['rules_chars']:>12,}{r['queried']:>10,}{r['hits']:>8,}{rate:>10.1%}")
    same, other = rows[1], rows[2]
    result = {
        "engine": where, "rules_chars": args.rules_chars,
        "same_repo_hit_rate": round(same["hits"] / same["queried"], 4) if same["queried"] else 0.0,
        "other_repo_hit_rate": round(other["hits"] / other["queried"], 4) if other["queried"] else 0.0,
        "sessions": rows,
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
