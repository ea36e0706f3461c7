"""Server-sent events over raw bytes, reduced to chat deltas and coalesced — the hot path.

vLLM sends one SSE event per token (``data: {json}\\n\\n``). At DGX rates (eight H200s serve on
the order of 100,000 tok/s) any per-event object churn costs the app a core: ``httpx-sse``
builds an event object and decodes a ``str`` per line before the JSON parser sees it. Here
the body bytes are split on the blank line that ends an event, the ``data:`` payload goes to
``orjson`` as bytes, and only the fields the app uses are kept (:class:`ChatDelta`).

:class:`Coalescer` then folds the deltas that arrived since the consumer last looked into as
few as keep the order: consecutive text pieces become one, consecutive tool-call fragments
one list; a change of kind (text → tool call, or back) or of choice (``n`` > 1) starts a new
delta, so an agent sees
everything in the order the server sent it. ``events`` counts what was folded (one per token
at vLLM's default stream interval).

Pure: no I/O, no event loop; both byte sources (``httpx`` and the stream worker's sockets)
feed the same decoder.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from workstation.core.errors import UserError

DONE = object()
"""What :func:`reduce_payload` returns for ``data: [DONE]``."""


@dataclass(frozen=True, slots=True)
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass(slots=True)
class ChatDelta:
    """One streamed chunk (or several coalesced), reduced to what the app uses."""

    content: str = ""
    reasoning: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    finish_reason: str | None = None
    usage: Usage | None = None
    events: int = 1
    """Token-carrying SSE events folded into this delta (tokens, at vLLM's default stream
    interval; 0 for a chunk with only a role, a finish reason or usage)."""
    index: int = 0
    """Which choice the piece belongs to (a request for ``n`` > 1 streams them interleaved)."""


class EngineHTTPError(UserError):
    """The endpoint answered with an error status or a malformed stream."""

    def __init__(self, message: str, *, status: int | None = None, retryable: bool = False):
        super().__init__(message)
        self.status = status
        self.retryable = retryable


class EngineUnreachable(UserError):
    """Nothing answers at the endpoint (engine stopped, crashed or hung)."""


RETRYABLE_STATUS = frozenset({429, 500, 502, 503, 504})


def status_error(status: int, body: bytes) -> EngineHTTPError:
    """An engine's non-200 answer as the error both byte sources raise: its own message where
    the body is an error object (vLLM's ``{"error": {"message": …}}``, an older
    ``{"message": …}``, a proxy's ``{"detail": …}``), the text of a JSON string, else the
    body's start — whatever JSON (or none) the body holds."""
    text = body.decode("utf-8", "replace").strip()[:300] or "(no body)"
    try:
        payload = orjson.loads(body)
    except ValueError:
        payload = None
    return EngineHTTPError(f"engine answered HTTP {status}: {_error_message(payload) or text}", status=status,
                           retryable=status in RETRYABLE_STATUS)


def _error_message(payload: object) -> str | None:
    if isinstance(payload, str):
        return payload[:300] or None
    if not isinstance(payload, dict):
        return None
    err = payload.get("error")
    if isinstance(err, dict):
        err = err.get("message")
    for message in (err, payload.get("message"), payload.get("detail")):
        if isinstance(message, str) and message:
            return message[:300]
    return None


def not_streaming_error(status: int | None, content_type: str) -> EngineHTTPError:
    return EngineHTTPError(f"engine did not stream (content-type {content_type or 'missing'})", status=status)


class SseDecoder:
    """Bytes in, complete events' ``data`` payloads out (as bytes, lines joined with ``\\n``).

    Accepts ``\\n`` and ``\\r\\n`` line ends, comments (``:``), other fields (ignored) and an
    event split anywhere across feeds."""

    __slots__ = ("_buffer", "_template")

    def __init__(self) -> None:
        self._buffer = b""
        self._template: TextTemplate | None = None

    def feed(self, data: bytes) -> list[bytes]:
        buffer = self._buffer + data if self._buffer else data
        held = b""
        if b"\r" in buffer:
            if buffer.endswith(b"\r"):  # perhaps a \r\n cut in half: hold the \r for the next feed
                buffer, held = buffer[:-1], b"\r"
            buffer = buffer.replace(b"\r\n", b"\n")
        out: list[bytes] = []
        start = 0
        while True:
            end = buffer.find(b"\n\n", start)
            if end < 0:
                break
            block = buffer[start:end]
            start = end + 2
            if block.startswith(b"data:") and b"\n" not in block:  # the common case: one data line
                payload = block[5:]
                out.append(payload[1:] if payload.startswith(b" ") else payload)
                continue
            lines = [line[5:].removeprefix(b" ") for line in block.split(b"\n") if line.startswith(b"data:")]
            if lines:
                out.append(b"\n".join(lines))
        self._buffer = buffer[start:] + held
        return out

    def feed_parsed(self, data: bytes) -> tuple[list[Any] | None, list[bytes]]:
        """:meth:`feed`, with vLLM's case parsed at once: when every complete event is one
        ``data: {…}`` line (no comment, field, ``\\r`` or ``[DONE]``), the events become ONE
        JSON array by a single replace on the bytes and ONE ``orjson`` call — ``(objects, [])``;
        and when they are all text chunks of the stream's :class:`TextTemplate`, one
        :class:`TextRun` stands for them all. Otherwise ``(None, payloads)`` as :meth:`feed`
        gives them. (A raw newline cannot be inside a JSON payload, so the line structure is
        checked by counting.)"""
        buffer = self._buffer + data if self._buffer else data
        if b"\r" not in buffer:
            end = buffer.rfind(b"\n\n")
            if end < 0:
                self._buffer = buffer
                return None, []
            complete = buffer[:end + 2]
            newlines = complete.count(b"\n")  # one byte: far quicker to count than b"\n\n"
            if self._template is not None:
                run = self._template.match(complete, newlines)
                if run is not None:
                    self._buffer = buffer[end + 2:]
                    return [run], []
            # n events of one line each: every newline is in one of the n - 1 "\n\ndata: {"
            # between them or in the final "\n\n"
            n = newlines // 2
            if (complete.startswith(b"data: {") and newlines % 2 == 0
                    and complete.count(b"\n\ndata: {") == n - 1 and b"[DONE]" not in complete):
                try:
                    objs = orjson.loads(b"[" + complete[6:-2].replace(b"\n\ndata: ", b",") + b"]")
                except orjson.JSONDecodeError:
                    objs = None
                # pieces that are not JSON alone can join into JSON: then the count differs
                if objs is not None and len(objs) == n:
                    self._buffer = buffer[end + 2:]
                    if plain_text(objs[-1]) is not None:  # (re)learn the text chunks' shape
                        cut = complete.rfind(b"\n\n", 0, len(complete) - 2)
                        self._template = TextTemplate.learn(complete[cut + 2:] if cut >= 0 else complete)
                    return objs, []
        return None, self.feed(data)

    @property
    def pending(self) -> int:
        """Bytes of an event not yet complete."""
        return len(self._buffer)


@dataclass(frozen=True, slots=True)
class TextRun:
    """Consecutive text-only chunks of choice 0 (see :class:`TextTemplate`), folded."""

    text: str
    events: int


_CONTENT_AT = b'"delta":{"content":"'


class TextTemplate:
    """What every text chunk of one stream shares: vLLM's differ only in the content string
    (``id``, ``created`` and ``model`` are the request's). A read of nothing but such events
    is cut around those strings by ``bytes.split`` and the strings decoded by one ``orjson``
    call: no object, no Python step per token.

    Sound by construction: the template is learnt from one text-only event and checked by
    parsing it with two other strings in the content's place (the content must be what the
    chunk says, so no duplicate key hides it); a read matches only if it is exactly
    ``head + string + tail`` repeated, each string valid JSON and not empty. Anything else
    — a finish, usage, a tool call, a changed id — is parsed as a whole chunk."""

    __slots__ = ("head", "tail", "glue")

    def __init__(self, head: bytes, tail: bytes) -> None:
        self.head, self.tail, self.glue = head, tail, tail + head

    @classmethod
    def learn(cls, event: bytes) -> TextTemplate | None:
        """From one whole event (``data: {…}\\n\\n``); None unless it is a text-only chunk."""
        at = event.find(_CONTENT_AT)
        if at < 0 or event.find(_CONTENT_AT, at + 1) >= 0:
            return None
        start = at + len(_CONTENT_AT) - 1  # the string's opening quote
        end = start + 1
        while True:  # its closing quote: one not escaped by an odd run of backslashes
            end = event.find(b'"', end)
            if end < 0:
                return None
            slashes = 0
            while event[end - 1 - slashes] == 0x5C:
                slashes += 1
            if slashes % 2 == 0:
                break
            end += 1
        head, tail = event[:start], event[end + 1:]
        if not head.startswith(b"data: {") or b"\n" in head or not tail.endswith(b"}\n\n") or tail.count(b"\n") != 2:
            return None
        for probe in ("p", "q"):
            try:
                if plain_text(orjson.loads(head[6:] + orjson.dumps(probe) + tail[:-2])) != probe:
                    return None
            except orjson.JSONDecodeError:
                return None
        return cls(head, tail)

    def match(self, complete: bytes, newlines: int) -> TextRun | None:
        """``complete`` (whole events, ``newlines`` the count of b"\\n" in it) as one run, or
        None. (Only the tail has newlines, two; a JSON string has none.)"""
        head, tail = self.head, self.tail
        if not (complete.startswith(head) and complete.endswith(tail)):
            return None
        parts = complete[len(head):len(complete) - len(tail)].split(self.glue)
        events = len(parts)
        if newlines != 2 * events:
            return None
        try:
            texts = orjson.loads(b"[" + b",".join(parts) + b"]")
        except orjson.JSONDecodeError:
            return None
        if len(texts) != events or not all(type(t) is str and t for t in texts):
            return None
        return TextRun("".join(texts), events)


def _usage(raw: dict[str, Any] | None) -> Usage | None:
    if not raw:
        return None
    details = raw.get("prompt_tokens_details") or {}
    return Usage(
        prompt_tokens=int(raw.get("prompt_tokens") or 0),
        completion_tokens=int(raw.get("completion_tokens") or 0),
        cached_tokens=int(details.get("cached_tokens") or 0),
    )


def reduce_payload(data: bytes | str) -> ChatDelta | object:
    """One event's payload → a :class:`ChatDelta` (or :data:`DONE`); typed errors otherwise."""
    if data == b"[DONE]" or data == "[DONE]":
        return DONE
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise EngineHTTPError(f"malformed stream chunk from the engine: {data[:120]!r}") from exc
    return reduce_object(obj, data)


def reduce_object(obj: Any, data: bytes | str = b"") -> ChatDelta:
    """One parsed chunk → a :class:`ChatDelta`; ``data`` (its payload) only names a bad one."""
    if not isinstance(obj, dict):
        raise EngineHTTPError(f"unexpected stream chunk from the engine: {data[:120]!r}")
    if "error" in obj:
        err = obj["error"]
        msg = err.get("message") if isinstance(err, dict) else str(err)
        raise EngineHTTPError(f"engine error in stream: {msg}")
    usage = obj.get("usage")
    delta = ChatDelta(usage=_usage(usage) if usage else None)
    choices = obj.get("choices")
    if choices:
        choice = choices[0]
        d = choice.get("delta")
        if d:
            delta.content = d.get("content") or ""
            delta.reasoning = d.get("reasoning_content") or d.get("reasoning") or ""
            calls = d.get("tool_calls")
            if calls:
                delta.tool_calls = calls
        delta.finish_reason = choice.get("finish_reason")
        index = choice.get("index")
        if index:
            delta.index = index
    if not (delta.content or delta.reasoning or delta.tool_calls):
        delta.events = 0  # role, finish or usage only: not a token
    return delta


def parse_payloads(payloads: list[bytes]) -> list[Any] | None:
    """Every payload parsed by ONE ``orjson`` call (a JSON array of them), or None when that
    cannot be: a ``[DONE]`` among them or one that is not JSON — the caller then reduces them
    one by one, so an error still surfaces after the events before it."""
    if len(payloads) == 1 or b"[DONE]" in payloads:
        return None
    try:
        objs = orjson.loads(b"[" + b",".join(payloads) + b"]")
    except orjson.JSONDecodeError:
        return None
    # bad pieces can join into good JSON ('{"a":1' + '"b":2}'): then the count differs
    return objs if len(objs) == len(payloads) else None


def plain_text(obj: Any) -> str | None:
    """The text of a chunk that carries nothing but one piece of content of choice 0 (vLLM's
    every token event), else None — such a chunk folds without a :class:`ChatDelta`."""
    if type(obj) is not dict or "usage" in obj or "error" in obj:
        return None
    choices = obj.get("choices")
    if not choices or len(choices) != 1:
        return None
    choice = choices[0]
    if type(choice) is not dict or choice.get("finish_reason") is not None or choice.get("index"):
        return None
    d = choice.get("delta")
    if type(d) is not dict or len(d) != 1:
        return None
    text = d.get("content")
    return text if type(text) is str and text else None


def _kind(delta: ChatDelta) -> int:
    """0 text/reasoning, 1 tool-call fragments, 2 neither (usage, finish)."""
    if delta.tool_calls:
        return 1
    if delta.content or delta.reasoning:
        return 0
    return 2


class Coalescer:
    """Folds deltas into as few as keep their order (see the module docstring)."""

    __slots__ = ("_out", "events")

    def __init__(self) -> None:
        self._out: list[ChatDelta] = []
        self.events = 0
        """Events added since the last :meth:`take`."""

    def add(self, delta: ChatDelta) -> None:
        self.events += delta.events
        out = self._out
        if out:
            last = out[-1]
            kind = _kind(delta)
            if delta.index == last.index and (kind == 2 or kind == _kind(last) or _kind(last) == 2):
                if delta.content:
                    last.content += delta.content
                if delta.reasoning:
                    last.reasoning += delta.reasoning
                if delta.tool_calls:
                    last.tool_calls.extend(delta.tool_calls)
                if delta.finish_reason:
                    last.finish_reason = delta.finish_reason
                if delta.usage is not None:
                    last.usage = delta.usage
                last.events += delta.events
                return
        out.append(ChatDelta(delta.content, delta.reasoning, list(delta.tool_calls), delta.finish_reason,
                             delta.usage, delta.events, delta.index))

    def add_text(self, text: str, events: int = 1) -> None:
        """:meth:`add` of a delta with only ``text`` as content (choice 0), without making one
        (``events``: how many chunks the text came in)."""
        self.events += events
        out = self._out
        if out:
            last = out[-1]
            if last.index == 0 and not last.tool_calls:
                last.content += text
                last.events += events
                return
        out.append(ChatDelta(text, events=events))

    def take(self) -> list[ChatDelta]:
        out, self._out = self._out, []
        self.events = 0
        return out

    def __bool__(self) -> bool:
        return bool(self._out)


