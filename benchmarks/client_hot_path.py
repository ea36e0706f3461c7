"""The chat client's CPU per streamed chunk, on loopback — the hot path, measured.

    python benchmarks/client_hot_path.py [--chunks 50000] [--requests 3] [--paths httpx,worker,lines,memory]
                                         [--framing event|whole]

A stand-in engine runs in a *separate process*: every chat request gets the same stream,
rendered once — a role chunk, ``--chunks`` one-character content chunks, a finish chunk, a
usage chunk and ``[DONE]`` in vLLM 0.32's chunk format, one SSE event per HTTP chunk as vLLM
frames them (``--framing whole``: the whole body in one HTTP chunk) — and written whole, so
the client reads as much as its socket holds (what a chunk costs is the client's own work,
not how the server happened to be scheduled on a busy machine). This process streams
``--requests`` of them (after one warm-up request) through each path:

- ``httpx``: ``ChatClient.stream_chat`` over the shared ``httpx`` client (one delta per event);
- ``worker``: ``ChatClient.stream_chat`` over a :class:`StreamWorker` (the window's and the
  fleets' path: sockets read on the worker's thread, deltas handed over coalesced);
- ``memory``: ``ChatClient.stream_chat`` over an ``httpx`` client whose transport hands over
  the same body from memory, piece by piece as a read would (an event a piece, or 64 KiB):
  the client's own code per chunk without the socket and ``httpx``'s HTTP parsing, quiet
  enough to tell a change of a few percent on a busy machine;
- ``lines``: no ``ChatClient`` — ``httpx`` ``aiter_lines`` + ``orjson`` on each ``data:`` line,
  the reference row of the client measurements in ENGINE.md (2.6 µs a chunk there, a figure
  this row gives with ``--framing whole``; with vLLM's framing ``httpx`` hands over every
  HTTP chunk on its own, ~8 µs each on the 2-core machine before any parsing).

The clients are set up as a fleet's are: a session id, one token observer and one request
observer (both count). CPU is this process's (every thread: the stream worker's too) per
chunk that reached the consumer; ``loop_cpu_us_per_chunk`` is the caller's thread alone.
The server's CPU is its own process's and not counted. Ends with one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import re
import sys
import time
from pathlib import Path

import httpx
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from workstation.core.endpoints import Endpoint  # noqa: E402
from workstation.engine.chat_client import ChatClient  # noqa: E402
from workstation.engine.http import make_http_client  # noqa: E402
from workstation.engine.stream_worker import StreamWorker  # noqa: E402

PATHS = ("httpx", "worker", "lines", "memory")
READ_BYTES = 65_536
MESSAGES = [{"role": "user", "content": "stream"}]


def _events(chunks: int) -> list[bytes]:
    """One streamed answer's SSE events, as vLLM 0.32 writes them."""
    base = {"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 0, "model": "bench"}

    def event(payload: bytes) -> bytes:
        return b"data: " + payload + b"\n\n"

    def choice(delta: dict, finish: str | None = None) -> bytes:
        return orjson.dumps({**base, "choices": [{"index": 0, "delta": delta, "logprobs": None,
                                                  "finish_reason": finish, "token_ids": None}]})

    usage = {"prompt_tokens": 10, "completion_tokens": chunks, "total_tokens": 10 + chunks}
    return [event(choice({"role": "assistant", "content": ""})),
            *[event(choice({"content": "x"}))] * chunks,
            event(choice({}, "stop")),
            event(orjson.dumps({**base, "choices": [], "usage": usage})),
            event(b"[DONE]")]


def _pieces(events: list[bytes], framing: str) -> list[bytes]:
    """The body as it arrives: an event a piece (vLLM's HTTP chunks), or as much as a read
    takes (64 KiB, httpx's read size)."""
    if framing == "event":
        return events
    body = b"".join(events)
    return [body[i:i + READ_BYTES] for i in range(0, len(body), READ_BYTES)]


def _wire(events: list[bytes], framing: str) -> bytes:
    """The whole HTTP answer: an HTTP chunk an event (vLLM's), or one for the whole body."""
    pieces = events if framing == "event" else [b"".join(events)]
    return (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\n"
            b"transfer-encoding: chunked\r\n\r\n"
            + b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n")


def _serve(conn, chunks: int, framing: str) -> None:  # runs in the server process
    answer = _wire(_events(chunks), framing)

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while head := await reader.readuntil(b"\r\n\r\n"):
                length = re.search(rb"(?im)^content-length:\s*(\d+)", head)
                await reader.readexactly(int(length.group(1)) if length else 0)
                writer.write(answer)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        except asyncio.CancelledError:
            pass  # the server is closing: end quietly (asyncio reports a cancelled handler)
        finally:
            writer.close()

    async def main() -> None:
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        conn.send(server.sockets[0].getsockname()[1])
        await asyncio.get_running_loop().run_in_executor(None, conn.recv)  # until told to stop
        server.close()

    asyncio.run(main())


async def _through_client(client: ChatClient) -> int:
    chunks = 0
    async for delta in client.stream_chat(MESSAGES):
        if delta.content:
            chunks += delta.events
    return chunks


async def _through_lines(http, endpoint: Endpoint) -> int:
    body = orjson.dumps({"model": endpoint.model, "messages": MESSAGES, "stream": True,
                         "stream_options": {"include_usage": True}})
    headers = {**endpoint.auth_headers(), "Content-Type": "application/json"}
    chunks = 0
    async with http.stream("POST", endpoint.v1 + "/chat/completions", content=body, headers=headers) as response:
        async for line in response.aiter_lines():
            if not line.startswith("data: "):
                continue
            data = line[6:]
            if data == "[DONE]":
                break
            for choice in orjson.loads(data)["choices"]:
                if choice["delta"].get("content"):
                    chunks += 1
    return chunks


class _Body(httpx.AsyncByteStream):
    def __init__(self, pieces: list[bytes]) -> None:
        self.pieces = pieces

    async def __aiter__(self):  # type: ignore[no-untyped-def]
        for piece in self.pieces:
            yield piece


def _in_memory(pieces: list[bytes]) -> httpx.AsyncClient:
    """An ``httpx`` client whose every request gets the stream from memory: no socket, no parser."""
    def answer(_request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=_Body(pieces))

    return httpx.AsyncClient(transport=httpx.MockTransport(answer))


async def _measure(path: str, endpoint: Endpoint, requests: int, pieces: list[bytes]) -> dict:
    told = [0]
    records = []
    worker = StreamWorker() if path == "worker" else None
    try:
        async with _in_memory(pieces) if path == "memory" else make_http_client() as http:
            client = ChatClient(http, endpoint, streams=worker, session_id="bench", observers=[records.append])
            client.token_observers.append(lambda _sid, n: told.__setitem__(0, told[0] + n))

            async def one() -> int:
                return await (_through_lines(http, endpoint) if path == "lines" else _through_client(client))

            await one()  # warm-up: the connection, imports, the decoder's caches
            chunks = 0
            cpu0, loop0, wall0 = time.process_time(), time.thread_time(), time.perf_counter()
            for _ in range(requests):
                chunks += await one()
            wall = time.perf_counter() - wall0
            cpu, loop_cpu = time.process_time() - cpu0, time.thread_time() - loop0
    finally:
        if worker is not None:
            worker.close()
    if path != "lines" and not (len(records) == requests + 1 and all(r.ok for r in records)):
        raise SystemExit(f"{path}: the request observer saw {records}")
    return {
        "path": path, "chunks": chunks, "wall_s": round(wall, 3),
        "cpu_us_per_chunk": round(1e6 * cpu / max(1, chunks), 3),
        "loop_cpu_us_per_chunk": round(1e6 * loop_cpu / max(1, chunks), 3),
        "chunks_per_s": round(chunks / wall),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chunks", type=int, default=50_000, help="content chunks per request")
    parser.add_argument("--requests", type=int, default=3, help="measured requests per path")
    parser.add_argument("--paths", default=",".join(PATHS), help=f"comma-separated, of {', '.join(PATHS)}")
    parser.add_argument("--framing", choices=["event", "whole"], default="event",
                        help="one HTTP chunk per SSE event (vLLM's) or the whole body in one")
    args = parser.parse_args()
    paths = [p for p in args.paths.split(",") if p]
    if unknown := set(paths) - set(PATHS):
        parser.error(f"unknown paths: {', '.join(sorted(unknown))}")
    ctx = multiprocessing.get_context("fork")
    parent, child = ctx.Pipe()
    server = ctx.Process(target=_serve, args=(child, args.chunks, args.framing), daemon=True)
    server.start()
    try:
        endpoint = Endpoint(f"http://127.0.0.1:{parent.recv()}", "test-key", "bench")
        pieces = _pieces(_events(args.chunks), args.framing)
        rows = [asyncio.run(_measure(path, endpoint, args.requests, pieces)) for path in paths]
    finally:
        parent.send("stop")
        server.join(10)
        if server.is_alive():
            server.kill()
    print(f"{args.requests} × {args.chunks} one-character chunks a path, framing {args.framing}, "
          "the stand-in engine in another process\n")
    print(f"{'path':<8}{'CPU µs/chunk':>14}{'loop µs/chunk':>15}{'chunks/s':>11}")
    for r in rows:
        print(f"{r['path']:<8}{r['cpu_us_per_chunk']:>14.3f}{r['loop_cpu_us_per_chunk']:>15.3f}{r['chunks_per_s']:>11,}")
    print(json.dumps({"chunks_per_request": args.chunks, "requests": args.requests, "framing": args.framing,
                      "paths": {r["path"]: r for r in rows}}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
