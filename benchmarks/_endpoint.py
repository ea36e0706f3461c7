"""The endpoint a fleet benchmark runs against: the URL its arguments give (``--endpoint``,
``--api-key``, ``--model``), else the managed engine, started and stopped around the run
(:func:`workstation.services.served_endpoint`). One copy for demo_tasks, fleet_run and
replay_fidelity, which each had the same arguments and the same ``main``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from workstation.config import Settings, load_settings
from workstation.core.endpoints import Endpoint
from workstation.services import served_endpoint

T = TypeVar("T")


def add_endpoint_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--endpoint", help="OpenAI-compatible endpoint (default: start the managed engine)")
    parser.add_argument("--api-key", default="")
    parser.add_argument("--model")


async def on_endpoint(args: Any, run: Callable[[Endpoint, Settings], Awaitable[T]]) -> T:
    """``run(endpoint, settings)`` on the endpoint ``args`` name (engine progress on stderr)."""
    settings = load_settings()
    async with served_endpoint(settings, args.endpoint, args.api_key, args.model,
                               say=lambda m: print(f"engine: {m}", file=sys.stderr)) as endpoint:
        return await run(endpoint, settings)
