"""Chat streams read off the caller's thread: one worker thread, many sockets, batched hand-off.

Why: on the GUI thread every SSE event of every stream cost ~20 us through ``httpx`` +
``httpx-sse`` (128 panes at 50,000 tok/s took a whole core); a DGX serves twice that. Here a
thread with its own event loop owns the streams' sockets:

- **Lean reading.** An ``asyncio.BufferedProtocol`` per connection
  (:mod:`~workstation.engine.stream_connection`) feeds ``httptools`` (llhttp, the
  parser uvicorn uses) and the body bytes go straight to :class:`~workstation.engine.sse.SseDecoder`
  and ``orjson``. Once a stream's first token is in, its socket is read once per tick
  (:meth:`StreamWorker.pace`): the events of a tick are one ``recv``, one JSON parse, and
  text-only chunks fold without a delta object each.
- **Batched hand-off.** What arrived is folded per stream (:class:`~workstation.engine.sse.Coalescer`,
  order kept) and handed to each caller's loop at most every ``batch_s`` in ONE thread-safe call
  for all the streams of that loop; the consumer wakes once per batch, not once per token.
- **Back-pressure.** A stream whose consumer has not taken ``max_pending_batches`` stops being
  read (the socket's window fills and the server slows that stream only) until it catches up.
- **Cancellation.** Closing the consumer's iterator aborts the connection: vLLM sees the
  disconnect and stops generating for it.
- **Typed errors**, the same as the ``httpx`` path: :class:`EngineUnreachable` (connect, read
  timeout, closed mid-stream), :class:`EngineHTTPError` (status, content type, malformed or
  error chunks).

Connections are kept alive and reused per host; a request on a reused connection that the
server had closed meanwhile is retried once on a new one (nothing was received yet).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from workstation.engine.sse import (
    DONE,
    ChatDelta,
    Coalescer,
    EngineHTTPError,
    EngineUnreachable,
    SseDecoder,
    TextRun,
    Usage,
    not_streaming_error,
    parse_payloads,
    plain_text,
    reduce_object,
    reduce_payload,
    status_error,
)
from workstation.engine.stream_connection import READ_BUFFER_BYTES, _Connection

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 5.0
READ_TIMEOUT_S = 120.0
MAX_PENDING_BATCHES = 64
MAX_IDLE_PER_HOST = 256


@dataclass(slots=True)
class StreamResult:
    """What a finished stream reports besides its deltas (timings in the worker's clock)."""

    first_s: float | None = None
    max_gap_s: float = 0.0
    usage: Usage | None = None
    error: BaseException | None = None


@dataclass(slots=True)
class _Batch:
    deltas: list[ChatDelta]
    done: bool
    result: StreamResult | None = None


class StreamHandle:
    """The consumer's side of one stream (lives on the caller's loop)."""

    def __init__(self, worker: StreamWorker, stream: _Stream) -> None:
        self._worker = worker
        self._stream = stream
        self._queue: collections.deque[_Batch] = collections.deque()
        self._waiter: asyncio.Future[None] | None = None
        self.result: StreamResult | None = None

    # called on the caller's loop by the worker's hand-off
    def _put(self, batch: _Batch) -> None:
        self._queue.append(batch)
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def batches(self) -> AsyncIterator[list[ChatDelta]]:
        """Every hand-off's deltas, in order; raises the stream's error after the deltas that
        came before it."""
        loop = asyncio.get_running_loop()
        try:
            while True:
                while not self._queue:
                    self._waiter = loop.create_future()
                    await self._waiter
                    self._waiter = None
                batch = self._queue.popleft()
                self._stream.taken += 1
                if self._stream.paused and self._stream.delivered - self._stream.taken < MAX_PENDING_BATCHES // 2:
                    self._worker.call(self._stream.resume)
                if batch.deltas:
                    yield batch.deltas
                if batch.done:
                    self.result = batch.result
                    if batch.result is not None and batch.result.error is not None:
                        raise batch.result.error
                    return
        finally:
            if self.result is None:  # the consumer stopped early, or was cancelled
                self._worker.call(self._stream.abort)


@dataclass(eq=False)
class _Stream:
    """The worker's side of one stream."""

    worker: StreamWorker
    caller: asyncio.AbstractEventLoop
    key: tuple[str, int]
    request: bytes
    started: float
    handle: StreamHandle | None = None
    conn: _Connection | None = None
    decoder: SseDecoder = field(default_factory=SseDecoder)
    pending: Coalescer = field(default_factory=Coalescer)
    result: StreamResult = field(default_factory=StreamResult)
    status: int | None = None
    content_type: bytes = b""
    error_body: bytearray = field(default_factory=bytearray)
    last_s: float = 0.0
    finished: bool = False
    aborted: bool = False
    paused: bool = False
    delivered: int = 0
    taken: int = 0
    received_any: bool = False
    retried: bool = False

    # ----- from the connection -----
    def on_headers(self, status: int, content_type: bytes) -> None:
        self.status, self.content_type = status, content_type
        self.received_any = True

    def on_body(self, body: bytes) -> None:
        """What one read brought (every HTTP chunk of it joined): decoded and folded."""
        now = time.monotonic()
        if self.status != 200 or b"text/event-stream" not in self.content_type:
            self.error_body += body[: 4096 - len(self.error_body)]
            return
        objs, payloads = self.decoder.feed_parsed(body)
        if (objs is None and not payloads) or self.finished:
            return
        gap = now - self.last_s
        if gap > self.result.max_gap_s:
            self.result.max_gap_s = gap
        self.last_s = now
        pending = self.pending
        if objs is None:
            objs = parse_payloads(payloads)
        if objs is not None:  # the common case: one parse for the whole read
            add_text = pending.add_text
            for obj in objs:
                if type(obj) is TextRun:
                    add_text(obj.text, obj.events)
                    continue
                text = plain_text(obj)
                if text is not None:
                    add_text(text)
                    continue
                try:
                    delta = reduce_object(obj)
                except EngineHTTPError as exc:
                    self.fail(exc)
                    return
                self._add(delta, now)
            if self.result.first_s is None and pending.events:
                self.result.first_s = now - self.started
        else:
            for payload in payloads:
                if self.finished:
                    return
                try:
                    delta = reduce_payload(payload)
                except EngineHTTPError as exc:
                    self.fail(exc)
                    return
                if delta is DONE:
                    self.finish()
                    return
                self._add(delta, now)
        self.worker.mark(self)
        if not self.paused and self.delivered - self.taken >= MAX_PENDING_BATCHES and self.conn is not None:
            self.paused = True
            self.conn.pause()

    def _add(self, delta: ChatDelta, now: float) -> None:
        if self.result.first_s is None and (delta.content or delta.tool_calls or delta.reasoning):
            self.result.first_s = now - self.started
        if delta.usage is not None:
            self.result.usage = delta.usage
        self.pending.add(delta)

    def on_complete(self) -> None:
        if self.finished:
            return
        if self.status != 200:
            self.fail(status_error(self.status or 0, bytes(self.error_body)))
        elif b"text/event-stream" not in self.content_type:
            self.fail(not_streaming_error(self.status, self.content_type.decode()))
        else:
            self.finish()  # the body ended without [DONE]: what came is what there is

    def on_lost(self, exc: BaseException | None) -> None:
        if self.finished:
            return
        if not self.received_any and self.conn is not None and self.conn.reused and not self.retried:
            self.retried = True  # the server closed an idle connection as we reused it
            self.worker.loop.create_task(self.worker._send(self), name="stream-retry")
            return
        base = self.worker.endpoint_text(self.key)
        self.fail(_unreachable(f"the engine at {base} closed the stream: {exc or 'connection closed'}"))

    # ----- endings -----
    def finish(self) -> None:
        if self.finished:
            return
        self.finished = True
        self.worker.release(self)
        self.worker.mark(self)

    def fail(self, error: BaseException) -> None:
        if self.finished:
            return
        self.result.error = error
        self.finished = True
        if self.conn is not None:
            self.conn.close()
        self.worker.release(self)
        self.worker.mark(self)

    def abort(self) -> None:
        """The consumer is gone: drop the connection (the server stops generating)."""
        self.aborted = True
        if not self.finished:
            self.finished = True
            if self.conn is not None:
                self.conn.close()
            self.worker.release(self)

    def resume(self) -> None:
        if self.paused and self.conn is not None:
            self.paused = False
            self.conn.resume()


def _unreachable(message: str) -> BaseException:
    return EngineUnreachable(message)


class StreamWorker:
    """The thread that owns every chat stream's socket (see the module docstring)."""

    def __init__(self, *, batch_s: float = 0.02, read_timeout_s: float = READ_TIMEOUT_S,
                 name: str = "ws-streams") -> None:
        self.batch_s = batch_s
        self.read_timeout_s = read_timeout_s
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._idle: dict[tuple[str, int], list[_Connection]] = {}
        self._live: set[_Stream] = set()
        self._dirty: dict[asyncio.AbstractEventLoop, set[_Stream]] = {}
        self._paced: list[_Connection] = []
        self._tick_due = False
        self._watchdog: asyncio.TimerHandle | None = None
        self._closed = False
        self._started = False
        self._lock = threading.Lock()
        self.read_buffer = memoryview(bytearray(READ_BUFFER_BYTES))
        """Where every connection's reads land (see :class:`_Connection`)."""

    # ----- life cycle -----
    def _ensure_started(self) -> None:
        with self._lock:
            if not self._started:
                self._started = True
                self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()
        self.loop.close()

    def close(self) -> None:
        """Abort every stream, close every connection and stop the thread (idempotent)."""
        if self._closed:
            return
        self._closed = True
        if not self._started:
            self.loop.close()
            return

        def shut() -> None:
            for stream in list(self._live):
                stream.fail(_unreachable("the app is shutting down"))
            self._flush()
            for conns in self._idle.values():
                for conn in conns:
                    conn.close()
            self._idle.clear()
            self.loop.stop()

        self.loop.call_soon_threadsafe(shut)
        self._thread.join(timeout=5)

    def call(self, fn) -> None:  # type: ignore[no-untyped-def]
        """Run ``fn`` on the worker's loop (from any thread)."""
        if not self._closed:
            with contextlib.suppress(RuntimeError):  # the loop is already gone
                self.loop.call_soon_threadsafe(fn)

    # ----- the caller's side -----
    def open(self, url: str, body: bytes, headers: dict[str, str]) -> StreamHandle:
        """Start a POST to ``url`` streaming SSE; returns the handle to iterate on this loop."""
        if self._closed:
            raise RuntimeError("the stream worker is closed")
        self._ensure_started()
        parts = urlsplit(url)
        if parts.scheme != "http":
            raise EngineHTTPError(f"the stream worker speaks plain http only, not {parts.scheme}://")
        host, port = parts.hostname or "127.0.0.1", parts.port or 80
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        head = [f"POST {path} HTTP/1.1", f"Host: {host}:{port}", "Accept: text/event-stream",
                f"Content-Length: {len(body)}", "Connection: keep-alive"]
        head += [f"{k}: {v}" for k, v in headers.items()]
        request = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body
        stream = _Stream(self, asyncio.get_running_loop(), (host, port), request, time.monotonic())
        handle = StreamHandle(self, stream)
        stream.handle = handle
        self.call(lambda: self.loop.create_task(self._send(stream), name="stream-send"))
        return handle

    # ----- the worker's side -----
    def endpoint_text(self, key: tuple[str, int]) -> str:
        return f"http://{key[0]}:{key[1]}"

    async def _send(self, stream: _Stream) -> None:
        if stream.finished:
            return
        self._live.add(stream)
        stream.last_s = time.monotonic()
        self._arm_watchdog()
        conn = self._take_idle(stream.key)
        if conn is None:
            try:
                async with asyncio.timeout(CONNECT_TIMEOUT_S):
                    _t, conn = await self.loop.create_connection(
                        lambda: _Connection(self, stream.key), stream.key[0], stream.key[1])
            except (OSError, TimeoutError) as exc:
                stream.fail(_unreachable(f"cannot reach the engine at {self.endpoint_text(stream.key)}: {exc}"))
                return
        if stream.finished:  # aborted while connecting
            self.park(conn)
            return
        conn.start(stream)

    def _take_idle(self, key: tuple[str, int]) -> _Connection | None:
        conns = self._idle.get(key)
        while conns:
            conn = conns.pop()
            if not conn.closed and conn.transport is not None and not conn.transport.is_closing():
                conn.reused = True
                return conn
        return None

    def park(self, conn: _Connection) -> None:
        conns = self._idle.setdefault(conn.key, [])
        if len(conns) < MAX_IDLE_PER_HOST and not conn.closed:
            conns.append(conn)
        else:
            conn.close()

    def forget(self, conn: _Connection) -> None:
        conns = self._idle.get(conn.key)
        if conns and conn in conns:
            conns.remove(conn)

    def release(self, stream: _Stream) -> None:
        self._live.discard(stream)

    def mark(self, stream: _Stream) -> None:
        """``stream`` has something for its consumer: hand it off at the next tick."""
        if stream.aborted:
            return
        self._dirty.setdefault(stream.caller, set()).add(stream)
        self._arm_tick()

    def pace(self, conn: _Connection) -> None:
        """Stop reading ``conn`` until the next tick. A streaming engine writes one event per
        token; read as it comes, every token costs a wake-up, a ``recv``, a parse. Paced, what
        arrived in a tick is read, parsed (one ``orjson`` call) and folded at once — the
        consumer gets it at the same tick it would have anyway. A stream's first token is
        read as it comes (pacing starts after it), so time to first token stays exact; the
        longest gap between reads (``max_gap_s``) is then known to about a tick."""
        if not conn.paced and conn.transport is not None:
            conn.paced = True
            conn.transport.pause_reading()
            self._paced.append(conn)
        self._arm_tick()

    def _arm_tick(self) -> None:
        if not self._tick_due:
            self._tick_due = True
            self.loop.call_later(self.batch_s, self._tick)

    def _tick(self) -> None:
        """Every ``batch_s`` while anything streams: read the paced sockets, then hand off."""
        self._tick_due = False
        paced, self._paced = self._paced, []
        resumed = False
        for conn in paced:
            if not conn.paced:
                continue  # resumed meanwhile (back-pressure let go)
            conn.paced = False
            stream = conn.stream
            if conn.closed or conn.transport is None or (stream is not None and stream.paused):
                continue  # gone, or held by back-pressure until its consumer catches up
            conn.transport.resume_reading()
            resumed = True
        if resumed:
            # the resumed sockets are read on the loop's next pass; hand off after that pass
            self.loop.call_soon(self.loop.call_soon, self._flush)
        else:
            self._flush()

    def _flush(self) -> None:
        dirty, self._dirty = self._dirty, {}
        for caller, streams in dirty.items():
            batch = []
            for stream in streams:
                if stream.handle is None or stream.aborted:
                    continue
                deltas = stream.pending.take()
                done = stream.finished
                if not deltas and not done:
                    continue
                stream.delivered += 1
                batch.append((stream.handle, _Batch(deltas, done, stream.result if done else None)))
                if done:
                    stream.handle = None  # nothing more goes to it
            if batch:
                with contextlib.suppress(RuntimeError):  # the caller's loop is closed
                    caller.call_soon_threadsafe(_deliver, batch)

    def _arm_watchdog(self) -> None:
        if self._watchdog is None:
            self._watchdog = self.loop.call_later(1.0, self._watch)

    def _watch(self) -> None:
        """Fail streams the server stopped feeding for ``read_timeout_s`` (a hung engine)."""
        self._watchdog = None
        now = time.monotonic()
        for stream in list(self._live):
            if not stream.paused and now - stream.last_s > self.read_timeout_s:
                stream.fail(_unreachable(
                    f"the engine at {self.endpoint_text(stream.key)} stopped sending (read timeout)"))
        if self._live:
            self._arm_watchdog()

    @property
    def streams_open(self) -> int:
        return len(self._live)


def _deliver(batch: list[tuple[StreamHandle, _Batch]]) -> None:
    for handle, item in batch:
        handle._put(item)
