"""The path jail: every file tool resolves paths inside the session's root, or refuses.

Refused, each with a message the model can act on: paths that leave the root through
``..``, absolute paths outside it, symlinks (anywhere along the path) pointing outside it,
symlink loops, ``~`` paths, NUL bytes, and writes into ``.git``. Paths are resolved with the
file system (``realpath``), so a symlink inside the root that points outside is caught even
when the path text looks harmless.
"""

from __future__ import annotations

import os
from pathlib import Path


class JailError(Exception):
    """A path the agent may not use; ``str()`` is the message for the model."""


class PathJail:
    """Resolves model-supplied paths against ``root`` and refuses anything outside it."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        real = os.path.realpath(os.fspath(root))
        if not os.path.isdir(real):
            raise JailError(f"the session root {root} is not a directory")
        self.root = Path(real)
        self._root_s = real

    def contains(self, real_path: str) -> bool:
        return real_path == self._root_s or real_path.startswith(self._root_s + os.sep)

    def relative(self, path: str | os.PathLike[str]) -> str:
        """``path`` (already resolved) relative to the root, ``.`` for the root itself."""
        rel = os.path.relpath(os.fspath(path), self._root_s)
        return "." if rel == "." else rel.replace(os.sep, "/")

    def resolve(self, path: str, *, for_write: bool = False) -> Path:
        """The real path ``path`` names inside the root; raises :class:`JailError` otherwise."""
        if not os.path.isdir(self._root_s):  # deleted under the session: never re-create it
            raise JailError(f"the session's directory {self._root_s} no longer exists; "
                            "files cannot be read or written")
        if not isinstance(path, str):
            raise JailError(f"path must be a string, got {type(path).__name__}")
        text = path.strip()
        if text == "":
            raise JailError("path is empty; give a path relative to the project root, e.g. 'src/app.py'")
        if "\x00" in text:
            raise JailError("path contains a NUL byte")
        if text.startswith("~"):
            raise JailError(
                f"'{path}': '~' is not expanded; paths are relative to the project root"
            )
        candidate = text if os.path.isabs(text) else os.path.join(self._root_s, text)
        lexical = os.path.normpath(candidate)
        if not self.contains(lexical) and not self.contains(os.path.realpath(lexical)):
            if os.path.isabs(text):
                raise JailError(
                    f"'{path}' is outside the project root; use a path relative to the root"
                )
            raise JailError(f"'{path}' leaves the project root (through '..'); stay inside it")
        real = os.path.realpath(candidate)
        if not self.contains(real):
            raise JailError(
                f"'{path}' resolves through a symbolic link to a place outside the project root"
            )
        if os.path.lexists(candidate) and not os.path.exists(candidate):
            # a link that dangles, or a loop (realpath gives up on loops without raising)
            raise JailError(f"'{path}' is a broken symbolic link or a symbolic-link loop")
        if for_write:
            rel_parts = Path(self.relative(real)).parts
            if rel_parts and rel_parts[0] == ".git":
                raise JailError(f"'{path}' is inside .git; the repository's internals are off limits")
        return Path(real)

    def display(self, path: str | os.PathLike[str]) -> str:
        return self.relative(path)
