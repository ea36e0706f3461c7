"""The tree of a worktree as it is, written through a throw-away copy of its index.

Checkpoints, review's diff and the fleet's check for the user's own work all ask git for the
state of a worktree as a tree (tracked and new files, not ignored ones) without touching the
worktree's own index or files. They do it here, one way:

- The copy keeps the index's mtime (``shutil.copy2``). Git trusts an entry's stat data only
  for a file older than the index; one changed in the same second as the index was written
  ("racily clean") is rehashed. A copy stamped now would make such a file, rewritten at the
  same size, look unchanged. The copy's stat cache spares rehashing every other file.
- Without an index (nothing was ever added, or it was deleted) the throw-away index starts
  from HEAD's tree, so files tracked there that an ignore rule matches stay in (``add -A``
  into an empty index leaves them out: they would look deleted). Without a HEAD either, it
  starts empty.
- ``exclude`` leaves paths out (the links and bootstrap files the fleet puts into a session's
  worktree); name only paths git would pick up: naming an ignored one makes ``git add`` fail.
  :func:`unignored` picks those out of a list, with one ``git check-ignore`` for all.

Git runs through the caller's runner (the agent's ``checkpoints.git``, the fleet's
``GitRunner``), given as ``run``: git's arguments and extra environment in, stdout out, an
exception of the runner's own on failure; or, where the exit status is an answer, as
``probe``. File work runs through the caller's ``blocking`` (the fleet's git threads; inline
by default).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any

GitRun = Callable[[Sequence[str], Mapping[str, str]], Awaitable[str]]
"""Runs ``git args…`` in the worktree with ``GIT_*`` variables added; returns stdout."""
Blocking = Callable[..., Awaitable[Any]]
"""Runs ``fn(*args)`` (blocking file work) and returns its result."""
GitProbe = Callable[[Sequence[str], bytes], Awaitable[tuple[int, str]]]
"""Runs ``git args…`` in the worktree with the bytes on its stdin; returns its exit status and
stdout, whatever the status (``check-ignore`` answers "none of them" with 1)."""


async def inline(fn: Callable[..., Any], *args: Any) -> Any:
    """A ``Blocking`` that runs ``fn`` right here, on the caller's thread."""
    return fn(*args)


def excluding(paths: Sequence[str] = ()) -> list[str]:
    """The pathspec ``-- . :(exclude)p…``: the whole worktree but ``paths``."""
    return ["--", ".", *(f":(exclude){path}" for path in paths)]


async def unignored(probe: GitProbe, paths: Sequence[str]) -> list[str]:
    """The ``paths`` (relative to the worktree) that no ignore rule matches, in their order:
    those ``exclude`` may name. The index is not asked (``--no-index``): a tracked path an
    ignore rule matches counts as ignored.

    One ``git check-ignore --stdin -z`` answers for all of them (a process per path cost
    review ~5 ms a link, measured). Git stops at a path it cannot answer for (one beyond a
    symbolic link, such as ``link/``: exit 128); then each path is asked alone, as before,
    and such a path counts as not ignored."""
    if not paths:
        return []
    status, out = await probe(["check-ignore", "--no-index", "--stdin", "-z"],
                              b"".join(os.fsencode(path) + b"\0" for path in paths))
    if status in (0, 1):  # 1: none is ignored
        ignored = set(out.split("\0"))  # each printed as it was given
        return [path for path in paths if path not in ignored]
    picked = []
    for path in paths:
        status, _ = await probe(["check-ignore", "-q", "--no-index", "--", path], b"")
        if status != 0:
            picked.append(path)
    return picked


@contextlib.asynccontextmanager
async def scratch_index(blocking: Blocking = inline, *, copy_of: str | None = None
                        ) -> AsyncIterator[dict[str, str]]:
    """``{"GIT_INDEX_FILE": …}`` naming an index file in a temporary folder, removed afterwards:
    a copy of the index ``copy_of`` with its mtime (see above), else none yet (git starts
    from an empty index)."""
    folder = await blocking(tempfile.mkdtemp, "", "ws-index-")
    try:
        index = os.path.join(folder, "index")
        if copy_of is not None:
            await blocking(shutil.copy2, copy_of, index)
        yield {"GIT_INDEX_FILE": index}
    finally:
        await blocking(shutil.rmtree, folder, True)


async def worktree_tree(run: GitRun, *, exclude: Sequence[str] = (), blocking: Blocking = inline) -> str:
    """The id of the tree of the worktree ``run`` works in, as it is now (tracked and new
    files, not ignored ones, not ``exclude``); its own index and files stay as they are."""
    real = await run(["rev-parse", "--path-format=absolute", "--git-path", "index"], {})
    has_index = await blocking(os.path.isfile, real)
    async with scratch_index(blocking, copy_of=real if has_index else None) as env:
        if not has_index:
            head = await run(["rev-list", "--ignore-missing", "--max-count=1", "HEAD"], env)
            if head:  # empty: HEAD has no commit yet
                await run(["read-tree", head], env)
        await run(["add", "-A", *excluding(exclude)], env)
        return await run(["write-tree"], env)
