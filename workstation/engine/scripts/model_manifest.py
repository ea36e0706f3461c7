"""The manifest every prepared model directory ends with: each file's size and SHA-256.
(Imported by the sibling scripts, which run in the engine's Python.)"""

import hashlib
import json
import time
from pathlib import Path

MANIFEST = "workstation-model.json"


def sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_manifest(out_dir, name, source):
    out_dir = Path(out_dir)
    files = {
        p.name: {"bytes": p.stat().st_size, "sha256": sha256(p)}
        for p in sorted(out_dir.iterdir())
        if p.is_file() and p.name != MANIFEST
    }
    manifest = {"name": name, "source": source, "created": time.time(), "files": files}
    (out_dir / MANIFEST).write_text(json.dumps(manifest, indent=2))
