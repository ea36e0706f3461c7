"""What an endpoint says about its model: the context window (vLLM's ``max_model_len``),
whether it takes images and its size in parameters (both from the config in the folder vLLM
reports as its ``root``)."""

from __future__ import annotations

import asyncio

import httpx

from workstation.agent.model_size import model_parameters
from workstation.core.endpoints import Endpoint


async def fetch_model_card(http: httpx.AsyncClient, endpoint: Endpoint) -> dict | None:
    """The ``/v1/models`` entry of the endpoint's model (or its first model); None if unknown."""
    headers = endpoint.auth_headers()
    try:
        response = await http.get(endpoint.v1 + "/models", headers=headers)
        if response.status_code != 200:
            return None
        data = response.json().get("data") or []
    except (httpx.HTTPError, ValueError, AttributeError):
        return None
    for card in data:
        if isinstance(card, dict) and card.get("id") == endpoint.model:
            return card
    return data[0] if data and isinstance(data[0], dict) and not endpoint.model else None


async def fetch_context_window(http: httpx.AsyncClient, endpoint: Endpoint) -> int | None:
    """The model's context length in tokens, where the server reports it (vLLM does)."""
    card = await fetch_model_card(http, endpoint)
    value = (card or {}).get("max_model_len")
    return int(value) if isinstance(value, int) and value > 0 else None


async def fetch_takes_images(http: httpx.AsyncClient, endpoint: Endpoint) -> bool | None:
    """Whether the served model has a vision part, from its ``config.json`` where the folder vLLM
    reports (``root``; an adapter's base model for a LoRA) is readable here; None when unknown."""
    import asyncio

    from workstation.agent.images import folder_takes_images

    card = await fetch_model_card(http, endpoint)
    if card is None:
        return None
    root = card.get("root")
    if card.get("parent"):  # a LoRA adapter: the base model decides
        base = await fetch_model_card(http, Endpoint(endpoint.base_url, endpoint.api_key, str(card["parent"])))
        root = (base or {}).get("root")
    return await asyncio.to_thread(folder_takes_images, root) if isinstance(root, str) else None


async def model_takes_images(http: httpx.AsyncClient, endpoint: Endpoint, settings: object) -> bool | None:
    """The setting ``agent.model_takes_images`` where not ``auto``, else :func:`fetch_takes_images`."""
    chosen = images_setting(settings)
    return chosen if chosen is not None else await fetch_takes_images(http, endpoint)


def images_setting(settings: object) -> bool | None:
    """``agent.model_takes_images``: ``yes`` True, ``no`` False, ``auto`` None (ask the model)."""
    value = getattr(getattr(settings, "agent", None), "model_takes_images", "auto")
    return {"yes": True, "no": False}.get(str(value))


async def fetch_model_parameters(http: httpx.AsyncClient, endpoint: Endpoint) -> int | None:
    """The served model's parameter count: from its config where the server's ``root``
    is a local model folder (vLLM reports it), else from a size in its name; None if unknown."""
    card = await fetch_model_card(http, endpoint) or {}
    root = card.get("root") if isinstance(card.get("root"), str) else None
    names = " ".join(str(n) for n in (card.get("id"), root, endpoint.model) if n)
    folder = root if root and root.startswith(("/", "~", ".")) else None
    return await asyncio.to_thread(model_parameters, folder, names)
