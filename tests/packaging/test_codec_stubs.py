"""The GPL encoders' stand-ins: PyAV still loads, H.264/HEVC fail cleanly, VP9 and AV1 work.

Builds the stand-ins exactly as the bundle build does, puts them in place of x264/x265 in a
copy of PyAV, and encodes a short MP4 with each codec in a fresh interpreter.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import REPO_ROOT

pytestmark = pytest.mark.slow

ENCODE = r"""
import io, json, sys
import av, numpy as np
results = {}
for codec, options in [("libx264", {"preset": "ultrafast"}), ("libx265", {}),
                       ("libvpx-vp9", {"deadline": "realtime", "cpu-used": "8"}),
                       ("libsvtav1", {"preset": "10"})]:
    buf = io.BytesIO()
    try:
        with av.open(buf, "w", format="mp4") as out:
            stream = out.add_stream(codec, rate=30)
            stream.width, stream.height, stream.pix_fmt = 320, 240, "yuv420p"
            stream.options = options
            for i in range(15):
                frame = av.VideoFrame.from_ndarray(np.full((240, 320, 3), i * 15, np.uint8), format="rgb24")
                for packet in stream.encode(frame):
                    out.mux(packet)
            for packet in stream.encode():
                out.mux(packet)
        buf.seek(0)
        with av.open(buf) as back:
            frames = sum(1 for _ in back.decode(video=0))
        results[codec] = {"ok": True, "frames": frames}
    except av.FFmpegError as exc:
        results[codec] = {"ok": False, "error": type(exc).__name__}
print(json.dumps({"av_file": av.__file__, "results": results}))
"""


@pytest.fixture(scope="module")
def av_with_stubs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("cc") is None or shutil.which("nm") is None:
        pytest.skip("a C compiler and nm are needed (Debian: apt-get install gcc binutils)")
    sys.path.insert(0, str(REPO_ROOT / "packaging"))
    try:
        import build_bundle
    finally:
        sys.path.pop(0)
    import av

    root = tmp_path_factory.mktemp("av-stubbed")
    stubs = build_bundle.build_codec_stubs(root / "work")
    assert {s.name.split("-")[0] for s in stubs} == {"libx264", "libx265"}
    site = Path(av.__file__).resolve().parent.parent
    shutil.copytree(site / "av", root / "site" / "av")
    shutil.copytree(site / "av.libs", root / "site" / "av.libs")
    for stub in stubs:
        target = root / "site" / "av.libs" / stub.name
        assert target.is_file(), f"{stub.name} is not what PyAV ships"
        shutil.copyfile(stub, target)
    return root / "site"


def test_stand_ins_leave_only_the_free_encoders(av_with_stubs: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(av_with_stubs)}
    out = subprocess.run([sys.executable, "-c", ENCODE], capture_output=True, text=True, env=env,
                         timeout=300, cwd=av_with_stubs)
    assert out.returncode == 0, out.stderr[-2000:]
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["av_file"].startswith(str(av_with_stubs))
    results = report["results"]
    assert results["libx264"]["ok"] is False and results["libx265"]["ok"] is False
    assert results["libvpx-vp9"] == {"ok": True, "frames": 15}
    assert results["libsvtav1"] == {"ok": True, "frames": 15}


def test_stand_ins_carry_no_encoder(av_with_stubs: Path) -> None:
    import av

    original = Path(av.__file__).resolve().parent.parent / "av.libs"
    markers = {"libx264": b"H.264/MPEG-4 AVC codec", "libx265": b"HEVC encoder version"}
    for stub in av_with_stubs.joinpath("av.libs").glob("libx26*"):
        marker = markers[stub.name.split("-")[0]]
        assert marker in (original / stub.name).read_bytes()  # the real encoder says what it is
        assert marker not in stub.read_bytes()
        assert stub.stat().st_size < (original / stub.name).stat().st_size / 20
