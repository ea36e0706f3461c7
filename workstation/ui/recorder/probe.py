"""Read a finished (or cut-off) recording back: how many frames, how long, what size.

Decodes every frame with PyAV, so it also proves the file plays. For ``workstation demo
--record`` to print what it wrote, and for checks. Qt-free; blocking (run it off the
event loop for long files).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import av

from workstation.core.errors import UserError


@dataclass(frozen=True, slots=True)
class VideoSummary:
    path: Path
    codec: str
    width_px: int
    height_px: int
    frames: int
    duration_s: float
    """Presentation time of the last frame plus one frame interval."""
    fps: float
    bytes: int


def probe_video(path: Path) -> VideoSummary:
    """Decode ``path`` to the end; UserError if it does not play."""
    path = Path(path)
    try:
        with av.open(str(path)) as container:
            stream = container.streams.video[0]
            rate = float(stream.average_rate or stream.base_rate or 0) or None
            frames = 0
            last_s = 0.0
            for frame in container.decode(stream):
                frames += 1
                if frame.pts is not None:
                    last_s = float(frame.pts * frame.time_base)
            fps = rate or (frames / last_s if last_s else 0.0)
            return VideoSummary(
                path=path, codec=stream.codec_context.name, width_px=stream.codec_context.width,
                height_px=stream.codec_context.height, frames=frames,
                duration_s=last_s + (1.0 / fps if fps else 0.0), fps=fps, bytes=path.stat().st_size,
            )
    except (OSError, av.FFmpegError, IndexError) as exc:
        raise UserError(f"{path} is not a playable video: {exc}") from None
