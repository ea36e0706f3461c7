"""One way for every verb to get an endpoint: a given URL, the configured external
endpoint, or the managed engine started for the duration of a ``async with``."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable

import httpx

from workstation.config import Settings
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


@contextlib.asynccontextmanager
async def engine_endpoint(
    settings: Settings,
    *,
    url: str | None = None,
    api_key: str = "",
    model: str | None = None,
    progress: Callable[[str], None] | None = None,
) -> AsyncIterator[Endpoint]:
    """Yield an endpoint; a managed engine started here is stopped on exit."""
    url = url or settings.engine.external_url
    if url:
        key = api_key or settings.engine.external_api_key or ""
        yield await external_endpoint(url, key, model or settings.engine.external_model)
        return
    from workstation.engine.environment import require_engine
    from workstation.engine.launcher import EngineLauncher
    from workstation.engine.models import resolve_model

    engine = require_engine(settings)
    spec = resolve_model(settings, model)
    launcher = EngineLauncher(settings, engine, spec)
    try:
        yield await launcher.start(progress)
    finally:
        await launcher.stop()
