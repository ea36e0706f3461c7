"""Images attached to a task or an answer (screenshots, diagrams), and whether the model
takes them.

An image travels as an OpenAI ``image_url`` part with a ``data:`` URL next to the message's
text part — only to a model that takes images, decided from the served model's own
``config.json`` (a vision part: ``vision_config``, an image token …). Anything else is refused
before a request is made, with a message that says why; nothing is dropped silently.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workstation.core.errors import UserError

MAX_IMAGE_BYTES = 10 * 1024 * 1024
MAX_IMAGES = 8
IMAGE_TOKENS_GUESS = 1_000
"""What one image counts for in the agent's token estimate between real usage reports."""

_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"\x89PNG\r\n\x1a\n", "image/png"), (b"\xff\xd8\xff", "image/jpeg"), (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
)
VISION_KEYS = ("vision_config", "vision_tower", "mm_vision_tower", "img_processor", "image_token_index",
               "image_token_id", "vision_start_token_id")
"""``config.json`` keys that only models with a vision part have."""


@dataclass(frozen=True, slots=True)
class ImageAttachment:
    name: str
    """The file's name, for people (``screenshot.png``)."""
    path: str
    """Where it was read from (thumbnails are drawn from it)."""
    mime: str
    data: bytes

    @property
    def data_url(self) -> str:
        return f"data:{self.mime};base64,{base64.b64encode(self.data).decode()}"

    def part(self) -> dict[str, Any]:
        return {"type": "image_url", "image_url": {"url": self.data_url}}


def sniff_mime(data: bytes) -> str | None:
    for magic, mime in _MAGIC:
        if data.startswith(magic):
            return mime
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def load_image(path: str | Path) -> ImageAttachment:
    """An image file, checked: exists, at most :data:`MAX_IMAGE_BYTES`, PNG/JPEG/GIF/WebP."""
    p = Path(path).expanduser()
    try:
        size = p.stat().st_size
    except OSError:
        raise UserError(f"image {path}: no such file") from None
    if not p.is_file():
        raise UserError(f"image {path} is not a file")
    if size > MAX_IMAGE_BYTES:
        raise UserError(f"image {p.name} has {size / 1e6:.1f} MB; the limit is {MAX_IMAGE_BYTES / 1e6:.0f} MB",
                        hint="send a smaller screenshot, or crop it")
    data = p.read_bytes()
    mime = sniff_mime(data)
    if mime is None:
        raise UserError(f"{p.name} is not a PNG, JPEG, GIF or WebP image")
    return ImageAttachment(p.name, str(p.resolve()), mime, data)


def load_images(paths: Iterable[str | Path]) -> tuple[ImageAttachment, ...]:
    images = tuple(load_image(p) for p in paths)
    if len(images) > MAX_IMAGES:
        raise UserError(f"{len(images)} images attached; at most {MAX_IMAGES} go with one message")
    return images


def user_content(text: str, images: Sequence[ImageAttachment]) -> str | list[dict[str, Any]]:
    """A user message's ``content``: the text alone, or the text part then the image parts."""
    if not images:
        return text
    return [{"type": "text", "text": text}, *(image.part() for image in images)]


def config_takes_images(config: dict[str, Any] | None) -> bool | None:
    """Whether a model's ``config.json`` has a vision part; None without a config."""
    if not isinstance(config, dict):
        return None
    return any(key in config for key in VISION_KEYS)


def folder_takes_images(folder: str | Path | None) -> bool | None:
    """:func:`config_takes_images` of a local model folder (None when it is not readable here)."""
    if not folder:
        return None
    try:
        config = json.loads((Path(folder) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return config_takes_images(config)


def refusal(model: str, takes: bool | None) -> str:
    """Why images cannot go to ``model``."""
    if takes is False:
        return (f"the model '{model}' does not take images (its config has no vision part), so images "
                f"cannot be attached; use a session on a vision model")
    return (f"cannot tell whether the model '{model}' takes images: the server does not show where its "
            f"config is; if it does, set agent.model_takes_images = yes")
