"""Watching endpoints that stopped answering, so the sessions waiting on them continue.

When a session's run ends because its engine is gone, the fleet asks :meth:`watch`; one
named task per endpoint polls ``GET /v1/models`` until it answers, then calls ``on_back``
once and ends. Quiet when nothing is down.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

import httpx

from workstation.core.endpoints import Endpoint

log = logging.getLogger(__name__)


async def endpoint_alive(http: httpx.AsyncClient, endpoint: Endpoint, *, timeout_s: float = 3.0) -> bool:
    """True when the endpoint answers its model list (the cheapest real request)."""
    headers = endpoint.auth_headers()
    try:
        response = await http.get(endpoint.v1 + "/models", headers=headers, timeout=timeout_s)
    except httpx.HTTPError:
        return False
    return response.status_code == 200


class EndpointWatcher:
    def __init__(
        self,
        http: httpx.AsyncClient,
        *,
        resolve: Callable[[str], Endpoint],
        on_down: Callable[[Endpoint], None],
        on_back: Callable[[Endpoint], None],
        interval_s: float = 2.0,
    ) -> None:
        """``resolve(name)`` gives the endpoint as it is now (a restarted engine may have
        a new port and key), looked up at every poll."""
        self._http = http
        self._resolve = resolve
        self._on_down = on_down
        self._on_back = on_back
        self._interval_s = interval_s
        self._tasks: dict[str, asyncio.Task[None]] = {}

    def watching(self, name: str) -> bool:
        task = self._tasks.get(name)
        return task is not None and not task.done()

    def watch(self, name: str, *, announce: bool = True) -> None:
        if self.watching(name):
            return
        if announce:
            self._on_down(self._resolve(name))
        self._tasks[name] = asyncio.create_task(self._poll(name), name=f"fleet-watch-{name}")

    def recheck(self, name: str) -> None:
        """Probe now (the endpoint changed): restart a running watch without announcing."""
        task = self._tasks.pop(name, None)
        if task is None or task.done():
            return
        task.cancel()
        self.watch(name, announce=False)

    async def _poll(self, name: str) -> None:
        log.warning("engine %s is not answering; sessions on it wait", name)
        while not await endpoint_alive(self._http, self._resolve(name)):
            await asyncio.sleep(self._interval_s)
        log.warning("engine %s answers again; waiting sessions continue", name)
        self._tasks.pop(name, None)
        self._on_back(self._resolve(name))

    async def aclose(self) -> None:
        tasks = list(self._tasks.values())
        self._tasks.clear()
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
