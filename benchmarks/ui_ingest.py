"""How much streamed text the real window takes in while staying responsive.

A token source runs in a separate process: a real HTTP server on 127.0.0.1 that
streams chat completions in vLLM's SSE format, one token per event, at a set
aggregate rate spread over N streams. The app side is the real path: N fleet sessions
made by the app's service factory, each a real agent whose model turn streams through the
app's stream worker (``engine.stream_batch_ms``; 0: the shared ``httpx`` client on the loop),
the fleet's events and the bridge into the real
:class:`MainWindow` at 1920×1080 (offscreen), on the qasync loop the app runs on.

The measuring window opens once every session streams (``ramp_s``: admission, worktrees and
first checkpoints come first), then ``--warmup``. "Offered" is the set rate; the source also
reports, over the same window (one clock on one machine), what it sent (``source_sent_tok_s``),
what its schedule had due (``source_due_tok_s``), how far behind it was at the end and its own
CPU. "Achieved" counts the tokens that reached the panes' documents (after coalescing, on
the flush tick). Loop lag is how late a 20 ms asyncio sleep wakes up; ``loop_lag_own_p99_ms`` bounds the
part the GUI thread itself was busy (CPU time in the late interval), so lag from other
processes on a shared machine can be told apart. CPU % is the
app process only (the source has its own); ``gui_thread_cpu_percent`` the GUI thread alone
(the stream worker's thread reads the sockets beside it); ``threads_cpu_percent`` every
thread by name ("ws-streams" is the worker); ``app_cpu_us_per_token`` the whole app
process's CPU per token that reached a pane. Saves a final screen grab (``--grab``).

    python benchmarks/ui_ingest.py --sessions 32 --rate 12000 --seconds 60

Prints a short table, then ONE JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks._loop_lag import LoopLag, percentile  # noqa: E402

LAG_PROBE_S = 0.02

# ---------------------------------------------------------------------------
# The token source (runs in its own process: `ui_ingest.py --serve …`)
# ---------------------------------------------------------------------------

SCRIPT = (
    "Reading the failing test first . The temp dir is shared between workers , so two runs race "
    "on the same path .\n```python\ndef make_tmp ( tmp_path_factory ) :\n    base = tmp_path_factory . "
    "mktemp ( \"io\" )\n    return base / \"data.bin\"\n```\nWith a per - test directory the race is "
    "gone . Next I run the suite again to check nothing else depends on the old path .\n"
    "```diff\n- path = \"/tmp/data.bin\"\n+ path = make_tmp ( factory )\n```\n"
)


def _tokens() -> list[str]:
    out: list[str] = []
    for i, word in enumerate(SCRIPT.split(" ")):
        out.append(word if i == 0 or word.startswith("\n") else " " + word)
    return out


def _event(payload: dict) -> bytes:
    return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"


async def _serve(args: argparse.Namespace) -> None:
    tokens = _tokens()
    head = b'data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1,"model":"bench","choices":[{"index":0,"delta":{"content":'
    tail = b'},"logprobs":null,"finish_reason":null,"token_ids":null}]}\n\n'

    def chunk(data: bytes) -> bytes:
        return b"%x\r\n%s\r\n" % (len(data), data)

    # vLLM's chunks to the byte (as its 0.32 sends them), each event its own HTTP chunk, as
    # uvicorn writes them; framed once here so a step costs the source a join and a write
    token_events = [chunk(head + json.dumps(t).encode() + tail) for t in tokens]
    first_event = _event({"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 1, "model": "bench",
                          "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                       "logprobs": None, "finish_reason": None}],
                          "prompt_token_ids": None, "prompt_text": None})
    # Streams start at different places of the script, but never inside a code block.
    starts, fences = [], 0
    for i, t in enumerate(tokens):
        if fences % 2 == 0 and (i == 0 or tokens[i - 1].endswith("\n")):
            starts.append(i)
        fences += t.count("```")
    per_stream = args.rate / max(1, args.sessions)
    streams: list[dict] = []
    stats = {"sent": 0, "streams": 0, "skipped_ticks": 0, "behind": 0}
    # (monotonic s, tokens sent so far, tokens due so far, CPU s so far): the app reads what was offered in
    # its own window from this (the clock is the machine's, shared by both processes)
    samples: list[tuple[float, int, int]] = []
    deadline = time.monotonic() + args.deadline_s

    def finish_events(sent: int) -> bytes:
        return (
            chunk(_event({"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 1, "model": "bench",
                          "choices": [{"index": 0, "delta": {"content": ""}, "logprobs": None,
                                       "finish_reason": "length", "stop_reason": None, "token_ids": None}]}))
            + chunk(_event({"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 1, "model": "bench",
                            "choices": [], "usage": {"prompt_tokens": 20, "total_tokens": 20 + sent,
                                                     "completion_tokens": sent}, "system_fingerprint": "bench"}))
            + chunk(b"data: [DONE]\n\n")
        )

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                request = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in request.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                if length:
                    await reader.readexactly(length)
                if not request.startswith(b"POST ") or b"/chat/completions" not in request.split(b"\r\n", 1)[0]:
                    # /metrics, /v1/models, /health: not an engine's, and never a stream — a
                    # stream here would hold the caller (the meters' scraper, the fleet's
                    # admission, a model lookup) until the deadline
                    writer.write(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n")
                    await writer.drain()
                    continue
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\n"
                             b"transfer-encoding: chunked\r\ncache-control: no-cache\r\n\r\n")
                writer.write(chunk(first_event))
                done = asyncio.get_running_loop().create_future()
                stream = {"writer": writer, "start": time.monotonic(), "sent": 0, "pos": starts[len(streams) % len(starts)],
                          "done": done}
                streams.append(stream)
                stats["streams"] += 1
                await done
                writer.write(finish_events(stream["sent"]) + b"0\r\n\r\n")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    server = await asyncio.start_server(handle, "127.0.0.1", 0, backlog=1024)
    port = server.sockets[0].getsockname()[1]
    print(f"PORT {port}", flush=True)
    # Like an engine step: every stream gets its next token(s) at once, each token its own
    # SSE event; at the default one step per token of a stream.
    step_hz = args.source_hz or min(1000.0, per_stream)
    tick_s = 1.0 / step_hz
    n_tokens = len(token_events)
    next_sample = 0.0
    async with server:
        while time.monotonic() < deadline and not stop.is_set():
            await asyncio.sleep(tick_s)
            now = time.monotonic()
            if now >= next_sample:
                due_all = sum(int((now - s["start"]) * per_stream) for s in streams if not s["done"].done())
                times = os.times()
                samples.append((round(now, 4), stats["sent"], due_all, round(times.user + times.system, 3)))
                next_sample = now + 0.1
            for stream in streams:
                if stream["done"].done():
                    continue
                writer = stream["writer"]
                if writer.is_closing():
                    stream["done"].set_result(None)
                    continue
                due = int((now - stream["start"]) * per_stream) - stream["sent"]
                if due <= 0:
                    continue
                if writer.transport.get_write_buffer_size() > 256_000:  # client behind: back-pressure
                    stats["skipped_ticks"] += 1
                    continue
                pos = stream["pos"]
                if due == 1:
                    data = token_events[pos % n_tokens]
                else:
                    data = b"".join([token_events[(pos + k) % n_tokens] for k in range(due)])
                stream["pos"] = pos + due
                stream["sent"] += due
                stats["sent"] += due
                writer.write(data)
        for stream in streams:
            if not stream["done"].done():
                stream["done"].set_result(None)
        await asyncio.sleep(0.3)
    times = os.times()
    stats["cpu_s"] = round(times.user + times.system, 2)
    stats["samples"] = samples
    print("STATS " + json.dumps(stats), flush=True)


# ---------------------------------------------------------------------------
# The app side
# ---------------------------------------------------------------------------


def _thread_cpu(proc) -> dict[str, float]:  # type: ignore[no-untyped-def]
    """CPU seconds of each thread of this process, by thread name (same names summed)."""
    import threading

    names = {t.native_id: t.name for t in threading.enumerate()}
    out: dict[str, float] = {}
    for thread in proc.threads():
        name = names.get(thread.id, "other")
        out[name] = out.get(name, 0.0) + thread.user_time + thread.system_time
    return out


async def _bench(args: argparse.Namespace, window, port: int) -> dict:
    import psutil

    from benchmarks._fleet_window import open_fleet_window, wait_streaming

    proc = psutil.Process()
    sessions = await open_fleet_window(window, window.settings, port, args.sessions)
    streaming, ramp_s = await wait_streaming(window, args.ramp_timeout)
    await asyncio.sleep(args.warmup)
    docs = [pane.doc for pane in window.panes.values()]
    lag = LoopLag(LAG_PROBE_S)  # on the GUI thread: its own share of a late tick is told apart
    lag.start()
    load0 = os.getloadavg()[0]
    tokens0 = sum(d.tokens_flushed for d in docs)
    cpu0 = proc.cpu_times()
    threads0 = _thread_cpu(proc)
    gui0 = time.thread_time()  # this coroutine runs on the GUI thread, as the window's loop does
    profiler = None
    if args.profile:
        import cProfile

        profiler = cProfile.Profile()
        profiler.enable()
    t0 = time.monotonic()
    await asyncio.sleep(args.seconds)
    elapsed = time.monotonic() - t0
    gui_s = time.thread_time() - gui0
    if profiler is not None:
        profiler.disable()
        profiler.dump_stats(args.profile)
    cpu1 = proc.cpu_times()
    threads1 = _thread_cpu(proc)
    tokens1 = sum(d.tokens_flushed for d in docs)
    await lag.stop()
    frame = window.grab()
    grab_path = Path(args.grab)
    grab_path.parent.mkdir(parents=True, exist_ok=True)
    frame.save(str(grab_path))
    await sessions.aclose()
    cpu_s = (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)
    tokens = max(1, tokens1 - tokens0)
    return {
        "sessions": args.sessions,
        "sessions_streaming": streaming,
        "ramp_s": round(ramp_s, 1),
        "seconds": round(elapsed, 1),
        "offered_tok_s": float(args.rate),
        "achieved_tok_s": round((tokens1 - tokens0) / elapsed, 1),
        "loop_lag_p50_ms": round(percentile(lag.late_s, 50) * 1000, 2),
        "loop_lag_p99_ms": round(percentile(lag.late_s, 99) * 1000, 2),
        "loop_lag_max_ms": round(max(lag.late_s, default=0.0) * 1000, 2),
        "loop_lag_own_p99_ms": round(percentile(lag.own_late_s(), 99) * 1000, 2),
        "load_avg_1m": round(max(load0, os.getloadavg()[0]), 2),
        "cpu_percent": round(100.0 * cpu_s / elapsed, 1),
        "gui_thread_cpu_percent": round(100.0 * gui_s / elapsed, 1),
        "app_cpu_us_per_token": round(1e6 * cpu_s / tokens, 2),
        "gui_thread_cpu_us_per_token": round(1e6 * gui_s / tokens, 2),
        # every thread of the app by name (the stream worker is "ws-streams"), % of a core
        "threads_cpu_percent": {name: round(100.0 * (cpu - threads0.get(name, 0.0)) / elapsed, 1)
                                for name, cpu in sorted(threads1.items(), key=lambda kv: -kv[1])
                                if cpu - threads0.get(name, 0.0) >= 0.005 * elapsed},
        "stream_batch_ms": window.settings.engine.stream_batch_ms,
        "rss_mb": round(proc.memory_info().rss / 1e6, 1),
        "flush_hz": window.settings.ui.flush_hz,
        "grab": str(grab_path),
        "_window": (t0, t0 + elapsed),
    }


def _at(samples: list[list[float]], t: float, column: int) -> float:
    """The source's counter ``column`` at time ``t``, interpolated between its samples."""
    prev = samples[0]
    for sample in samples:
        if sample[0] >= t:
            span = sample[0] - prev[0]
            if span <= 0:
                return float(sample[column])
            return prev[column] + (sample[column] - prev[column]) * (t - prev[0]) / span
        prev = sample
    return float(samples[-1][column])


@dataclass
class SourceRun:
    port: int
    """Where the source listens (127.0.0.1)."""
    stats: dict[str, Any] = field(default_factory=dict)
    """Its ``STATS`` line, once it has stopped: tokens sent, its CPU, samples over time."""


@contextlib.contextmanager
def token_source(*, rate: float, sessions: int, deadline_s: float, source_hz: float = 0,
                 nice: int = 0) -> Iterator[SourceRun]:
    """The token source in its own process (``ui_ingest.py --serve``) for the block, stopped at
    its end (or at ``deadline_s`` by itself). ``nice`` lowers its priority: it stands in for an
    engine that on a GPU machine has cores of its own; on a 2-core box it would otherwise take
    the app's."""
    source = subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve()), "--serve", "--rate", str(rate), "--sessions", str(sessions),
         "--deadline-s", str(deadline_s), "--source-hz", str(source_hz)],
        stdout=subprocess.PIPE, text=True, preexec_fn=(lambda: os.nice(nice)) if nice else None,
    )
    run = None
    try:
        assert source.stdout is not None
        line = source.stdout.readline()
        if not line.startswith("PORT "):
            raise SystemExit(f"token source did not start: {line!r}")
        run = SourceRun(int(line.split()[1]))
        yield run
    finally:
        source.terminate()
        try:
            out, _ = source.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            source.kill()
            out, _ = source.communicate()
        for text in (out or "").splitlines():
            if run is not None and text.startswith("STATS "):
                run.stats = json.loads(text[6:])


def run(args: argparse.Namespace) -> dict:
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtWidgets import QApplication

    from workstation.app import install_qt_logging, make_event_loop, settle_garbage_collector
    from workstation.config import load_settings
    from workstation.ui.main_window import MainWindow
    from workstation.ui.theme import apply_theme

    deadline_s = args.ramp_timeout + args.warmup + args.seconds + 30
    with token_source(rate=args.rate, sessions=args.sessions, deadline_s=deadline_s,
                      source_hz=args.source_hz or 0, nice=args.source_nice) as source:
        settings = load_settings()
        if args.flush_hz:
            settings.ui.flush_hz = args.flush_hz
        if args.stream_batch_ms is not None:
            settings.engine.stream_batch_ms = args.stream_batch_ms
        install_qt_logging()
        app = QApplication.instance() or QApplication(sys.argv[:1])
        apply_theme(app, args.theme)
        loop = make_event_loop(app)
        window = MainWindow(settings)
        window.resize(1920, 1080)
        window.show()
        settle_garbage_collector()  # as the app does once its window is up
        with loop:
            result = loop.run_until_complete(_bench(args, window, source.port))
            window.allow_close()
            window.close()
    t0, t1 = result.pop("_window")
    result["source_nice"] = args.source_nice
    result["cpus"] = os.cpu_count()
    stats = source.stats
    if stats:
        result["source_sent"] = stats["sent"]
        result["source_cpu_s"] = stats.get("cpu_s")
        result["source_skipped_ticks"] = stats.get("skipped_ticks")
        result["source_streams"] = stats.get("streams")
        samples = stats.get("samples") or []
        if len(samples) >= 2:
            sent = _at(samples, t1, 1) - _at(samples, t0, 1)
            due = _at(samples, t1, 2) - _at(samples, t0, 2)
            result["source_sent_tok_s"] = round(sent / (t1 - t0), 1)
            result["source_due_tok_s"] = round(due / (t1 - t0), 1)
            result["source_behind_tokens"] = round(_at(samples, t1, 2) - _at(samples, t1, 1))
            result["achieved_pct_of_offered"] = round(100.0 * result["achieved_tok_s"] / args.rate, 2)
            result["achieved_pct_of_sent"] = round(100.0 * result["achieved_tok_s"] / max(1.0, sent / (t1 - t0)), 2)
            # the source is another process, on the same 2 cores here (an engine on a GPU
            # machine has cores of its own): what it cost over the measuring window
            result["source_cpu_percent"] = round(100.0 * (_at(samples, t1, 3) - _at(samples, t0, 3)) / (t1 - t0), 1)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=32)
    parser.add_argument("--rate", type=float, default=12000.0, help="aggregate tokens/s offered")
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--ramp-timeout", type=float, default=120.0,
                        help="seconds to wait for every session to stream before the warm-up")
    parser.add_argument("--flush-hz", type=float, default=None, help="override settings.ui.flush_hz")
    parser.add_argument("--stream-batch-ms", type=float, default=None,
                        help="override settings.engine.stream_batch_ms (0: streams read on the GUI loop)")
    parser.add_argument("--source-hz", type=float, default=None,
                        help="source steps per second (default: one token per stream per step, at most 1000)")
    parser.add_argument("--theme", choices=("light", "dark"), default="dark")
    parser.add_argument("--profile", help="write a cProfile of the GUI thread over the window to this file")
    parser.add_argument("--source-nice", type=int, default=0,
                        help="niceness of the token source (it stands in for an engine on cores of its own)")
    parser.add_argument("--grab", default=None, help="final screen grab (PNG)")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--deadline-s", type=float, default=120.0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        # The source stops by itself at its deadline, or when the parent goes away.
        asyncio.run(_serve(args))
        return 0
    if args.grab is None:
        args.grab = str(ROOT / "docs" / "screenshots" / f"ui-ingest-{args.sessions}.png")
    result = run(args)
    print(f"{'sessions':>10} {'offered':>9} {'achieved':>9} {'lag p50':>8} {'lag p99':>8} {'cpu %':>6} "
          f"{'gui %':>6} {'us/tok':>7} {'rss MB':>7}")
    print(f"{result['sessions']:>10} {result['offered_tok_s']:>9.0f} {result['achieved_tok_s']:>9.0f} "
          f"{result['loop_lag_p50_ms']:>8.2f} {result['loop_lag_p99_ms']:>8.2f} {result['cpu_percent']:>6.1f} "
          f"{result['gui_thread_cpu_percent']:>6.1f} {result['app_cpu_us_per_token']:>7.2f} {result['rss_mb']:>7.1f}")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
