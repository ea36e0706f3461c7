"""An edit only git's racily-clean check can see, for tests of throw-away index copies."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path


def racily_clean_edit(worktree: Path, rel: str) -> None:
    """Add ``rel`` ("aaaa") to the worktree's index, then rewrite it at the same size ("bbbb")
    with the same mtime as its index entry and the index itself: stat data alone cannot tell
    the change; git rehashes such an entry only where the index is not older than the file,
    so a copy of the index stamped later (``shutil.copyfile``) hides it."""
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(worktree), *args], check=True, capture_output=True,
                              text=True).stdout.strip()

    index = Path(git("rev-parse", "--path-format=absolute", "--git-path", "index"))
    while time.time() % 1 > 0.5:  # add and rewrite in one second: the entry's ctime matches too
        time.sleep(0.02)
    past_ns = (int(time.time()) - 100) * 10**9
    path = worktree / rel
    path.write_text("aaaa\n")
    os.utime(path, ns=(past_ns, past_ns))
    git("add", rel)
    path.write_text("bbbb\n")
    os.utime(path, ns=(past_ns, past_ns))
    os.utime(index, ns=(past_ns, past_ns))
