"""One keep-alive HTTP/1.1 connection of the stream worker (see :mod:`~workstation.engine.stream_worker`).

``httptools`` (llhttp) parses the response; what one read brought goes to the stream in
one piece, and once the stream's first token is in, the worker paces the socket (one read
per hand-off tick).
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

import httptools

from workstation.engine.sse import EngineHTTPError

READ_BUFFER_BYTES = 256 * 1024
"""Size of the worker's one read buffer (what a read takes at most)."""


class _Worker(Protocol):
    """What a connection needs of the stream worker."""

    read_buffer: memoryview

    def pace(self, conn: _Connection) -> None: ...
    def park(self, conn: _Connection) -> None: ...
    def forget(self, conn: _Connection) -> None: ...


class _Stream(Protocol):
    """What a connection needs of the stream on it (the worker's ``_Stream``)."""

    conn: _Connection | None
    request: bytes
    result: Any

    def on_headers(self, status: int, content_type: bytes) -> None: ...
    def on_body(self, body: bytes) -> None: ...
    def on_complete(self) -> None: ...
    def on_lost(self, exc: BaseException | None) -> None: ...
    def fail(self, error: BaseException) -> None: ...


class _Connection(asyncio.BufferedProtocol):
    """One keep-alive HTTP/1.1 connection; at most one stream on it at a time.

    Read into the worker's one buffer (``recv_into``): a plain ``Protocol`` gets a new
    256 KiB ``bytes`` per read, which the allocator maps and unmaps each time — measured,
    26 us of a paced read's ~45. The buffer can be shared: every read is parsed (bodies
    copied out by the parser) before the next one starts, on the worker's one thread."""

    def __init__(self, worker: _Worker, key: tuple[str, int]) -> None:
        self.worker, self.key = worker, key
        self.transport: asyncio.Transport | None = None
        self.stream: _Stream | None = None
        self.parser: httptools.HttpResponseParser | None = None
        self.content_type = b""
        self.reused = False
        self.closed = False
        self.paced = False
        """Reading stopped until the worker's next tick (see the worker's ``pace``)."""
        self._body: list[bytes] = []

    def start(self, stream: _Stream) -> None:
        self.stream = stream
        stream.conn = self
        self.content_type = b""
        self.parser = httptools.HttpResponseParser(self)
        assert self.transport is not None
        self.transport.write(stream.request)

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.worker.read_buffer

    def buffer_updated(self, nbytes: int) -> None:
        self.data_received(self.worker.read_buffer[:nbytes])

    def data_received(self, data: bytes | memoryview) -> None:
        if self.parser is None:
            return
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            pass
        except httptools.HttpParserError as exc:
            self._deliver_body()
            if self.stream is not None:
                self.stream.fail(EngineHTTPError(f"malformed HTTP response from the engine: {exc}"))
            self.close()
            return
        self._deliver_body()
        stream = self.stream
        if stream is not None and stream.result.first_s is not None and not self.closed:
            self.worker.pace(self)

    def _deliver_body(self) -> None:
        """Hand the stream every HTTP chunk this read brought, joined: one decode per read."""
        body = self._body
        if body:
            self._body = []
            if self.stream is not None:
                self.stream.on_body(body[0] if len(body) == 1 else b"".join(body))

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.worker.forget(self)
        stream, self.stream = self.stream, None
        if stream is not None:
            stream.on_lost(exc)

    def pause(self) -> None:
        if self.transport is not None and not self.closed:
            self.transport.pause_reading()

    def resume(self) -> None:
        self.paced = False
        if self.transport is not None and not self.closed:
            self.transport.resume_reading()

    def close(self) -> None:
        self.closed = True
        stream, self.stream = self.stream, None
        if stream is not None:
            stream.conn = None
        if self.transport is not None:
            self.transport.abort()

    # httptools callbacks
    def on_header(self, name: bytes, value: bytes) -> None:
        if name.lower() == b"content-type":
            self.content_type = value

    def on_headers_complete(self) -> None:
        if self.stream is not None and self.parser is not None:
            self.stream.on_headers(self.parser.get_status_code(), self.content_type)

    def on_body(self, body: bytes) -> None:
        self._body.append(body)

    def on_message_complete(self) -> None:
        self._deliver_body()
        stream, self.stream = self.stream, None
        keep = self.parser is not None and self.parser.should_keep_alive()
        if stream is not None:
            stream.conn = None
            stream.on_complete()
        if keep and not self.closed:
            self.worker.park(self)
        else:
            self.close()
