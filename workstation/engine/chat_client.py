"""Streaming chat completions against an OpenAI-compatible endpoint — the hot path.

One SSE event per token from vLLM. The bytes go through one decoder
(:mod:`workstation.engine.sse`: raw bytes split into events, ``orjson`` on each payload, only
the fields the app uses) from one of two byte sources:

- the shared ``httpx`` client (tests' mock transports, a single stream, tools that stream
  little), one delta per event;
- a :class:`~workstation.engine.stream_worker.StreamWorker` (the window, fleets): the sockets
  are read on the worker's thread and what arrived is handed over in coalesced batches, so
  the caller's loop wakes once per batch instead of once per token.

Either source hands :meth:`ChatClient.stream_chat` lists of deltas (one per ``httpx`` read, one
per worker hand-off), and one loop there counts the request open, tells the token observers
and reports the request, whichever the source: one step between generators per read, not
per token. Raw tool-call deltas go upward; the agent accumulates them.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import httpx
import orjson

from workstation.core.endpoints import Endpoint
from workstation.core.requests import (
    OpenRequests, PromptLedger, RequestRecord, TokenObserver, common_prefix_bytes, constraint_of,
)
from workstation.engine.sse import (
    DONE,
    ChatDelta,
    EngineHTTPError,
    EngineUnreachable,
    SseDecoder,
    Usage,
    not_streaming_error,
    reduce_payload,
    status_error,
)
from workstation.engine.stream_worker import StreamHandle, StreamResult, StreamWorker

__all__ = ["ChatClient", "ChatDelta", "EngineHTTPError", "EngineUnreachable", "Usage", "parse_chunk"]

DRAIN_TIMEOUT_S = 1.0
"""How long to read on after ``[DONE]`` for the end of the response (keeps the connection)."""

RequestObserver = Callable[[RequestRecord], None]


@dataclass(frozen=True, slots=True)
class _RequestShape:
    choices: int = 1
    constraint: str | None = None
    constraint_chars: int = 0
    shared_share: float | None = None
    """0-1: the part of the prompt's bytes that repeat the previous request's (None: the first)."""
    index: int | None = None
    reuse_share: float | None = None
    """0-1: the part that repeats the ledger's best earlier request (None: no ledger)."""
    reuse_of: tuple[str, int] | None = None


def parse_chunk(data: str | bytes) -> ChatDelta:
    """Parse one SSE ``data:`` payload of a chat-completion stream."""
    delta = reduce_payload(data)
    if delta is DONE:
        return ChatDelta(events=0)
    assert isinstance(delta, ChatDelta)
    return delta


class ChatClient:
    """Chat completions against one OpenAI-compatible endpoint.

    ``endpoint`` may be reassigned at any time (a safe engine switch does): requests
    already streaming finish where they started, new ones go to the new endpoint.
    Every finished request is reported to ``observers`` as a :class:`RequestRecord`.
    """

    def __init__(
        self,
        http: httpx.AsyncClient,
        endpoint: Endpoint,
        *,
        observers: Sequence[RequestObserver] = (),
        session_id: str | None = None,
        model: str | None = None,
        streams: StreamWorker | None = None,
    ) -> None:
        """``model``: the name requests ask for instead of the endpoint's model (a LoRA
        adapter the engine serves). ``streams``: read the chat streams on this worker's thread
        (batched hand-off); None reads them through ``http`` on the caller's loop."""
        self._http = http
        self.endpoint = endpoint
        self.observers: list[RequestObserver] = list(observers)
        self.token_observers: list[TokenObserver] = []
        """Told each delta's generated tokens of every request (shown or not), while the
        client has a ``session_id``: a fleet's live token count (its clients share one list)."""
        self.session_id = session_id
        self.model = model
        self.streams = streams
        self.ledger: PromptLedger | None = None
        """A fleet's one ledger of its requests' prompts (its agent factory sets it): which
        earlier request of any session a request repeats the most of."""
        self.open_requests = OpenRequests()
        """Requests this client has open per endpoint; a fleet's clients share one (a safe
        switch drains the old engine until nothing is open to it)."""
        self._sent = 0
        self._last_prompt: bytes | None = None
        """The previous request's messages (and tools) as JSON, while observers listen: what
        the next request's prompt is compared with (:attr:`RequestRecord.shared_prefix_tokens`)."""

    @property
    def model_name(self) -> str:
        """What requests name as the model: the adapter, or the endpoint's model."""
        return self.model or self.endpoint.model

    def _headers(self, endpoint: Endpoint | None = None) -> dict[str, str]:
        return (endpoint or self.endpoint).auth_headers()

    async def stream_chat(
        self,
        messages: Sequence[dict[str, Any]],
        *,
        tools: Sequence[dict[str, Any]] | None = None,
        tool_choice: str | dict[str, Any] | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
        extra: dict[str, Any] | None = None,
    ) -> AsyncIterator[ChatDelta]:
        """Yield deltas of one streamed completion; the last one carries ``usage``.

        One path whichever source the bytes come from (the stream worker's hand-offs, or
        each ``httpx`` read's events): the request counts in ``open_requests`` from its send
        to its end however it ends, every delta's tokens go to ``token_observers``, and one
        record to ``observers``."""
        endpoint = self.endpoint
        model = self.model or endpoint.model
        body: dict[str, Any] = {
            "model": model,
            "messages": list(messages),
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if tools:
            body["tools"] = list(tools)
            body["parallel_tool_calls"] = False
            if tool_choice is not None:
                body["tool_choice"] = tool_choice
        if max_tokens is not None:
            body["max_tokens"] = max_tokens
        if temperature is not None:
            body["temperature"] = temperature
        if extra:
            body.update(extra)
        url = endpoint.v1 + "/chat/completions"
        headers = {**self._headers(endpoint), "Content-Type": "application/json"}
        choices = max(1, int(body.get("n") or 1))
        shape = self._request_shape(body, choices) if self.observers else _RequestShape(choices)
        content = orjson.dumps(body)
        open_requests = self.open_requests
        started = time.monotonic()
        result = StreamResult()
        handle: StreamHandle | None = None
        error: str | None = None
        open_requests.opened(endpoint.base_url)
        try:
            if self.streams is not None:
                handle = self.streams.open(url, content, headers)
                batches = handle.batches()
            else:
                batches = self._http_batches(endpoint.base_url, url, content, headers, started, result)
            # closed here, not when collected: a consumer that stops early ends the stream now
            async with contextlib.aclosing(batches):
                async for deltas in batches:
                    for delta in deltas:
                        if delta.events and self.token_observers:
                            self._generated(delta.events)
                        yield delta
        except BaseException as exc:  # a typed error; or cancelled, or the consumer stopped early
            error = str(exc) if isinstance(exc, (EngineHTTPError, EngineUnreachable)) else type(exc).__name__
            raise
        finally:
            open_requests.closed(endpoint.base_url)
            if self.observers:
                if handle is not None and handle.result is not None:
                    result = handle.result  # the worker's, timed on its thread
                self._report(endpoint, model, started, result, error, shape)

    async def _http_batches(self, base_url: str, url: str, content: bytes, headers: dict[str, str],
                            started: float, result: StreamResult) -> AsyncIterator[list[ChatDelta]]:
        """The deltas of each read through the shared ``httpx`` client (one per event), its
        timings into ``result`` as the worker keeps them; ``httpx``'s errors as the typed ones."""
        try:
            async with self._http.stream("POST", url, content=content, headers=headers) as response:
                if response.status_code != 200:
                    await response.aread()
                    raise _status_error(response)
                ctype = response.headers.get("content-type", "")
                if "text/event-stream" not in ctype:
                    raise not_streaming_error(response.status_code, ctype)
                decoder = SseDecoder()
                last = started
                chunks = response.aiter_raw()
                async for chunk in chunks:
                    payloads = decoder.feed(chunk)
                    if not payloads:
                        continue
                    now = time.monotonic()
                    if now - last > result.max_gap_s:
                        result.max_gap_s = now - last
                    last = now
                    deltas: list[ChatDelta] = []
                    for payload in payloads:
                        try:
                            delta = reduce_payload(payload)
                        except EngineHTTPError:
                            if deltas:
                                yield deltas  # the events before the bad one arrive, as on the worker
                            raise
                        if delta is DONE:
                            if deltas:
                                yield deltas
                            # Read the response to its end so the connection goes back to the
                            # pool; left unread, httpx closes it and the next turn connects anew.
                            with contextlib.suppress(TimeoutError, httpx.HTTPError):
                                async with asyncio.timeout(DRAIN_TIMEOUT_S):
                                    async for _ in chunks:
                                        pass
                            return
                        assert isinstance(delta, ChatDelta)
                        if result.first_s is None and (delta.content or delta.tool_calls or delta.reasoning):
                            result.first_s = now - started
                        if delta.usage is not None:
                            result.usage = delta.usage
                        deltas.append(delta)
                    yield deltas
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            raise EngineUnreachable(f"cannot reach the engine at {base_url}: {exc}") from exc
        except httpx.ReadTimeout as exc:
            raise EngineUnreachable(f"the engine at {base_url} stopped sending (read timeout)") from exc
        except (httpx.RemoteProtocolError, httpx.NetworkError) as exc:  # a reset connection: ReadError
            why = str(exc) or type(exc).__name__
            raise EngineUnreachable(f"the engine at {base_url} closed the stream: {why}") from exc
        except httpx.TimeoutException as exc:  # writing the request, waiting for a free connection
            raise EngineUnreachable(
                f"the request to the engine at {base_url} timed out ({type(exc).__name__})") from exc

    def _generated(self, tokens: int) -> None:
        if self.session_id is not None:
            for observe in self.token_observers:
                observe(self.session_id, tokens)

    def _request_shape(self, body: dict[str, Any], choices: int) -> _RequestShape:
        """What the record says of the request itself: its ``n``, its constraint, and which
        part of its prompt repeats the previous request's (by the bytes of the messages and
        tools; tokens are apportioned by that share when the usage comes)."""
        kind, chars = constraint_of(body)
        prompt = orjson.dumps([body.get("tools"), body["messages"]])
        last, self._last_prompt = self._last_prompt, prompt
        size = max(1, len(prompt))
        share = None if last is None else common_prefix_bytes(last, prompt) / size
        index, self._sent = self._sent, self._sent + 1
        if self.ledger is None:
            return _RequestShape(choices, kind, chars, share, index)
        reused, owner = self.ledger.match_and_add(prompt, (self.session_id or "", index))
        return _RequestShape(choices, kind, chars, share, index, reused / size, owner)

    def _report(
        self, endpoint: Endpoint, model: str, started: float, result: StreamResult, error: str | None,
        shape: _RequestShape,
    ) -> None:
        usage = result.usage
        prompt_tokens = usage.prompt_tokens if usage else 0
        record = RequestRecord(
            endpoint=endpoint.base_url, model=model, session_id=self.session_id,
            started_s=started, ttft_s=result.first_s, duration_s=time.monotonic() - started,
            prompt_tokens=prompt_tokens,
            completion_tokens=usage.completion_tokens if usage else 0,
            cached_tokens=usage.cached_tokens if usage else 0,
            max_gap_s=result.max_gap_s, ok=error is None, error=error, choices=shape.choices,
            constraint=shape.constraint, constraint_chars=shape.constraint_chars,
            shared_prefix_tokens=None if shape.shared_share is None else round(prompt_tokens * shape.shared_share),
            request_index=shape.index,
            reuse_tokens=None if shape.reuse_share is None else int(prompt_tokens * shape.reuse_share),
            reuse_of=shape.reuse_of,
        )
        for observer in self.observers:
            observer(record)

    async def complete(self, messages: Sequence[dict[str, Any]], **kwargs: Any) -> tuple[str, Usage | None]:
        """Convenience: stream a completion and return its text and usage."""
        parts: list[str] = []
        usage: Usage | None = None
        async for delta in self.stream_chat(messages, **kwargs):
            parts.append(delta.content)
            usage = delta.usage or usage
        return "".join(parts), usage

    async def list_models(self) -> list[str]:
        try:
            response = await self._http.get(self.endpoint.v1 + "/models", headers=self._headers())
        except httpx.HTTPError as exc:
            raise EngineUnreachable(f"cannot reach {self.endpoint.base_url}: {exc}") from exc
        if response.status_code != 200:
            raise _status_error(response)
        return [m["id"] for m in response.json().get("data", [])]


def _status_error(response: httpx.Response) -> EngineHTTPError:
    return status_error(response.status_code, response.content)
