"""What real-time recording costs while the real window streams many sessions.

The window, the client path and the token source are those of ``ui_ingest.py``: a token
source in its own process streams chat completions in vLLM's SSE format at a set aggregate
rate into the real :class:`MainWindow` (1920×1080, offscreen) on the qasync loop. The
run has phases of equal length: without recording, then recording at each output size
(default 1920×1080 and 1280×720, 30 fps, H.264). For each phase: event-loop lag (how late
a 20 ms asyncio sleep wakes, as in ui_ingest), app CPU %, tokens that reached the panes;
for recording phases also frames written / fresh / repeated / dropped, the encoder
thread's CPU, the GUI-thread cost per frame (grab + caption + hand-over) and file size.

    python benchmarks/record_bench.py --sessions 32 --rate 12000 --seconds 20
    python benchmarks/record_bench.py --sessions 128 --rate 100000 --seconds 60 --sizes none,1920x1080

Phases start once every session streams. Each phase also has the load average and what the
token source (another process on the same cores) sent and cost over it.

Prints a short table, then ONE JSON line. The videos are kept with ``--keep DIR``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks._loop_lag import LoopLag, percentile  # noqa: E402
from benchmarks.ui_ingest import LAG_PROBE_S, _at, token_source  # noqa: E402


def _parse_size(text: str) -> tuple[int, int] | None:
    if text == "none":
        return None
    width, height = text.lower().split("x")
    return int(width), int(height)


async def _phase(window, recorder, size: tuple[int, int] | None, args, out_dir: Path) -> dict:
    import psutil

    from workstation.ui.recorder import OverlayValues, RecordingOptions, VideoCodec

    proc = psutil.Process()
    docs = [pane.doc for pane in window.panes.values()]
    lag = LoopLag(LAG_PROBE_S)
    lag.start()
    tokens0 = sum(d.tokens_flushed for d in docs)
    rate_box = {"tok_s": 0.0}

    def overlay() -> OverlayValues:
        return OverlayValues(sessions=len(docs), tokens_per_s=rate_box["tok_s"], note="record_bench")

    result: dict = {"record": "off" if size is None else f"{size[0]}x{size[1]}"}
    if size is not None:
        path = out_dir / f"record-{size[0]}x{size[1]}.mp4"
        recorder.start(window, RecordingOptions(
            path=path, fps=args.fps, size_px=size, codec=VideoCodec.parse(args.codec),
            overlay=args.overlay, duration_s=args.seconds, encoder_nice=args.encoder_nice),
            overlay_source=overlay)
        while not recorder.is_recording:  # the encoder process takes a moment to start
            await asyncio.sleep(0.02)
    cpu0 = proc.cpu_times()
    load0 = os.getloadavg()[0]
    t0 = time.monotonic()
    while time.monotonic() - t0 < args.seconds:
        await asyncio.sleep(0.5)
        rate_box["tok_s"] = (sum(d.tokens_flushed for d in docs) - tokens0) / (time.monotonic() - t0)
    elapsed = time.monotonic() - t0
    cpu1 = proc.cpu_times()
    tokens1 = sum(d.tokens_flushed for d in docs)
    await lag.stop()
    cpu_s = (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)
    result.update(
        seconds=round(elapsed, 1),
        achieved_tok_s=round((tokens1 - tokens0) / elapsed, 1),
        loop_lag_p50_ms=round(percentile(lag.late_s, 50) * 1000, 2),
        loop_lag_p99_ms=round(percentile(lag.late_s, 99) * 1000, 2),
        cpu_percent=round(100.0 * cpu_s / elapsed, 1),
        load_avg_1m=round(max(load0, os.getloadavg()[0]), 2),
        _window=(t0, t0 + elapsed),
    )
    if size is not None:
        future = recorder.stop()
        while not future.done():
            await asyncio.sleep(0.05)
        rec = future.result()
        result.update(
            ok=rec.ok,
            frames_written=rec.frames_written,
            frames_expected=round(args.seconds * args.fps),
            frames_fresh=rec.frames_fresh,
            frames_repeated=rec.frames_repeated,
            frames_dropped=rec.frames_dropped,
            dropped_pct=round(rec.dropped_pct, 2),
            repeated_pct=round(rec.repeated_pct, 2),
            encoder_cpu_percent=round(100.0 * rec.encoder_cpu_s / rec.wall_duration_s, 1),
            encoder_ms_per_frame=round(1000.0 * rec.encoder_cpu_s / max(1, rec.frames_fresh), 2),
            gui_ms_per_frame_p50=round(rec.grab_ms_p50, 2),
            gui_ms_per_frame_p99=round(rec.grab_ms_p99, 2),
            capture=rec.capture_method,
            file_mb=round(rec.bytes_written / 1e6, 2),
            mbit_s=round(rec.bytes_written * 8 / 1e6 / rec.duration_s, 2),
        )
        if args.verify:
            import av

            with av.open(str(rec.path)) as container:
                result["frames_decoded"] = sum(1 for _ in container.decode(video=0))
    return result


async def _bench(args, window, port: int, out_dir: Path) -> list[dict]:
    from benchmarks._fleet_window import open_fleet_window, wait_streaming
    from workstation.ui.recorder import Recorder

    sessions = await open_fleet_window(window, window.settings, port, args.sessions)
    streaming, _ramp_s = await wait_streaming(window, 120.0)
    if streaming < args.sessions:
        print(f"only {streaming} of {args.sessions} sessions stream", file=sys.stderr)
    await asyncio.sleep(args.warmup)
    recorder = Recorder(window)
    phases = []
    for _ in range(args.rounds):  # alternating phases share the machine's changing load
        for size in args.sizes:
            phases.append(await _phase(window, recorder, size, args, out_dir))
            await asyncio.sleep(1.0)
    await sessions.aclose()
    return phases


def run(args: argparse.Namespace, out_dir: Path) -> list[dict]:
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtWidgets import QApplication

    from workstation.app import install_qt_logging, make_event_loop
    from workstation.config import load_settings
    from workstation.ui.main_window import MainWindow
    from workstation.ui.theme import apply_theme

    deadline_s = 120 + 2 * (args.warmup + args.rounds * len(args.sizes) * (args.seconds + 4)) + 120
    with token_source(rate=args.rate, sessions=args.sessions, deadline_s=deadline_s,
                      nice=args.source_nice) as source:
        settings = load_settings()
        install_qt_logging()
        app = QApplication.instance() or QApplication(sys.argv[:1])
        apply_theme(app, "dark")
        loop = make_event_loop(app)
        window = MainWindow(settings)
        window.resize(*args.window)
        window.show()
        with loop:
            phases = loop.run_until_complete(_bench(args, window, source.port, out_dir))
            window.allow_close()
            window.close()
    samples = source.stats.get("samples") or []
    for phase in phases:
        t0, t1 = phase.pop("_window")
        if len(samples) >= 2:  # what the source (another process, same cores) sent and cost
            phase["source_sent_tok_s"] = round((_at(samples, t1, 1) - _at(samples, t0, 1)) / (t1 - t0), 1)
            phase["source_cpu_percent"] = round(100.0 * (_at(samples, t1, 3) - _at(samples, t0, 3)) / (t1 - t0), 1)
    return phases


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=32)
    parser.add_argument("--rate", type=float, default=12000.0, help="aggregate tokens/s offered")
    parser.add_argument("--seconds", type=float, default=20.0, help="length of each phase")
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--fps", type=float, default=30.0)
    parser.add_argument("--codec", default="h264")
    parser.add_argument("--overlay", action="store_true", help="burn the caption into the frames")
    parser.add_argument("--window", type=_parse_size, default=(1920, 1080), help="window size WxH")
    parser.add_argument("--sizes", default="none,1920x1080,1280x720",
                        help="phases: comma-separated output sizes, 'none' = not recording")
    parser.add_argument("--rounds", type=int, default=1, help="repeat the phases this many times")
    parser.add_argument("--encoder-nice", type=int, default=0, help="niceness of the encoder process")
    parser.add_argument("--source-nice", type=int, default=0,
                        help="niceness of the token source (it stands in for an engine on cores of its own)")
    parser.add_argument("--keep", type=Path, default=None, help="keep the videos in this folder")
    parser.add_argument("--verify", action="store_true", help="decode each video and count frames")
    args = parser.parse_args(argv)
    args.sizes = [_parse_size(s.strip()) for s in args.sizes.split(",")]
    with tempfile.TemporaryDirectory(prefix="record-bench-") as tmp:
        out_dir = args.keep or Path(tmp)
        out_dir.mkdir(parents=True, exist_ok=True)
        load_before = os.getloadavg()[0]
        phases = run(args, out_dir)
    print(f"{'record':>10} {'tok/s':>7} {'lag p50':>8} {'lag p99':>8} {'cpu %':>6} {'frames':>7} "
          f"{'repeat':>7} {'drop':>5} {'drop %':>7} {'enc cpu%':>8} {'gui ms':>7} {'MB':>6}")
    for p in phases:
        print(f"{p['record']:>10} {p['achieved_tok_s']:>7.0f} {p['loop_lag_p50_ms']:>8.2f} "
              f"{p['loop_lag_p99_ms']:>8.2f} {p['cpu_percent']:>6.1f} {p.get('frames_written', '-'):>7} "
              f"{p.get('frames_repeated', '-'):>7} {p.get('frames_dropped', '-'):>5} "
              f"{p.get('dropped_pct', '-'):>7} {p.get('encoder_cpu_percent', '-'):>8} "
              f"{p.get('gui_ms_per_frame_p50', '-'):>7} {p.get('file_mb', '-'):>6}")
    by_record: dict[str, dict] = {}
    for name in dict.fromkeys(p["record"] for p in phases):
        group = [p for p in phases if p["record"] == name]
        keys = ("achieved_tok_s", "loop_lag_p50_ms", "loop_lag_p99_ms", "cpu_percent", "dropped_pct",
                "repeated_pct", "encoder_cpu_percent", "gui_ms_per_frame_p50", "mbit_s",
                "source_sent_tok_s", "source_cpu_percent", "load_avg_1m")
        by_record[name] = {k: round(statistics.median(p[k] for p in group), 2)
                           for k in keys if k in group[0]}
        if "frames_written" in group[0]:
            by_record[name]["frames_dropped"] = sum(p["frames_dropped"] for p in group)
            by_record[name]["frames_grabbed"] = sum(p["frames_fresh"] + p["frames_dropped"] for p in group)
    summary = {
        "sessions": args.sessions, "offered_tok_s": args.rate, "fps": args.fps, "codec": args.codec,
        "window": f"{args.window[0]}x{args.window[1]}", "cpus": os.cpu_count(),
        "encoder_nice": args.encoder_nice, "source_nice": args.source_nice, "rounds": args.rounds, "seconds_per_phase": args.seconds,
        "load_avg_before": round(load_before, 2), "load_avg_after": round(os.getloadavg()[0], 2),
        "median_by_record": by_record, "phases": phases,
    }
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
