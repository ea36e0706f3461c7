"""An endpoint the app does not manage, described from its URL (the live engine's owner,
``engine/host.py``, holds it; the service factory makes both)."""

from __future__ import annotations

import httpx

from workstation.core.endpoints import Endpoint
from workstation.core.errors import UserError
from workstation.engine.chat_client import ChatClient
from workstation.engine.http import make_http_client


async def external_endpoint(url: str, api_key: str = "", model: str | None = None) -> Endpoint:
    """Describe an endpoint the app does not manage; asks it for its model when none is given."""
    if not url.startswith(("http://", "https://")):
        raise UserError(f"endpoint URL must start with http:// or https:// (got {url!r})")
    base = url.rstrip("/")
    if base.endswith("/v1"):
        base = base[:-3]
    endpoint = Endpoint(base_url=base, api_key=api_key, model=model or "", name="external")
    if model:
        return endpoint
    async with make_http_client(max_connections=4) as http:
        try:
            models = await ChatClient(http, endpoint).list_models()
        except httpx.HTTPError as exc:
            raise UserError(f"cannot reach {base}: {exc}") from None
    if not models:
        raise UserError(f"{base} serves no models")
    return Endpoint(base_url=base, api_key=api_key, model=models[0], name="external")
