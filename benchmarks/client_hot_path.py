"""The chat client's CPU per streamed chunk, on loopback — the hot path, measured.

    python benchmarks/client_hot_path.py [--chunks 50000] [--requests 3] [--paths httpx,worker,lines]
                                         [--framing event|whole]

A stand-in engine runs in a *separate process*: every chat request gets the same stream,
rendered once — a role chunk, ``--chunks`` one-character content chunks, a finish chunk, a
usage chunk and ``[DONE]`` in vLLM 0.32's chunk format, one SSE event per HTTP chunk as vLLM
frames them (``--framing whole``: the whole body in one HTTP chunk) — written whole, so the client reads as much as its socket holds (what it costs per chunk is the client's
own work, not how the server happened to be scheduled on a busy machine). This process streams
``--requests`` of them (after one warm-up request) through each path:

- ``httpx``: ``ChatClient.stream_chat`` over the shared ``httpx`` client (one delta per event);
- ``worker``: ``ChatClient.stream_chat`` over a :class:`StreamWorker` (the window's and the
  fleets' path: sockets read on the worker's thread, deltas handed over coalesced);
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

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from workstation.core.endpoints import Endpoint  # noqa: E402
from workstation.engine.chat_client import ChatClient  # noqa: E402
from workstation.engine.http import make_http_client  # noqa: E402
from workstation.engine.stream_worker import StreamWorker  # noqa: E402

PATHS = ("httpx", "worker", "lines")
MESSAGES = [{"role": "user", "content": "stream"}]


def _stream_bytes(chunks: int, framing: str) -> bytes:
    """One whole streamed answer, HTTP head to the last chunk, as vLLM 0.32 sends it (or its
    events in one HTTP chunk, ``framing="whole"``)."""
    base = {"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 0, "model": "bench"}

    def http_chunk(data: bytes) -> bytes:
        return b"%x\r\n%s\r\n" % (len(data), data)

    def event(payload: bytes) -> bytes:
        data = b"data: " + payload + b"\n\n"
        return http_chunk(data) if framing == "event" else data

    def choice(delta: dict, finish: str | None = None) -> bytes:
        return orjson.dumps({**base, "choices": [{"index": 0, "delta": delta, "logprobs": None,
                                                  "finish_reason": finish, "token_ids": None}]})

    usage = {"prompt_tokens": 10, "completion_tokens": chunks, "total_tokens": 10 + chunks}
    body = b"".join([
        event(choice({"role": "assistant", "content": ""})),
        event(choice({"content": "x"})) * chunks,
        event(choice({}, "stop")),
        event(orjson.dumps({**base, "choices": [], "usage": usage})),
        event(b"[DONE]"),
    ])
    head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\ntransfer-encoding: chunked\r\n\r\n"
    return head + (body if framing == "event" else http_chunk(body)) + b"0\r\n\r\n"


def _serve(conn, chunks: int, framing: str) -> None:  # runs in the server process
    answer = _stream_bytes(chunks, framing)

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


async def _measure(path: str, endpoint: Endpoint, requests: int) -> dict:
    told = [0]
    records = []
    worker = StreamWorker() if path == "worker" else None
    try:
        async with make_http_client() as http:
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
        rows = [asyncio.run(_measure(path, endpoint, args.requests)) for path in paths]
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
