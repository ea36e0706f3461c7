"""The outside half of the port bridge: the host's ``127.0.0.1:PORT`` reaches a dev server
that runs in a sandbox without network.

A sandboxed command has a network namespace of its own (``sandbox.network = "none"``): only
its own loopback, nothing of the host — the engine's port, the internet, other sessions.
A dev server there listens on its session's ports on *that* loopback. The bridge listens on
the same ports on the host's loopback and, for each connection, asks the inside half
(``port_bridge_inner.py``, started in the sandbox around the server) over a Unix socket pair
for a connection to the server; the inside half connects on its loopback and passes the
connected socket back (``SCM_RIGHTS``), and the bridge copies bytes both ways. So the
server can be reached from the host on exactly its session's ports, and still reaches
nothing itself: the sandbox's network policy is kept, not widened.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import struct
from collections.abc import Iterable
from pathlib import Path

log = logging.getLogger(__name__)

OK = b"\x00"
ASK_TIMEOUT_S = 10.0
INNER_SOURCE = (Path(__file__).with_name("port_bridge_inner.py")).read_text(encoding="utf-8")
"""What the sandbox's Python runs (``python -I -S -c INNER_SOURCE …``)."""


class BridgeClosed(Exception):
    """The inside half is gone (the server ended)."""


class PortBridge:
    """Host listeners for a sandboxed server's ports. ``await start()``, ``await aclose()``."""

    def __init__(self, control: socket.socket, ports: Iterable[int], *, host: str = "127.0.0.1") -> None:
        """``control``: the app's end of the socket pair whose other end the inside half holds."""
        control.setblocking(False)
        self._control = control
        self._ports = tuple(ports)
        self._host = host
        self._servers: list[asyncio.AbstractServer] = []
        self._lock = asyncio.Lock()
        self._pipes: set[asyncio.Task[None]] = set()
        self._closed = False
        self.connections = 0
        """Connections passed through so far."""

    async def start(self) -> None:
        """Listen on every port (an ``OSError`` when one is taken: nothing stays open then)."""
        try:
            for port in self._ports:
                self._servers.append(await asyncio.start_server(self._serve, self._host, port))
        except OSError:
            await self.aclose()
            raise

    async def _ask(self, port: int) -> socket.socket | None:
        loop = asyncio.get_running_loop()
        async with self._lock:
            if self._closed:
                raise BridgeClosed()
            await loop.sock_sendall(self._control, struct.pack("!H", port))
            answer: asyncio.Future[tuple[bytes, list[int]]] = loop.create_future()
            fd = self._control.fileno()

            def readable() -> None:
                try:
                    msg, fds, _flags, _addr = socket.recv_fds(self._control, 1, 1)
                except (BlockingIOError, InterruptedError):
                    return
                except OSError as exc:
                    if not answer.done():
                        answer.set_exception(exc)
                    return
                if not answer.done():
                    answer.set_result((msg, fds))

            loop.add_reader(fd, readable)
            try:
                msg, fds = await asyncio.wait_for(answer, ASK_TIMEOUT_S)
            except TimeoutError:
                self._closed = True  # a late answer would be taken for the next one's
                raise BridgeClosed() from None
            finally:
                loop.remove_reader(fd)
        if not msg:
            self._closed = True
            raise BridgeClosed()
        if msg == OK and fds:
            for extra in fds[1:]:
                os.close(extra)
            return socket.socket(fileno=fds[0])
        for extra in fds:
            os.close(extra)
        return None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._pipes.add(task)
        try:
            port = writer.get_extra_info("sockname")[1]
            try:
                inner = await self._ask(port)
            except (BridgeClosed, OSError):
                inner = None
            if inner is None:  # nothing listens inside (yet): the client sees a closed connection
                return
            self.connections += 1
            in_reader, in_writer = await asyncio.open_connection(sock=inner)
            try:
                await asyncio.gather(_copy(reader, in_writer), _copy(in_reader, writer))
            finally:
                in_writer.close()
                with contextlib.suppress(Exception):
                    await in_writer.wait_closed()
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
            if task is not None:
                self._pipes.discard(task)

    async def aclose(self) -> None:
        self._closed = True
        for server in self._servers:
            server.close()
        for server in self._servers:
            with contextlib.suppress(Exception):
                await server.wait_closed()
        self._servers.clear()
        pipes = list(self._pipes)
        for task in pipes:
            task.cancel()
        for task in pipes:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        with contextlib.suppress(OSError):
            self._control.close()


async def _copy(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
    """Bytes from ``src`` to ``dst`` until ``src`` ends; then half-close ``dst``."""
    try:
        while chunk := await src.read(65536):
            dst.write(chunk)
            await dst.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        with contextlib.suppress(OSError, RuntimeError):
            if dst.can_write_eof():
                dst.write_eof()
