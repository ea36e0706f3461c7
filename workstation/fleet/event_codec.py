"""Agent events to and from the store's rows, and the message history rebuilt from them.

Which events are stored: all but the per-token stream pieces (text, reasoning and tool-call
deltas, command output chunks). Those are shown live and then summed up by events that are
stored (``TurnFinished`` has the whole text, ``ToolCallFinished`` the result the model saw),
so the transcript is rebuilt without them and the store grows per message, not per token.
"""

from __future__ import annotations

import dataclasses
import enum
import types
import typing
from collections.abc import Iterable
from functools import cache
from typing import Any

import orjson

from workstation.core import agent_events as ev
from workstation.core.secrets import scrub_bytes

EPHEMERAL: frozenset[type] = frozenset(
    {ev.TextStreamed, ev.ReasoningStreamed, ev.ToolCallStreamed, ev.CommandOutputStreamed}
)
"""Event types shown live but not stored."""

_TYPES: dict[str, type] = {
    name: obj
    for name, obj in vars(ev).items()
    if isinstance(obj, type) and dataclasses.is_dataclass(obj) and obj.__module__ == ev.__name__
}


def is_stored(event: object) -> bool:
    return type(event) not in EPHEMERAL


def encode(event: object) -> tuple[str, bytes]:
    """``(kind, payload)`` for the store; ``kind`` is the event's class name. Known secret
    shapes are scrubbed from the payload (it stays valid JSON; see ``core/secrets.py``)."""
    return type(event).__name__, scrub_bytes(orjson.dumps(event))


@cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def decode(kind: str, payload: dict[str, Any]) -> object | None:
    """The event back from a stored row; None for a kind this version does not know."""
    cls = _TYPES.get(kind)
    if cls is None:
        return None
    hints = _hints(cls)
    kwargs: dict[str, Any] = {}
    for field in dataclasses.fields(cls):
        if field.name not in payload:
            continue
        kwargs[field.name] = _coerce(hints.get(field.name), payload[field.name])
    try:
        return cls(**kwargs)
    except TypeError:  # a stored event missing a field a newer version requires
        return None


def _coerce(hint: Any, value: Any) -> Any:
    if value is None or hint is None:
        return value
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        for arg in typing.get_args(hint):
            if arg is type(None):
                continue
            try:
                return _coerce(arg, value)
            except (ValueError, TypeError):
                continue
        return value
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return hint(value)
    if origin is tuple and isinstance(value, list):
        return tuple(value)
    return value


def history_from_events(events: Iterable[object]) -> list[dict[str, Any]]:
    """The exact message history the agent had, from its ``MessageAppended`` /
    ``HistoryReplaced`` events in order (partial model turns are never in it: an assistant
    message is appended only once its turn finished)."""
    messages: list[dict[str, Any]] = []
    for event in events:
        if isinstance(event, ev.MessageAppended):
            if event.index < len(messages):
                del messages[event.index:]
            messages.append(orjson.loads(event.message_json))
        elif isinstance(event, ev.HistoryReplaced):
            messages = list(orjson.loads(event.messages_json))
    return messages
