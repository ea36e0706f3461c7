"""An OpenAI-compatible endpoint as data."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where to send chat completions: a managed vLLM or an external server."""

    base_url: str
    """Root URL without ``/v1``, e.g. ``http://127.0.0.1:8000``."""
    api_key: str
    model: str
    name: str = "engine"
    managed: bool = False
    native_tools: bool | None = None
    """Whether the server parses tool calls itself (vLLM ``--enable-auto-tool-choice``);
    None when unknown (probe it)."""

    @property
    def v1(self) -> str:
        return self.base_url.rstrip("/") + "/v1"

    def auth_headers(self) -> dict[str, str]:
        """The bearer header its requests carry (none without a key)."""
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def __repr__(self) -> str:  # never print the key
        return f"Endpoint(name={self.name!r}, base_url={self.base_url!r}, model={self.model!r})"
