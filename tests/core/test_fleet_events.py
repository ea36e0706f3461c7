"""The fleet's events as one union: what ``Fleet.changed`` and ``Fleet.agent_event`` carry."""

from __future__ import annotations

import dataclasses
import typing

from workstation.core import fleet_events as fe

PARTS = {fe.SessionSummary, fe.OrphanWorktree}
"""Dataclasses that travel inside events, not events themselves."""


def test_every_event_the_module_defines_is_in_the_union() -> None:
    defined = {c for c in vars(fe).values()
               if isinstance(c, type) and dataclasses.is_dataclass(c) and c.__module__ == fe.__name__}
    assert set(typing.get_args(fe.FleetEvent)) == defined - PARTS
