"""Streaming chat completions over the shared ``httpx`` client (``httpx-sse`` + ``orjson``).

This is the hot path: one SSE event per token from vLLM. It does as little as it
can per chunk (measured: the ``openai`` SDK costs ~15x the CPU per chunk), and
hands raw tool-call deltas upward; the agent accumulates them.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson
from httpx_sse import aconnect_sse

from workstation.core.endpoints import Endpoint
from workstation.core.errors import UserError
from workstation.core.requests import RequestRecord

DRAIN_TIMEOUT_S = 1.0
"""How long to read on after ``[DONE]`` for the end of the response (keeps the connection)."""

RequestObserver = Callable[[RequestRecord], None]


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
    """One streamed chunk, reduced to what the app uses."""

    content: str = ""
    reasoning: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    finish_reason: str | None = None
    usage: Usage | None = None
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


def _usage(raw: dict[str, Any] | None) -> Usage | None:
    if not raw:
        return None
    details = raw.get("prompt_tokens_details") or {}
    return Usage(
        prompt_tokens=int(raw.get("prompt_tokens") or 0),
        completion_tokens=int(raw.get("completion_tokens") or 0),
        cached_tokens=int(details.get("cached_tokens") or 0),
    )


def parse_chunk(data: str) -> ChatDelta:
    """Parse one SSE ``data:`` payload of a chat-completion stream."""
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise EngineHTTPError(f"malformed stream chunk from the engine: {data[:120]!r}") from exc
    if not isinstance(obj, dict):
        raise EngineHTTPError(f"unexpected stream chunk from the engine: {data[:120]!r}")
    if "error" in obj:
        err = obj["error"]
        msg = err.get("message") if isinstance(err, dict) else str(err)
        raise EngineHTTPError(f"engine error in stream: {msg}")
    delta = ChatDelta(usage=_usage(obj.get("usage")))
    choices = obj.get("choices") or ()
    if choices:
        choice = choices[0]
        d = choice.get("delta") or {}
        delta.content = d.get("content") or ""
        delta.reasoning = d.get("reasoning_content") or d.get("reasoning") or ""
        delta.tool_calls = d.get("tool_calls") or []
        delta.finish_reason = choice.get("finish_reason")
        delta.index = choice.get("index") or 0
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
    ) -> None:
        """``model``: the name requests ask for instead of the endpoint's model (a LoRA
        adapter the engine serves)."""
        self._http = http
        self.endpoint = endpoint
        self.observers: list[RequestObserver] = list(observers)
        self.session_id = session_id
        self.model = model

    @property
    def model_name(self) -> str:
        """What requests name as the model: the adapter, or the endpoint's model."""
        return self.model or self.endpoint.model

    def _headers(self, endpoint: Endpoint | None = None) -> dict[str, str]:
        key = (endpoint or self.endpoint).api_key
        return {"Authorization": f"Bearer {key}"} if key else {}

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
        """Yield deltas of one streamed completion; the last one carries ``usage``."""
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
        started = time.monotonic()
        last = started
        first: float | None = None
        max_gap = 0.0
        usage: Usage | None = None
        error: str | None = None
        try:
            async with aconnect_sse(
                self._http, "POST", url, content=orjson.dumps(body),
                headers={**self._headers(endpoint), "Content-Type": "application/json"},
            ) as source:
                response = source.response
                if response.status_code != 200:
                    await response.aread()
                    raise _status_error(response)
                ctype = response.headers.get("content-type", "")
                if "text/event-stream" not in ctype:
                    raise EngineHTTPError(
                        f"engine did not stream (content-type {ctype or 'missing'})",
                        status=response.status_code,
                    )
                events = source.aiter_sse()
                async for event in events:
                    data = event.data
                    if data == "[DONE]":
                        # Read the response to its end so the connection goes back to the
                        # pool; left unread, httpx closes it and the next turn connects anew.
                        with contextlib.suppress(TimeoutError, httpx.HTTPError):
                            async with asyncio.timeout(DRAIN_TIMEOUT_S):
                                async for _ in events:
                                    pass
                        return
                    if not data:
                        continue
                    now = time.monotonic()
                    max_gap = max(max_gap, now - last)
                    last = now
                    delta = parse_chunk(data)
                    if first is None and (delta.content or delta.tool_calls or delta.reasoning):
                        first = now - started
                    if delta.usage is not None:
                        usage = delta.usage
                    yield delta
        except httpx.ConnectError as exc:
            error = f"cannot reach the engine at {endpoint.base_url}: {exc}"
            raise EngineUnreachable(error) from exc
        except httpx.ReadTimeout as exc:
            error = f"the engine at {endpoint.base_url} stopped sending (read timeout)"
            raise EngineUnreachable(error) from exc
        except httpx.RemoteProtocolError as exc:
            error = f"the engine at {endpoint.base_url} closed the stream: {exc}"
            raise EngineUnreachable(error) from exc
        except EngineHTTPError as exc:
            error = str(exc)
            raise
        except BaseException as exc:  # cancelled, or the consumer stopped early
            error = type(exc).__name__
            raise
        finally:
            if self.observers:
                self._report(endpoint, model, started, first, max_gap, usage, error)

    def _report(
        self, endpoint: Endpoint, model: str, started: float, first: float | None, max_gap: float,
        usage: Usage | None, error: str | None,
    ) -> None:
        record = RequestRecord(
            endpoint=endpoint.base_url, model=model, session_id=self.session_id,
            started_s=started, ttft_s=first, duration_s=time.monotonic() - started,
            prompt_tokens=usage.prompt_tokens if usage else 0,
            completion_tokens=usage.completion_tokens if usage else 0,
            cached_tokens=usage.cached_tokens if usage else 0,
            max_gap_s=max_gap, ok=error is None, error=error,
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
    text = response.text[:300]
    try:
        err = response.json().get("error", {})
        text = err.get("message", text) if isinstance(err, dict) else str(err)
    except ValueError:
        pass
    status = response.status_code
    retryable = status in (429, 500, 502, 503, 504)
    return EngineHTTPError(f"engine answered HTTP {status}: {text}", status=status, retryable=retryable)
