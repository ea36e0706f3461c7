"""What a recording is asked to be: file, codec, frame rate, size — validated up front.

Everything here is plain data (no Qt), so a bad choice is refused with a plain message
before any file is opened. The container follows the file name: ``.mp4`` / ``.m4v`` /
``.mov`` are written as *fragmented* MP4 (a moof every second, so a file cut off by a
crash or SIGKILL still plays up to its last fragment), ``.mkv`` / ``.webm`` as Matroska.
"""

from __future__ import annotations

import datetime as dt
import enum
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from workstation.core.errors import UserError

if TYPE_CHECKING:
    from workstation.fleet.demo_manifest import DemoRecording

MIN_FPS = 1.0
MAX_FPS = 120.0
MIN_SIDE_PX = 16
MAX_SIDE_PX = 8192


class VideoCodec(enum.Enum):
    """Encoders PyAV's wheels carry. H.264 is the default and plays everywhere, but the
    wheels' libx264 is GPL: bundles that must avoid GPL code pick VP9 or AV1."""

    H264 = "h264"
    VP9 = "vp9"
    AV1 = "av1"

    @property
    def encoder_name(self) -> str:
        return _ENCODERS[self]

    @property
    def is_gpl(self) -> bool:
        return self is VideoCodec.H264

    @classmethod
    def parse(cls, text: str) -> VideoCodec:
        key = text.strip().lower().replace("-", "").replace(".", "")
        aliases = {"h264": cls.H264, "avc": cls.H264, "x264": cls.H264, "libx264": cls.H264,
                   "vp9": cls.VP9, "libvpxvp9": cls.VP9, "av1": cls.AV1, "libsvtav1": cls.AV1}
        if key not in aliases:
            raise UserError(
                f"unknown video codec '{text}'", hint="choose h264 (default), vp9 or av1"
            )
        return aliases[key]


_ENCODERS = {VideoCodec.H264: "libx264", VideoCodec.VP9: "libvpx-vp9", VideoCodec.AV1: "libsvtav1"}


class Container(enum.Enum):
    MP4 = "mp4"
    MATROSKA = "matroska"
    WEBM = "webm"


_CONTAINERS = {
    ".mp4": Container.MP4, ".m4v": Container.MP4, ".mov": Container.MP4,
    ".mkv": Container.MATROSKA, ".webm": Container.WEBM,
}


def _even_floor(value: int) -> int:
    return max(2, value - value % 2)


@dataclass(frozen=True, slots=True)
class RecordingOptions:
    """One recording. ``size_px`` None keeps the captured area's own size (rounded down to
    even numbers, as yuv420p needs); otherwise the picture is scaled to fit that box with
    its aspect kept and centred on black where the aspects differ."""

    path: Path
    fps: float = 30.0
    size_px: tuple[int, int] | None = None
    codec: VideoCodec = VideoCodec.H264
    quality_crf: int | None = None
    """Constant-rate factor; None uses the codec's default below. Lower is better/bigger."""
    overlay: bool = False
    """Draw the clock, session count, tok/s and savings onto the frames."""
    duration_s: float | None = None
    """Stop by itself after this long (measured on the monotonic clock); None: until stopped."""
    encoder_threads: int = 1
    """Threads the encoder may use; 1 keeps its cost on one core (0 lets it decide)."""
    encoder_nice: int = 0
    """Scheduling niceness of the encoder process (0–19). 0 gives it a fair share: on the
    busy 2-core machine a niced (5) encoder got too little CPU and dropped 25–60% of its
    pictures at 720p, where at 0 it dropped none; raise it to favour the window instead."""
    queue_s: float = 0.5
    """How much grabbed video may wait for the encoder before frames are dropped."""
    fragment_s: float = 1.0
    """MP4 fragment length: at most this much is lost when the process dies mid-write."""
    preset: str | None = None
    """Encoder speed preset; None uses a real-time default per codec."""
    extra_encoder_options: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", Path(self.path).expanduser())
        if not (MIN_FPS <= self.fps <= MAX_FPS):
            raise UserError(f"frame rate {self.fps:g} is out of range ({MIN_FPS:g}–{MAX_FPS:g} fps)")
        if self.size_px is not None:
            width, height = self.size_px
            if not (MIN_SIDE_PX <= width <= MAX_SIDE_PX and MIN_SIDE_PX <= height <= MAX_SIDE_PX):
                raise UserError(f"video size {width}×{height} is out of range "
                                f"({MIN_SIDE_PX}–{MAX_SIDE_PX} px a side)")
            object.__setattr__(self, "size_px", (_even_floor(width), _even_floor(height)))
        if self.duration_s is not None and self.duration_s <= 0:
            raise UserError(f"recording duration must be positive, not {self.duration_s:g} s")
        if self.encoder_threads < 0:
            raise UserError("encoder_threads must be 0 (automatic) or more")
        if not 0 <= self.encoder_nice <= 19:
            raise UserError("encoder_nice must be between 0 and 19")
        suffix = self.path.suffix.lower()
        if suffix not in _CONTAINERS:
            raise UserError(f"cannot record to '{self.path.name}': unknown video file type",
                            hint="use a .mp4 (default), .mkv or .webm file name")
        if _CONTAINERS[suffix] is Container.WEBM and self.codec is VideoCodec.H264:
            raise UserError("a .webm file cannot hold H.264 video", hint="use vp9 or av1, or .mp4")

    @property
    def container(self) -> Container:
        return _CONTAINERS[self.path.suffix.lower()]

    def container_options(self) -> dict[str, str]:
        """Muxer options: packets reach the file as they come, MP4 in fragments."""
        options = {"flush_packets": "1"}
        if self.container is Container.MP4:
            options["movflags"] = "frag_keyframe+empty_moov+default_base_moof"
            options["frag_duration"] = str(max(1, round(self.fragment_s * 1_000_000)))
        return options

    def encoder_options(self) -> dict[str, str]:
        """Real-time settings per codec: no look-ahead, no B-frames, so nothing piles up
        inside the encoder and a stop or a crash loses as little as possible."""
        gop = str(max(1, round(self.fps * 2)))
        if self.codec is VideoCodec.H264:
            options = {"preset": self.preset or "ultrafast", "tune": "zerolatency",
                       "crf": str(23 if self.quality_crf is None else self.quality_crf), "g": gop}
        elif self.codec is VideoCodec.VP9:
            options = {"deadline": "realtime", "cpu-used": self.preset or "8", "row-mt": "1",
                       "lag-in-frames": "0", "b": "0", "g": gop,
                       "crf": str(32 if self.quality_crf is None else self.quality_crf)}
        else:
            options = {"preset": self.preset or "12", "g": gop,
                       "crf": str(35 if self.quality_crf is None else self.quality_crf)}
        options.update(self.extra_encoder_options)
        return options

    def output_size_for(self, source_w_px: int, source_h_px: int) -> tuple[int, int]:
        """The encoded size when the captured area is ``source``: fixed for the whole file."""
        if self.size_px is not None:
            return self.size_px
        return _even_floor(source_w_px), _even_floor(source_h_px)

    @classmethod
    def from_demo(cls, recording: DemoRecording, path: Path, **overrides: object) -> RecordingOptions:
        """Options from a demo manifest's ``[recording]`` table; keyword overrides win."""
        values: dict[str, object] = {
            "path": path,
            "fps": recording.fps,
            "size_px": recording.size_px,
            "codec": VideoCodec.parse(recording.codec),
            "overlay": recording.overlay,
            "duration_s": recording.duration_s,
        }
        values.update(overrides)
        return cls(**values)  # type: ignore[arg-type]


def default_recording_path(recordings_dir: Path, *, suffix: str = ".mp4") -> Path:
    """A fresh, sortable file name in the recordings folder (``settings.recordings_dir``)."""
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    candidate = recordings_dir / f"workstation-{stamp}{suffix}"
    index = 2
    while candidate.exists():
        candidate = recordings_dir / f"workstation-{stamp}-{index}{suffix}"
        index += 1
    return candidate
