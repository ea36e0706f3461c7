"""A scripted OpenAI-compatible server on 127.0.0.1 that replays given responses.

It streams chat completions as Server-Sent Events in vLLM's exact chunk format (first
chunk with ``role``, content pieces, tool-call deltas with ``id``/``type``/``name`` first
and the ``arguments`` JSON in pieces after, a ``finish_reason`` chunk, a ``usage`` chunk
when ``stream_options.include_usage`` is set, then ``[DONE]``), and can misbehave on
purpose: HTTP errors (500, 429 …), a wrong content type, a truncated JSON chunk, a stall,
a dropped or a reset connection.

Usage (async, on the test's event loop)::

    from tests.helpers.scripted_server import Fault, Reply, ScriptedServer, ToolCall

    async with ScriptedServer([
        Reply(tool_calls=[ToolCall("read_file", {"path": "app.py"})]),
        Fault.http(500),                        # one failing answer, then…
        Reply(text="All done."),
    ]) as server:
        client = ChatClient(http, server.endpoint)   # Endpoint(base_url, api_key, model)
        ...
        server.requests          # request bodies received (dicts), in order
        server.connections       # TCP connections accepted
        server.push(Reply(...))  # append to the script at any time

Or from synchronous code (Qt tests): ``with ScriptedServer(...).in_thread() as server:``.

Script entries are :class:`Reply`, :class:`Fault`, or a callable ``(body, n) -> Reply |
Fault`` (``n`` counts chat requests from 0) for dynamic answers; a ``responder`` callable
answers whatever the script does not. With nothing left to say the server answers HTTP
500 "script exhausted", so a test fails loudly instead of hanging.

``native_tools=False`` imitates a server without tool support: a request carrying
``tools`` gets vLLM's HTTP 400 (it consumes no script entry). ``GET /v1/models`` (with
``max_model_len``), ``GET /health`` and ``GET /metrics`` (Prometheus counters of what it
served) answer too. The server binds 127.0.0.1 on a free port and stops on exit.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Union

import orjson

from workstation.core.endpoints import Endpoint

VLLM_NO_TOOLS_MESSAGE = (
    '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set'
)


@dataclass(frozen=True)
class ToolCall:
    """A tool call to stream: ``arguments`` as a dict (serialized) or raw JSON text."""

    name: str
    arguments: dict[str, Any] | str = field(default_factory=dict)
    id: str | None = None

    def arguments_text(self) -> str:
        if isinstance(self.arguments, str):
            return self.arguments
        return orjson.dumps(self.arguments).decode()


@dataclass(frozen=True)
class Reply:
    """One streamed completion."""

    text: str = ""
    tool_calls: tuple[ToolCall, ...] | list[ToolCall] = ()
    reasoning: str = ""
    finish_reason: str | None = None
    """Default: ``tool_calls`` when there are tool calls, else ``stop``."""
    prompt_tokens: int | None = None
    """Default: an estimate from the request (characters / 4)."""
    completion_tokens: int | None = None
    chunk_chars: int = 4
    """Characters per streamed content / arguments piece (vLLM sends ~one token each)."""
    delay_s: float = 0.0
    """Pause between chunks."""


@dataclass(frozen=True)
class Fault:
    """A misbehaving answer."""

    kind: str
    status: int = 500
    message: str = "scripted failure"
    after_chunks: int = 1
    seconds: float = 0.0

    @classmethod
    def http(cls, status: int = 500, message: str = "scripted failure") -> Fault:
        """An HTTP error with vLLM's JSON error body."""
        return cls("http", status=status, message=message)

    @classmethod
    def wrong_content_type(cls) -> Fault:
        """HTTP 200 with ``application/json`` instead of an event stream."""
        return cls("content_type")

    @classmethod
    def truncated_json(cls, after_chunks: int = 1) -> Fault:
        """A few good chunks, then a ``data:`` line cut mid-JSON, then the end of the stream."""
        return cls("truncated", after_chunks=after_chunks)

    @classmethod
    def stall(cls, seconds: float = 30.0, after_chunks: int = 1) -> Fault:
        """A few chunks, then silence for ``seconds`` (the client's read timeout should fire)."""
        return cls("stall", after_chunks=after_chunks, seconds=seconds)

    @classmethod
    def disconnect(cls, after_chunks: int = 1) -> Fault:
        """A few chunks, then the connection is dropped mid-stream."""
        return cls("disconnect", after_chunks=after_chunks)

    @classmethod
    def reset(cls, after_chunks: int = 1) -> Fault:
        """A few chunks, then the connection is reset (TCP RST, as when a killed engine's
        kernel drops a socket with data unread), not closed."""
        return cls("reset", after_chunks=after_chunks)


Entry = Union[Reply, Fault, Callable[[dict[str, Any], int], Union[Reply, Fault]]]


def _split(text: str, size: int) -> list[str]:
    size = max(1, size)
    return [text[i:i + size] for i in range(0, len(text), size)] or []


class ScriptedServer:
    """See the module docstring."""

    def __init__(
        self,
        script: Iterable[Entry] = (),
        *,
        model: str = "scripted",
        api_key: str = "test-key",
        native_tools: bool = True,
        max_model_len: int = 8192,
        responder: Callable[[dict[str, Any], int], Reply | Fault] | None = None,
        model_root: str | None = None,
        adapters: dict[str, str] | None = None,
        metrics: bool = True,
    ) -> None:
        """``model_root``: the folder ``/v1/models`` reports as the model's ``root`` (vLLM
        reports the served folder); ``adapters``: LoRA adapters it lists, name → folder;
        ``metrics=False``: no ``/metrics`` (HTTP 404), as an outside API answers."""
        self.script: list[Entry] = list(script)
        self.metrics = metrics
        self.model = model
        self.model_root = model_root
        self.adapters = dict(adapters or {})
        self.api_key = api_key
        self.native_tools = native_tools
        self.max_model_len = max_model_len
        self.responder = responder
        self.requests: list[dict[str, Any]] = []
        self.rejected: list[dict[str, Any]] = []
        self.connections = 0
        """TCP connections accepted (a client that reuses its connection makes one)."""
        self.port = 0
        self._server: asyncio.AbstractServer | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._handlers: set[asyncio.Task[None]] = set()
        self._ids = itertools.count(1)
        self._counters = {"requests": 0, "prompt_tokens": 0, "generation_tokens": 0}

    # ----- life cycle
    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def endpoint(self) -> Endpoint:
        return Endpoint(base_url=self.base_url, api_key=self.api_key, model=self.model,
                        name="scripted", native_tools=None if self.native_tools else False)

    def push(self, *entries: Entry) -> None:
        self.script.extend(entries)

    async def start(self) -> ScriptedServer:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def aclose(self) -> None:
        if self._server is not None:
            self._server.close()
        for writer in list(self._writers):
            writer.close()
        for task in list(self._handlers):
            task.cancel()
        for task in list(self._handlers):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2)
            self._server = None

    async def __aenter__(self) -> ScriptedServer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    @contextlib.contextmanager
    def in_thread(self) -> Iterator[ScriptedServer]:
        """Serve from a background thread with its own loop (for synchronous tests)."""
        loop = asyncio.new_event_loop()
        ready = threading.Event()
        stop: list[asyncio.Event] = []

        async def main() -> None:
            stop.append(asyncio.Event())
            await self.start()
            ready.set()
            await stop[0].wait()
            await self.aclose()

        thread = threading.Thread(target=loop.run_until_complete, args=(main(),),
                                  name="scripted-server", daemon=True)
        thread.start()
        ready.wait(10)
        try:
            yield self
        finally:
            loop.call_soon_threadsafe(stop[0].set)
            thread.join(10)
            loop.close()

    # ----- HTTP
    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        self._writers.add(writer)
        self.connections += 1
        try:
            while True:
                line = await reader.readline()
                if not line:
                    return
                try:
                    method, path, _ = line.decode("latin-1").split(" ", 2)
                except ValueError:
                    return
                headers: dict[str, str] = {}
                while True:
                    h = await reader.readline()
                    if h in (b"\r\n", b"\n", b""):
                        break
                    k, _, v = h.decode("latin-1").partition(":")
                    headers[k.strip().lower()] = v.strip()
                body = await reader.readexactly(int(headers.get("content-length", "0") or 0))
                keep = await self._route(method, path.split("?")[0], headers, body, writer)
                if not keep or headers.get("connection", "").lower() == "close":
                    return
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        except asyncio.CancelledError:
            return  # closing: end quietly (asyncio's server callback reports a cancelled handler)
        finally:
            self._writers.discard(writer)
            self._handlers.discard(task)
            with contextlib.suppress(Exception):
                writer.close()

    async def _send(self, writer: asyncio.StreamWriter, status: int, body: bytes,
                    content_type: str = "application/json") -> bool:
        reason = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found",
                  429: "Too Many Requests", 500: "Internal Server Error",
                  503: "Service Unavailable"}.get(status, "Error")
        head = (f"HTTP/1.1 {status} {reason}\r\ncontent-type: {content_type}\r\n"
                f"content-length: {len(body)}\r\n\r\n").encode()
        writer.write(head + body)
        await writer.drain()
        return True

    def _error_body(self, status: int, message: str) -> bytes:
        kind = {400: "BadRequestError", 401: "AuthenticationError", 404: "NotFoundError",
                429: "RateLimitError"}.get(status, "InternalServerError")
        return orjson.dumps({"error": {"message": message, "type": kind, "param": None, "code": status}})

    async def _route(self, method: str, path: str, headers: dict[str, str], body: bytes,
                     writer: asyncio.StreamWriter) -> bool:
        if path == "/health":
            return await self._send(writer, 200, b"")
        if path == "/metrics" and not self.metrics:
            return await self._send(writer, 404, self._error_body(404, "Not Found"))
        if path == "/metrics":
            c = self._counters
            text = (
                f'vllm:request_success_total{{model_name="{self.model}"}} {c["requests"]}.0\n'
                f'vllm:prompt_tokens_total{{model_name="{self.model}"}} {c["prompt_tokens"]}.0\n'
                f'vllm:generation_tokens_total{{model_name="{self.model}"}} {c["generation_tokens"]}.0\n'
            )
            return await self._send(writer, 200, text.encode(), "text/plain; version=0.0.4")
        if self.api_key and headers.get("authorization") != f"Bearer {self.api_key}":
            return await self._send(writer, 401, self._error_body(401, "Unauthorized"))
        if path == "/v1/models" and method == "GET":
            card = {"id": self.model, "object": "model", "created": int(time.time()),
                    "owned_by": "vllm", "root": self.model_root or self.model, "parent": None,
                    "max_model_len": self.max_model_len}
            cards = [card, *({"id": name, "object": "model", "owned_by": "vllm", "root": root,
                              "parent": self.model, "max_model_len": None} for name, root in self.adapters.items())]
            return await self._send(writer, 200, orjson.dumps({"object": "list", "data": cards}))
        if path != "/v1/chat/completions" or method != "POST":
            return await self._send(writer, 404, self._error_body(404, f"no route {method} {path}"))
        try:
            request = orjson.loads(body)
        except orjson.JSONDecodeError:
            return await self._send(writer, 400, self._error_body(400, "invalid JSON body"))
        if request.get("tools") and not self.native_tools:
            self.rejected.append(request)
            return await self._send(writer, 400, self._error_body(400, VLLM_NO_TOOLS_MESSAGE))
        n = len(self.requests)
        self.requests.append(request)
        entry: Entry | None = self.script.pop(0) if self.script else self.responder
        if entry is None:
            return await self._send(writer, 500, self._error_body(500, "script exhausted"))
        if callable(entry) and not isinstance(entry, (Reply, Fault)):
            entry = entry(request, n)
        if isinstance(entry, Fault) and entry.kind == "http":
            return await self._send(writer, entry.status, self._error_body(entry.status, entry.message))
        if isinstance(entry, Fault) and entry.kind == "content_type":
            return await self._send(writer, 200, orjson.dumps({"id": "x", "object": "chat.completion"}))
        return await self._stream(writer, request, entry)

    # ----- streaming in vLLM's format
    def _chunks(self, request: dict[str, Any], reply: Reply, cid: str) -> list[dict[str, Any]]:
        created = int(time.time())
        base = {"id": cid, "object": "chat.completion.chunk", "created": created, "model": self.model}

        def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> dict[str, Any]:
            choice: dict[str, Any] = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
            choice.update(extra)
            return {**base, "choices": [choice]}

        out = [{**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                     "logprobs": None, "finish_reason": None}],
                "prompt_token_ids": None, "prompt_text": None}]
        for piece in _split(reply.reasoning, reply.chunk_chars):
            out.append(chunk({"reasoning": piece}, token_ids=None))
        for piece in _split(reply.text, reply.chunk_chars):
            out.append(chunk({"content": piece}, token_ids=None))
        for index, call in enumerate(reply.tool_calls):
            call_id = call.id or f"chatcmpl-tool-{next(self._ids):016x}"
            out.append(chunk({"content": None, "tool_calls": [
                {"id": call_id, "type": "function", "index": index, "function": {"name": call.name}}]},
                token_ids=None))
            for piece in _split(call.arguments_text(), reply.chunk_chars):
                out.append(chunk({"content": None, "tool_calls": [
                    {"index": index, "function": {"arguments": piece}}]}, token_ids=None))
        finish = reply.finish_reason or ("tool_calls" if reply.tool_calls else "stop")
        out.append(chunk({}, finish, stop_reason=None, token_ids=None))
        prompt = reply.prompt_tokens
        if prompt is None:
            prompt = max(1, len(orjson.dumps(request.get("messages", []))) // 4)
        completion = reply.completion_tokens
        if completion is None:
            completion = max(1, (len(reply.text) + sum(len(c.arguments_text()) for c in reply.tool_calls)) // 4)
        self._counters["prompt_tokens"] += prompt
        self._counters["generation_tokens"] += completion
        if (request.get("stream_options") or {}).get("include_usage"):
            out.append({**base, "choices": [], "usage": {
                "prompt_tokens": prompt, "total_tokens": prompt + completion, "completion_tokens": completion},
                "system_fingerprint": "vllm-scripted"})
        return out

    async def _stream(self, writer: asyncio.StreamWriter, request: dict[str, Any], entry: Reply | Fault) -> bool:
        cid = f"chatcmpl-{next(self._ids):016x}"
        reply = entry if isinstance(entry, Reply) else Reply(text="partial answer ", chunk_chars=4)
        chunks = self._chunks(request, reply, cid)
        fault = entry if isinstance(entry, Fault) else None
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\n"
                     b"transfer-encoding: chunked\r\n\r\n")

        async def event(payload: bytes) -> None:
            data = b"data: " + payload + b"\n\n"
            writer.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            await writer.drain()

        for i, payload in enumerate(chunks):
            if fault is not None and i == fault.after_chunks:
                if fault.kind == "truncated":
                    await event(orjson.dumps(payload)[:25])
                    break
                if fault.kind == "stall":
                    await asyncio.sleep(fault.seconds)
                    return False
                if fault.kind in ("disconnect", "reset"):
                    if fault.kind == "reset":  # linger 0: closing sends RST instead of FIN
                        writer.get_extra_info("socket").setsockopt(
                            socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    writer.transport.abort()
                    return False
            await event(orjson.dumps(payload))
            if reply.delay_s:
                await asyncio.sleep(reply.delay_s)
        await event(b"[DONE]")
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        self._counters["requests"] += 1
        return True
