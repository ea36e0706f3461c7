"""Sessions that are one streamed chat each: what the window shows before (or without)
the fleet, and the path the UI benchmark drives. Tokens go from the shared client's
stream straight into the pane's document (a list append); the window's tick paints."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from dataclasses import replace
from typing import Any

from workstation.core.errors import UserError
from workstation.core.session_state import SessionState
from workstation.engine.chat_client import ChatClient
from workstation.ui.backend import NewSessionRequest
from workstation.ui.panes.session_pane import PaneInfo
from workstation.ui.panes.transcript_doc import LineStyle
from workstation.ui.tasks import TaskOwner

log = logging.getLogger(__name__)


class ChatSessions:
    """Implements :class:`workstation.ui.backend.SessionCommands` with plain chats."""

    def __init__(self, window: Any, client: ChatClient | None, *, max_tokens: int = 400) -> None:
        self.window = window
        self.client = client
        self.max_tokens = max_tokens
        self.tasks = TaskOwner("chat", on_error=window.show_error)
        self._ids = itertools.count(1)
        self._history: dict[str, list[dict[str, str]]] = {}
        self._runs: dict[str, asyncio.Task[None]] = {}

    def set_client(self, client: ChatClient | None) -> None:
        self.client = client

    # ----- sessions -----
    def add(self, name: str, prompt: str, *, start: bool = True, repo: str = "chat", mode: str = "ask") -> str:
        session_id = f"chat-{next(self._ids)}"
        info = PaneInfo(session_id=session_id, name=name, repo=repo, branch="", mode=mode,
                        state=SessionState.READY)
        pane = self.window.add_session(info)
        pane.doc.add_block(prompt, LineStyle.USER)
        self._history[session_id] = [{"role": "user", "content": prompt}]
        if start:
            self.start(session_id)
        return session_id

    def start(self, session_id: str) -> None:
        run = self._runs.get(session_id)
        if run is not None and not run.done():
            return
        self._set_state(session_id, SessionState.QUEUED)
        task = self.tasks.spawn(self._run(session_id), f"stream-{session_id}")
        self._runs[session_id] = task

    async def _run(self, session_id: str) -> None:
        doc = self.window.doc(session_id)
        if self.client is None:
            self._set_state(session_id, SessionState.ENGINE_WAIT, "the engine is not ready")
            return
        self._set_state(session_id, SessionState.RUNNING)
        pieces: list[str] = []
        usage_tokens = 0
        try:
            stream = self.client.stream_chat(self._history[session_id], max_tokens=self.max_tokens)
            async with contextlib.aclosing(stream):
                async for delta in stream:
                    if delta.content:
                        doc.stream(delta.content)
                        pieces.append(delta.content)
                    if delta.usage is not None:
                        usage_tokens = delta.usage.total_tokens
        except asyncio.CancelledError:
            doc.end_stream()
            self._set_state(session_id, SessionState.STOPPED)
            raise
        except UserError as exc:
            doc.add_block(str(exc), LineStyle.ERROR)
            self._set_state(session_id, SessionState.FAILED, str(exc))
            return
        doc.end_stream()
        self._history[session_id].append({"role": "assistant", "content": "".join(pieces)})
        pane = self.window.panes.get(session_id)
        if pane is not None and usage_tokens:
            self.window.update_session(replace(pane.info, tokens=pane.info.tokens + usage_tokens))
        self._set_state(session_id, SessionState.DONE)

    def _set_state(self, session_id: str, state: SessionState, reason: str = "") -> None:
        pane = self.window.panes.get(session_id)
        if pane is not None:
            self.window.update_session(replace(pane.info, state=state, detail=reason), reason)

    # ----- SessionCommands -----
    async def create_sessions(self, request: NewSessionRequest) -> None:
        for i in range(max(1, request.copies)):
            name = request.name or request.task.split("\n", 1)[0][:40]
            if request.copies > 1:
                name = f"{name} #{i + 1}"
            self.add(name, request.task, repo=request.repo_path.rsplit("/", 1)[-1] or "chat",
                     mode=request.mode)

    async def start_all(self) -> None:
        for session_id in list(self._history):
            pane = self.window.panes.get(session_id)
            if pane is not None and pane.info.state in (SessionState.READY, SessionState.PAUSED,
                                                         SessionState.ENGINE_WAIT, SessionState.STOPPED):
                self.start(session_id)

    async def pause_all(self) -> None:
        for session_id in list(self._runs):
            await self.toggle_pause(session_id, only_pause=True)

    async def toggle_pause(self, session_id: str, *, only_pause: bool = False) -> None:
        run = self._runs.get(session_id)
        if run is not None and not run.done():
            run.cancel()
            self._set_state(session_id, SessionState.PAUSED)
        elif not only_pause:
            self.start(session_id)

    async def approve(self, session_id: str, edited_arguments: str | None = None) -> None:
        raise UserError("plain chat sessions have nothing to approve")

    async def deny(self, session_id: str, feedback: str) -> None:
        raise UserError("plain chat sessions have nothing to deny")

    async def follow_up(self, session_id: str, text: str, images: tuple[str, ...] = ()) -> None:
        if images:
            raise UserError("images go only with agent sessions on a model that takes them")
        doc = self.window.doc(session_id)
        doc.add_block(text, LineStyle.USER)
        self._history[session_id].append({"role": "user", "content": text})
        self.start(session_id)

    async def diff(self, session_id: str) -> str:
        return ""

    async def integrate(self, session_id: str, action: str) -> None:
        raise UserError("plain chat sessions have no repository")

    def endpoint_names(self) -> list[str]:
        return [self.client.endpoint.name] if self.client else []

    def recent_repositories(self) -> list[str]:
        return []

    def adapter_names(self) -> list[str]:
        return []

    def images_refusal(self) -> str:
        return "a plain chat takes no images"

    def attachments_dir(self) -> str:
        return ""

    async def aclose(self) -> None:
        await self.tasks.aclose()
