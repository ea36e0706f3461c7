"""The endpoint a fleet benchmark runs against: the URL its arguments give (``--endpoint``,
``--api-key``, ``--model``), else the managed engine, started and stopped around the run
(:func:`workstation.services.served_endpoint`), with the services the run uses (the ones that
hold that engine: a benchmark builds no second set beside them). One copy for demo_tasks,
fleet_run and replay_fidelity, which each had the same arguments and the same ``main``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from workstation.config import load_settings
from workstation.core.endpoints import Endpoint
from workstation.services import Services, served_endpoint

T = TypeVar("T")


def add_endpoint_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--endpoint", help="OpenAI-compatible endpoint (default: start the managed engine)")
    parser.add_argument("--api-key", default="")
    parser.add_argument("--model")


async def on_endpoint(args: Any, run: Callable[[Endpoint, Services], Awaitable[T]]) -> T:
    """``run(endpoint, services)`` on the endpoint ``args`` name (engine progress on stderr)."""
    async with served_endpoint(load_settings(), args.endpoint, args.api_key, args.model,
                               say=lambda m: print(f"engine: {m}", file=sys.stderr)) as (services, endpoint):
        return await run(endpoint, services)
