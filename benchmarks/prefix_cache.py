"""vLLM prefix-cache hit rate while 8 agents work at once (same system prompt, own repos and tasks).

    python benchmarks/prefix_cache.py [--agents 8] [--turns 5] [--rules]
    python benchmarks/prefix_cache.py --endpoint URL --api-key KEY --model NAME   # an engine that runs

Without ``--endpoint`` it starts a fresh managed engine (``Launchers``, the embedded
SmolLM2 by default) and stops it after. Before the agents start, one 1-token request
computes the shared system prompt and tools (``agent.protocols.prime_prefix_cache``, what a
fleet does once per endpoint; ``--no-prime`` skips it); its tokens count in the rate. Each agent gets its own small git repository and
task and runs at least ``--turns`` model turns (when it finishes or stops early it gets a
follow-up request from the "user", as in a real session). The hit rate is the counter
delta ``vllm:prefix_cache_hits_total / vllm:prefix_cache_queries_total`` from the
engine's ``/metrics`` (parsed with ``prometheus_client``) over the run. ``--rules`` gives
each repository an ``AGENTS.md`` of its own (as real repositories have), which the agents
read into their prompts. On a shared engine
other clients' requests land in the same counters: the JSON reports the counters' query
tokens against the prompt tokens the agents themselves sent (``foreign_tokens``).
Ends with one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import secrets
import shutil
import sys
import tempfile
import time
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from workstation.agent import Agent, AgentConfig, ProtocolChoice  # noqa: E402
from workstation.agent.model_info import fetch_context_window  # noqa: E402
from workstation.agent.protocols import choose_protocol, prime_prefix_cache  # noqa: E402
from workstation.core import agent_events as ev  # noqa: E402
from workstation.core.agent_events import RunStatus  # noqa: E402
from workstation.core.approvals import ApprovalPolicy  # noqa: E402
from workstation.core.endpoints import Endpoint  # noqa: E402
from workstation.engine.chat_client import ChatClient  # noqa: E402
from workstation.engine.http import make_http_client  # noqa: E402
from workstation.fleet.sample_repos import scratch_repository  # noqa: E402

PROJECTS = [
    ("calc", "calc.py", "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n",
     "Read calc.py and add a function mul(a, b) that multiplies."),
    ("greet", "greet.py", "def greet(name):\n    return 'Hello ' + name\n",
     "Read greet.py and make greet() end with an exclamation mark."),
    ("shapes", "shapes.py", "class Square:\n    def __init__(self, side):\n        self.side = side\n",
     "Read shapes.py and add an area() method to Square."),
    ("notes", "notes.md", "# Notes\n\n- buy milk\n- call Bob\n",
     "Read notes.md and add a third item: water the plants."),
    ("temps", "temps.py", "def c_to_f(c):\n    return c * 9 / 5 + 32\n",
     "Read temps.py and add f_to_c(f), the inverse conversion."),
    ("words", "words.py", "def count_words(text):\n    return len(text.split())\n",
     "Read words.py and add count_chars(text) returning the number of characters."),
    ("stack", "stack.py", "class Stack:\n    def __init__(self):\n        self.items = []\n",
     "Read stack.py and add push and pop methods."),
    ("config", "settings.ini", "[server]\nport = 8080\n",
     "Read settings.ini and add host = 127.0.0.1 to the server section."),
]
FOLLOW_UP = "Continue: check your change by reading the file again, then finish with attempt_completion."


RULES = ("# Rules for {name}\n\n- Keep functions short and named for what they return.\n"
         "- Every change comes with a test in tests/test_{name}.py.\n- No new dependencies.\n"
         "- Use four spaces, never tabs; lines under 100 characters.\n"
         "- Explain why in the commit message, not what.\n- Ticket {ticket}: owner team {i}.\n")


def _make_repo(base: Path, i: int, nonce: str, rules: bool = False) -> tuple[Path, str]:
    name, filename, content, task = PROJECTS[i % len(PROJECTS)]
    task = f"{task} (ticket {nonce}-{i})"  # nothing but the system prompt is cached from earlier runs
    files = {filename: content, "README.md": f"# {name}\n\nA small project ({i}).\n"}
    if rules:
        files["AGENTS.md"] = RULES.format(name=name, ticket=f"{nonce}-{i}", i=i)
    return scratch_repository(base / f"{name}-{i}", files, message="init"), task


async def scrape(http: httpx.AsyncClient, endpoint: Endpoint) -> dict[str, float]:
    """Sum of the prefix-cache counters of the endpoint's model (``*_total`` samples)."""
    response = await http.get(endpoint.base_url.rstrip("/") + "/metrics")
    response.raise_for_status()
    wanted = {"vllm:prefix_cache_hits_total": "hits", "vllm:prefix_cache_queries_total": "queries",
              "vllm:prompt_tokens_total": "prompt_tokens"}
    out = {v: 0.0 for v in wanted.values()}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            key = wanted.get(sample.name)
            model = sample.labels.get("model_name")
            if key and (model is None or model == endpoint.model):
                out[key] += sample.value
    return out


async def _one_agent(i: int, repo: Path, task: str, client: ChatClient, config: AgentConfig, turns: int) -> dict:
    usage = {"prompt": 0, "completion": 0, "turns": 0, "runs": 0}

    def on_event(e: object) -> None:
        if isinstance(e, ev.UsageReported):
            usage["prompt"] += e.prompt_tokens
            usage["completion"] += e.completion_tokens
            usage["turns"] += 1

    agent = Agent(f"prefix-{i}", repo, task, client, config, on_event=on_event)
    while usage["turns"] < turns:
        usage["runs"] += 1
        agent.config = dataclasses.replace(config, max_turns=turns - usage["turns"])  # exactly `turns` in all
        outcome = await agent.run()
        if outcome.status is RunStatus.FAILED:
            raise SystemExit(f"agent {i} failed: {outcome.message}")
        if usage["turns"] < turns:
            agent.reply(FOLLOW_UP)
    return usage


async def _bench(endpoint: Endpoint, agents: int, turns: int, stagger_s: float, prime: bool,
                 rules: bool = False, protocol: str = "auto") -> dict:
    base = Path(tempfile.mkdtemp(prefix="ws-prefix-"))
    try:
        nonce = secrets.token_hex(3)
        repos = [_make_repo(base, i, nonce, rules) for i in range(agents)]
        async with make_http_client() as http:
            window = await fetch_context_window(http, endpoint) or 8192
            config = AgentConfig(approval=ApprovalPolicy.parse("all"), temperature=0.0, user_present=False,
                                 protocol=ProtocolChoice(protocol),
                                 context_window_tokens=window, max_tokens_per_turn=256,
                                 max_turns=turns, max_consecutive_mistakes=3)
            client = ChatClient(http, endpoint)
            before = await scrape(http, endpoint)
            t0 = time.monotonic()
            primed_tokens = 0
            if prime:  # counted: the priming request's tokens are in the deltas too
                protocol, _ = choose_protocol(config, endpoint)
                usage = await prime_prefix_cache(client, protocol)
                primed_tokens = usage.prompt_tokens if usage else 0

            async def start(i: int) -> dict:
                await asyncio.sleep(i * stagger_s)
                return await _one_agent(i, repos[i][0], repos[i][1], client, config, turns)

            results = await asyncio.gather(*(start(i) for i in range(agents)))
            wall = time.monotonic() - t0
            after = await scrape(http, endpoint)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    delta = {k: after[k] - before[k] for k in before}
    return {"results": results, "delta": delta, "wall_s": wall, "primed_tokens": primed_tokens}


async def _managed_endpoint_run(args: argparse.Namespace) -> tuple[dict, str]:
    from workstation.config import load_settings
    from workstation.engine.host import Launchers

    settings = load_settings()
    launcher = Launchers.from_settings(settings, args.model)(log_dir=Path(tempfile.mkdtemp(prefix="ws-prefix-engine-")))
    try:
        endpoint = await launcher.start(lambda m: print(m, file=sys.stderr, flush=True))
        return await _bench(endpoint, args.agents, args.turns, args.stagger_s, not args.no_prime,
                            args.rules, args.protocol), "fresh managed engine"
    finally:
        await launcher.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agents", type=int, default=8)
    parser.add_argument("--turns", type=int, default=5, help="model turns per agent, at least")
    parser.add_argument("--stagger-s", type=float, default=0.0, help="delay between agent starts")
    parser.add_argument("--no-prime", action="store_true",
                        help="do not compute the shared system prompt once before the agents start")
    parser.add_argument("--rules", action="store_true", help="give each repository an AGENTS.md of its own")
    parser.add_argument("--protocol", default="auto", choices=[c.value for c in ProtocolChoice],
                        help="the agents' tool-call protocol (auto: guided for a small model like SmolLM2)")
    parser.add_argument("--endpoint", help="use an engine that already runs (its counters may hold others' traffic)")
    parser.add_argument("--api-key", default="")
    parser.add_argument("--model", default=None, help="model name (managed: smollm2 unless set)")
    args = parser.parse_args()
    if args.endpoint:
        endpoint = Endpoint(args.endpoint.rstrip("/").removesuffix("/v1"), args.api_key, args.model or "smollm2",
                            name="external")
        r, where = asyncio.run(_bench(endpoint, args.agents, args.turns, args.stagger_s, not args.no_prime,
                                      args.rules, args.protocol)), "existing engine"
    else:
        r, where = asyncio.run(_managed_endpoint_run(args))
    d = r["delta"]
    ours = sum(x["prompt"] for x in r["results"]) + r["primed_tokens"]
    print(f"{args.agents} agents x >= {args.turns} turns on the {where}, {r['wall_s']:.1f} s\n")
    print(f"{'agent':<8}{'turns':>7}{'runs':>6}{'prompt tok':>12}{'completion tok':>16}")
    for i, x in enumerate(r["results"]):
        print(f"{i:<8}{x['turns']:>7}{x['runs']:>6}{x['prompt']:>12,}{x['completion']:>16,}")
    rate = d["hits"] / d["queries"] if d["queries"] else 0.0
    print(f"\nprefix cache: {d['hits']:,.0f} of {d['queries']:,.0f} queried tokens hit = {rate:.1%}")
    foreign = d["queries"] - ours
    if abs(foreign) > 0.02 * max(ours, 1):
        print(f"note: the counters saw {foreign:+,.0f} tokens beyond the agents' own {ours:,} (other clients?)")
    result = {
        "prefix_hit_rate": round(rate, 4),
        "agents": args.agents,
        "turns_per_agent_min": min(x["turns"] for x in r["results"]),
        "queried_tokens": int(d["queries"]),
        "hit_tokens": int(d["hits"]),
        "agents_prompt_tokens": ours,
        "foreign_tokens": int(foreign),
        "engine": where,
        "primed": not args.no_prime,
        "rules": args.rules,
        "protocol": args.protocol,
        "wall_s": round(r["wall_s"], 1),
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
