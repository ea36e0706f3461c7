"""Real agent sessions against an engine: the check a change must pass before it is kept.

The screening replays a captured shape (lengths, prefixes, code text), not everything the
agents' requests carry (structured outputs, tools, ``n`` choices). On an H200 on 2026-12-01
a change that won the replay, n-gram drafts (+17.3 % over the baseline, above twice the
noise), broke the agents: 32 sessions made 1.2 tool calls each on it and 8.0 without it
(vLLM's ``ngram_gpu`` with structured outputs, its issue #49694). So a kept change also runs
real sessions:

    check = await run_agent_check(services.fleet, endpoint, sessions=8, max_turns=6)
    why = refusal(baseline_check, check)     # None, or the reason in words

:func:`run_agent_check` runs ``sessions`` headless sessions of small scripted tasks (read a
file, write one, finish) on a scratch repository against ``endpoint`` (or several engines
of one profile, the sessions spread over them as the app spreads them) and counts the tool
calls they made and why each ended; around the run it reads each engine's ``/metrics`` for
what the sessions cost it: tokens generated, prefix-cache hits, and the drafts proposed and
accepted where the engine speculates (the GPU suite's ``fleet_on_trials`` are these checks at
32 sessions x 8 turns). :func:`refusal` refuses a change whose sessions made clearly fewer
tool calls than the baseline's did, or ended on an error more often.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workstation.core import agent_events as ev
from workstation.core.endpoints import Endpoint
from workstation.core.session_state import SessionState
from workstation.fleet import SessionSpec
from workstation.fleet.sample_repos import scratch_repository
from workstation.telemetry.vllm_metrics import MetricsReading
from workstation.tuning.loadgen import counters_delta, read_metrics

FILES = {  # the scratch repository the check's sessions work in
    "README.md": "# calc\n\nA tiny calculator library.\n",
    "calc.py": "def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    return a * b\n",
    "strings.py": "def shout(s):\n    return s.upper() + '!'\n",
    "test_calc.py": "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n",
}
TASKS = [
    "Step 1: call read_file with path calc.py. Step 2: call write_to_file with path calc.py and "
    "the same code plus a function sub(a, b) returning a - b. Step 3: call attempt_completion.",
    "Step 1: call read_file with path strings.py. Step 2: call write_to_file with path strings.py "
    "and the same code plus a function whisper(s) returning s.lower(). Step 3: call attempt_completion.",
    "Step 1: call read_file with path README.md. Step 2: call write_to_file with path NOTES.md and "
    "one line describing calc.py. Step 3: call attempt_completion.",
    "Step 1: call read_file with path calc.py. Step 2: call write_to_file with path test_mul.py and "
    "a pytest test that mul(2, 3) == 6. Step 3: call attempt_completion.",
]
TOOL_CALL_SHARE = 0.75
"""A change is refused when its sessions made fewer than this share of the baseline's tool
calls (less half a call: a short check's own spread)."""
ENDED_WELL = (SessionState.DONE, SessionState.NEEDS_INPUT)


@dataclass(frozen=True, slots=True)
class AgentCheck:
    """What one engine's check sessions did."""

    endpoint: str
    """The engine's base URL (several: joined by ``, ``)."""
    sessions: int
    tool_calls_mean: float
    errors: int
    """Sessions that ended on an error (not done, not waiting for the user, not at the turn limit)."""
    ended: dict[str, int] = field(default_factory=dict)
    """Why the sessions ended: ``state: reason`` → how many."""
    seconds: float = 0.0
    error_reasons: dict[str, int] = field(default_factory=dict)
    """The part of ``ended`` that counts as errors."""
    wall_s: float = 0.0
    """The sessions' run, from the first start to the last settled (``seconds`` is everything)."""
    generated_tokens: int = 0
    """Completion tokens of all sessions (their streams' usage)."""
    prefix_hit_rate: float | None = None
    """Prefix-cache hits over queries on the engines during the run (None: no ``/metrics``)."""
    spec_draft_tokens: float | None = None
    """Draft tokens the engine proposed during the run (None: it does not speculate, or no ``/metrics``)."""
    spec_accepted_tokens: float | None = None

    @property
    def generated_tok_s(self) -> float | None:
        return round(self.generated_tokens / self.wall_s, 1) if self.wall_s > 0 else None

    @property
    def spec_acceptance_rate(self) -> float | None:
        """Accepted over proposed draft tokens (None where nothing was drafted)."""
        if not self.spec_draft_tokens or self.spec_accepted_tokens is None:
            return None
        return round(self.spec_accepted_tokens / self.spec_draft_tokens, 4)

    @property
    def states(self) -> dict[str, int]:
        """How many sessions ended in each state."""
        out: Counter[str] = Counter()
        for reason, n in self.ended.items():
            out[reason.split(":", 1)[0]] += n
        return dict(out)

    @property
    def why_not_done(self) -> dict[str, int]:
        """``ended`` less the sessions that finished."""
        return {k: n for k, n in self.ended.items() if k.split(":", 1)[0] != SessionState.DONE.value}

    def to_json(self) -> dict[str, Any]:
        return {"endpoint": self.endpoint, "sessions": self.sessions, "tool_calls_mean": self.tool_calls_mean,
                "errors": self.errors, "ended": dict(self.ended), "error_reasons": dict(self.error_reasons),
                "seconds": round(self.seconds, 1), "wall_s": round(self.wall_s, 1),
                "generated_tok_s": self.generated_tok_s, "prefix_hit_rate": self.prefix_hit_rate,
                "spec_draft_tokens": self.spec_draft_tokens, "spec_accepted_tokens": self.spec_accepted_tokens,
                "spec_acceptance_rate": self.spec_acceptance_rate, "states": self.states,
                "why_not_done": self.why_not_done}


def _rate(part: float | None, whole: float | None) -> float | None:
    return round(part / whole, 4) if part is not None and whole else None


def _turn_limit(error: str | None) -> bool:
    return bool(error) and "limit of" in str(error) and "turns" in str(error)


async def run_agent_check(make_fleet: Callable[..., Any], endpoint: Endpoint | Sequence[Endpoint], *,
                          sessions: int = 8, max_turns: int = 6, timeout_s: float = 180.0) -> AgentCheck:
    """``sessions`` headless agent sessions of :data:`TASKS` against ``endpoint``, at most
    ``max_turns`` model turns each, bounded by ``timeout_s`` (then paused); ``endpoint``: one
    engine or the engines of one profile (named apart), the fleet's router spreading the
    sessions over them. ``make_fleet``:
    :meth:`workstation.services.Services.fleet` (keyword arguments ``endpoints``, ``data_dir``,
    ``max_generating``). Each engine's ``/metrics`` are read through the fleet's client just
    before the sessions start and after they settle, and summed; on a shared engine other
    clients' traffic lands in those counters too. Everything it made is removed after."""
    engines = [endpoint] if isinstance(endpoint, Endpoint) else list(endpoint)
    work = Path(tempfile.mkdtemp(prefix="ws-agent-check-"))
    calls: Counter[str] = Counter()

    def on_agent(item: Any) -> None:
        if isinstance(item.event, ev.ToolCallStarted):
            calls[item.session_id] += 1

    t0 = time.monotonic()
    try:
        repo = work / "repo"
        await asyncio.to_thread(scratch_repository, repo, FILES)
        fleet = make_fleet(endpoints=engines, data_dir=work / "data", max_generating=sessions)
        fleet.agent_event.connect(on_agent)
        await fleet.start()
        try:
            made = []
            for i in range(sessions):
                spec = SessionSpec(task=TASKS[i % len(TASKS)], repo=str(repo), name=f"check{i + 1:02d}",
                                   auto_approve=("read", "edit"), headless=True, max_steps=max_turns)
                made += await fleet.create_sessions(spec, 1)
            before = await _read_all(fleet.http, engines)
            t_run = time.monotonic()
            for s in made:
                await fleet.start_session(s.session_id)
            try:
                async with asyncio.timeout(timeout_s):
                    await fleet.wait_settled()
            except TimeoutError:
                await fleet.pause_all()
            wall = time.monotonic() - t_run
            after = await _read_all(fleet.http, engines)
            rows = fleet.sessions()
        finally:
            fleet.agent_event.disconnect(on_agent)
            await fleet.aclose()
    finally:
        await asyncio.to_thread(shutil.rmtree, work, True)
    ended: Counter[str] = Counter()
    failing: Counter[str] = Counter()
    for r in rows:
        reason = f"{r.state.value}: {(r.error or '')[:90]}".rstrip(": ")
        ended[reason] += 1
        if r.state not in ENDED_WELL and not _turn_limit(r.error):
            failing[reason] += 1
    mean = sum(calls[r.session_id] for r in rows) / len(rows) if rows else 0.0
    return AgentCheck(", ".join(e.base_url for e in engines), len(rows), round(mean, 2), sum(failing.values()), dict(ended),
                      time.monotonic() - t0, dict(failing), wall_s=wall,
                      generated_tokens=sum(r.completion_tokens for r in rows),
                      prefix_hit_rate=_rate(counters_delta(before, after, "prefix_cache_hits"),
                                            counters_delta(before, after, "prefix_cache_queries")),
                      spec_draft_tokens=counters_delta(before, after, "spec_draft_tokens"),
                      spec_accepted_tokens=counters_delta(before, after, "spec_accepted_tokens"))


async def _read_all(http: Any, engines: Sequence[Endpoint]) -> list[MetricsReading | None]:
    return list(await asyncio.gather(*(read_metrics(http, e) for e in engines)))


def refusal(baseline: AgentCheck, candidate: AgentCheck) -> str | None:
    """Why ``candidate`` fails where ``baseline`` passed, in words; None when it holds up."""
    floor = TOOL_CALL_SHARE * baseline.tool_calls_mean - 0.5
    if candidate.tool_calls_mean < floor:
        return (f"refused by the agent check: {candidate.sessions} real sessions made "
                f"{candidate.tool_calls_mean:g} tool calls each on it, {baseline.tool_calls_mean:g} on the baseline")
    if candidate.errors > baseline.errors:
        reasons = candidate.error_reasons or candidate.ended
        worst = max(reasons.items(), key=lambda kv: kv[1])[0] if reasons else "?"
        return (f"refused by the agent check: {candidate.errors} of {candidate.sessions} real sessions ended on "
                f"an error ({baseline.errors} on the baseline), e.g. {worst}")
    return None
