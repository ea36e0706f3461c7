"""What the user has told an agent that its model has not seen yet, and the question the
model waits on.

:class:`UserInbox` owns the queued notes — a reply that came while the agent ran (or before
its conversation started), a mode switch — delivered into the history before the next model
turn, oldest first; and the pending question (the ``ask_followup_question`` call that waits
for its answer, with the question and options the outcome repeats). A reply to an agent at
rest goes into the history at once: as the question call's result where one is pending, else
as the user's feedback. Every user message and its images are announced from here
(``UserMessageAdded``, ``ImagesAttached``). The history itself stays the agent's: this takes
its ``append`` and ``emit`` as callbacks.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from workstation.agent import prompts
from workstation.agent.history import Message
from workstation.agent.images import ImageAttachment, user_content
from workstation.agent.protocols import tool_result_message
from workstation.agent.tool_specs import QUESTION_TOOL
from workstation.agent.toolcalls import RawCall
from workstation.core import agent_events as ev
from workstation.core.agent_events import ToolProtocol


class UserInbox:
    def __init__(self, session_id: str, *, emit: Callable[[ev.AgentEvent], None],
                 append: Callable[[Message], None]) -> None:
        self._session_id = session_id
        self._emit = emit
        self._append = append
        self._notes: list[str | list[dict[str, Any]]] = []
        self._unsent: list[tuple[int, str, tuple[ImageAttachment, ...]]] = []
        """The user's own queued messages (their place in ``_notes``, text, images)."""
        self.pending_question: str | None = None
        """The call id of the question the model waits on (its result is the answer)."""
        self.question: tuple[str, tuple[str, ...]] = ("", ())
        """The pending question's text and options, as the model asked them."""

    def __bool__(self) -> bool:
        """Whether notes wait to be delivered."""
        return bool(self._notes)

    def queue(self, text: str, images: Sequence[ImageAttachment] = ()) -> None:
        """The user's feedback, sent before the next model turn."""
        self._unsent.append((len(self._notes), text, tuple(images)))
        self._notes.append(user_content(prompts.user_feedback(text), images))
        self._announce(text, images)

    @property
    def has_unsent(self) -> bool:
        """Whether a message of the user's waits to be delivered."""
        return bool(self._unsent)

    def settle(self, protocol: ToolProtocol | None) -> None:
        """What is queued into the history now, as if the user had said it at rest: the first
        of the user's messages answers a pending question, the rest follow as feedback (a run
        ended, by its last turn or by a stop, before its next model turn could take them).
        Already announced when queued: not announced again."""
        if self.pending_question is not None and self._unsent:
            place, text, images = self._unsent[0]
            del self._notes[place]
            self._answer_question(text, images, protocol)
        self.deliver()

    def queue_note(self, content: str) -> None:
        """A note of the app's own (a mode switch), sent before the next model turn."""
        self._notes.append(content)

    def deliver(self) -> None:
        """Every queued note into the history as a user message, oldest first."""
        for note in self._notes:  # text, or text and images (images.user_content)
            self._append({"role": "user", "content": note})
        self._notes.clear()
        self._unsent.clear()

    def asked(self, call_id: str, question: str, options: tuple[str, ...]) -> None:
        """The model asked the user a question; its answer is the call's result."""
        self.pending_question = call_id
        self.question = (question, options)

    def answer(self, text: str, images: Sequence[ImageAttachment], protocol: ToolProtocol | None) -> None:
        """The user's reply into the history now: the pending question's result (a tool result
        carries text only, so its images follow as the user's message), or feedback."""
        if self.pending_question is not None:
            self._answer_question(text, images, protocol)
        else:
            self._append({"role": "user", "content": user_content(prompts.user_feedback(text), images)})
        self._announce(text, images)

    def _answer_question(self, text: str, images: Sequence[ImageAttachment], protocol: ToolProtocol | None) -> None:
        assert self.pending_question is not None
        call = RawCall(self.pending_question, QUESTION_TOOL, "{}")
        answer = prompts.question_answer(text)
        self._append(tool_result_message(protocol or ToolProtocol.NATIVE, call, {}, answer))
        self._emit(ev.ToolCallFinished(self._session_id, call.id, call.name, "ok", answer))
        self.pending_question = None
        if images:
            self._append({"role": "user", "content": user_content(prompts.IMAGES_WITH_ANSWER, images)})

    def images_attached(self, images: Sequence[ImageAttachment], *, with_task: bool) -> None:
        if images:
            self._emit(ev.ImagesAttached(self._session_id, tuple(i.path for i in images),
                                         tuple(i.name for i in images), with_task))

    def _announce(self, text: str, images: Sequence[ImageAttachment]) -> None:
        self._emit(ev.UserMessageAdded(self._session_id, text))
        self.images_attached(images, with_task=False)
