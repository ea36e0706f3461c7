"""The README's sample recording: ``workstation demo`` with 32 sessions on the real engine,
recorded by the app's own recorder, and a still frame of it.

    python docs/demo/make.py [--sessions 32] [--duration 60] [--size 1280x720]

Runs the real verb (``workstation demo --sessions N --record … --duration S --size WxH``) in a
fresh data folder with the prepared engine and models linked in (no earlier session shows
up), then decodes the video with PyAV: frame count, length, and the frame at 80 % of its length
as ``recording-still.png``. ``captions.json`` records the model, the machine and what the
recorder said (frames written, dropped, repeated).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "docs" / "screenshots"))


def save_rgb(picture, out: Path) -> None:  # type: ignore[no-untyped-def]
    """A decoded frame (H x W x 3, RGB) as PNG, through Qt (no Pillow needed)."""
    from PySide6.QtGui import QImage

    height, width, _ = picture.shape
    image = QImage(picture.tobytes(), width, height, 3 * width, QImage.Format.Format_RGB888)
    if not image.save(str(out)):
        raise SystemExit(f"make.py: cannot write {out}")


def still(video: Path, out: Path, at: float = 0.8) -> dict:
    import av

    with av.open(str(video)) as container:
        stream = container.streams.video[0]
        frames = [f for f in container.decode(stream)]
        duration_s = float(frames[-1].pts * stream.time_base) if frames else 0.0
        picture = frames[int(len(frames) * at)].to_ndarray(format="rgb24")
        save_rgb(picture, out)
        return {"frames_decoded": len(frames), "video_s": round(duration_s, 1),
                "size": f"{stream.codec_context.width}x{stream.codec_context.height}"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=32)
    parser.add_argument("--duration", type=float, default=60.0)
    parser.add_argument("--size", default="1280x720")
    parser.add_argument("--out", type=Path, default=HERE)
    args = parser.parse_args(argv)

    from make import fresh_data_dir, machine  # docs/screenshots/make.py

    from workstation.config import load_settings

    data = fresh_data_dir(load_settings().data_dir, "workstation-recording-")
    video = args.out / "recording-sample.mp4"
    env = {**os.environ, "WORKSTATION_DATA_DIR": str(data)}
    env.pop("DISPLAY", None)  # drawn offscreen: the window's own pixels, whatever the desktop
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "workstation", "demo", "--sessions", str(args.sessions), "--record", str(video),
         "--duration", str(args.duration), "--size", args.size],
        env=env, capture_output=True, text=True, check=False,
    )
    said = [line for line in proc.stderr.splitlines() if line.startswith("recorded ")]
    if proc.returncode != 0 or not said:
        sys.stderr.write(proc.stderr[-4000:])
        raise SystemExit(f"make.py: workstation demo exited {proc.returncode}")
    result = {
        "sessions": args.sessions, "recorder": said[-1], "run_s": round(time.monotonic() - started, 1),
        **still(video, args.out / "recording-still.png"),
        "bytes": video.stat().st_size, "model": "SmolLM2-135M-Instruct (Q4_1 GGUF)", "engine": "managed, vLLM CPU build",
        "machine": machine(), "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }
    (args.out / "captions.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
