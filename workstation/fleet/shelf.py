"""Where sessions stand besides their state: their name and whether they are in the grid or
in the archive. A merged or discarded session leaves the grid for the archive (its worktree,
branch and transcript stay, so it can come back or be removed for good); a rename changes the
name the grid shows (its branch keeps the name it was made with: git history and the user's
checkouts may already name it)."""

from __future__ import annotations

from collections.abc import Callable

from workstation.core.errors import UserError
from workstation.core.fleet_events import SessionArchived, SessionRenamed
from workstation.fleet.book import SessionBook
from workstation.fleet.repos import validate_session_name
from workstation.fleet.store import Store


class SessionShelf:
    def __init__(self, book: SessionBook, store: Store, *, emit: Callable[[object], None]) -> None:
        self._book = book
        self._store = store
        self._emit = emit

    def archived(self) -> list[str]:
        """The sessions in the archive, oldest first."""
        return [r.session_id for r in self._book.records() if r.archived]

    def archive(self, session_id: str, note: str = "archived") -> None:
        """Move a session out of the grid into the archive; a working one must stop first."""
        rec = self._book.rec(session_id)
        if rec.state.is_active:
            raise UserError(f"{rec.name} is still working; stop it before archiving it")
        note = note.strip() or "archived"
        if rec.archived == note:
            return
        rec.archived = note
        self._store.queue_update(session_id, archived=note)
        self._emit(SessionArchived(session_id, note))

    def unarchive(self, session_id: str) -> None:
        rec = self._book.rec(session_id)
        if not rec.archived:
            return
        rec.archived = ""
        self._store.queue_update(session_id, archived="")
        self._emit(SessionArchived(session_id, ""))

    async def rename(self, session_id: str, name: str) -> None:
        """A new name for the grid (unique among sessions); the branch stays as it is."""
        rec = self._book.rec(session_id)
        name = validate_session_name(name.strip())
        if name == rec.name:
            return
        if name in self._book.names():
            raise UserError(f"a session named {name!r} already exists")
        await self._store.update_session(session_id, name=name)
        rec.name = name
        self._emit(SessionRenamed(session_id, name))
