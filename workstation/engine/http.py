"""The one shared HTTP client, sized for the fleet."""

from __future__ import annotations

import httpx

DEFAULT_MAX_CONNECTIONS = 512


def make_http_client(
    *, max_connections: int = DEFAULT_MAX_CONNECTIONS, read_timeout_s: float = 120.0
) -> httpx.AsyncClient:
    """Build the app's shared ``httpx.AsyncClient``.

    One client for every stream, scrape and health check: connections are pooled
    and the limit is sized so 32+ sessions stream at once without waiting for a
    slot. ``read_timeout_s`` bounds the silence inside a stream (a hung engine
    surfaces as a timeout, not a hang).
    """
    limits = httpx.Limits(
        max_connections=max_connections,
        max_keepalive_connections=max_connections,
        keepalive_expiry=30.0,
    )
    timeout = httpx.Timeout(connect=5.0, read=read_timeout_s, write=30.0, pool=60.0)
    return httpx.AsyncClient(limits=limits, timeout=timeout, trust_env=False)
