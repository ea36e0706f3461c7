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
    headers = {"Authorization": f"Bearer {endpoint.api_key}"} if endpoint.api_key else {}
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
        on_down: Callable[[Endpoint], None],
        on_back: Callable[[Endpoint], None],
        interval_s: float = 2.0,
    ) -> None:
        self._http = http
        self._on_down = on_down
        self._on_back = on_back
        self._interval_s = interval_s
        self._tasks: dict[str, asyncio.Task[None]] = {}

    def watching(self, name: str) -> bool:
        task = self._tasks.get(name)
        return task is not None and not task.done()

    def watch(self, endpoint: Endpoint) -> None:
        if self.watching(endpoint.name):
            return
        self._on_down(endpoint)
        self._tasks[endpoint.name] = asyncio.create_task(
            self._poll(endpoint), name=f"fleet-watch-{endpoint.name}"
        )

    async def _poll(self, endpoint: Endpoint) -> None:
        log.warning("engine %s (%s) is not answering; sessions on it wait", endpoint.name, endpoint.base_url)
        while not await endpoint_alive(self._http, endpoint):
            await asyncio.sleep(self._interval_s)
        log.warning("engine %s answers again; waiting sessions continue", endpoint.name)
        self._tasks.pop(endpoint.name, None)
        self._on_back(endpoint)

    async def aclose(self) -> None:
        tasks = list(self._tasks.values())
        self._tasks.clear()
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
