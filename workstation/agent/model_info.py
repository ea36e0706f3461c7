"""What an endpoint says about its model: the context window (vLLM's ``max_model_len``)."""

from __future__ import annotations

import httpx

from workstation.core.endpoints import Endpoint


async def fetch_model_card(http: httpx.AsyncClient, endpoint: Endpoint) -> dict | None:
    """The ``/v1/models`` entry of the endpoint's model (or its first model); None if unknown."""
    headers = {"Authorization": f"Bearer {endpoint.api_key}"} if endpoint.api_key else {}
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
