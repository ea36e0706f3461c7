"""The GUI's task owner: what a failed task tells the user."""

from __future__ import annotations

import asyncio

from workstation.core.errors import UserError
from workstation.ui.tasks import TaskOwner


def test_a_refusal_reaches_the_user_with_its_hint() -> None:
    """A follow-up refused over its budget said only "budget reached": the hint (what to do
    about it) was dropped on the way to the status bar."""
    shown: list[str] = []
    owner = TaskOwner("window", on_error=shown.append)

    async def refused() -> None:
        raise UserError("fix-add: budget reached", hint="raise or clear its budget to continue")

    async def plain() -> None:
        raise UserError("no sessions service is running")

    async def body() -> None:
        for coro in (refused(), plain()):
            await asyncio.gather(owner.spawn(coro, "follow-up"), return_exceptions=True)
            await asyncio.sleep(0)  # the done callbacks

    asyncio.run(body())
    assert shown == ["fix-add: budget reached (raise or clear its budget to continue)",
                     "no sessions service is running"]
