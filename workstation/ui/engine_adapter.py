"""The engine as the window sees it: a managed :class:`EngineLauncher` or an external
endpoint, behind :class:`workstation.ui.backend.EngineControl`.

Launcher events (psygnal, emitted on the event loop = the GUI thread under qasync) go
to the window; the endpoint becomes available to sessions when the engine is ready.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from psygnal import Signal

from workstation.core.endpoints import Endpoint
from workstation.core.errors import UserError
from workstation.ui.backend import EngineView

log = logging.getLogger(__name__)


class EngineAdapter:
    """Start / stop / restart with a profile, state and log for the dock."""

    endpoint_changed = Signal(object)
    """The usable endpoint, or None while the engine is not ready."""
    view_changed = Signal(object)
    """An :class:`EngineView`."""
    log_line = Signal(str)

    def __init__(
        self,
        *,
        launcher: Any | None = None,
        external: Endpoint | None = None,
        profiles: tuple[str, ...] = (),
        progress: Callable[[str], None] | None = None,
    ) -> None:
        self.launcher = launcher
        self.external = external
        self.profiles = profiles
        self._progress = progress
        self._detail = ""
        if launcher is not None:
            launcher.state_changed.connect(self._on_state_changed)
            launcher.log_line.connect(self._on_log_line)

    @property
    def endpoint(self) -> Endpoint | None:
        if self.external is not None:
            return self.external
        if self.launcher is not None and getattr(self.launcher.state, "value", "") == "ready":
            return self.launcher.endpoint
        return None

    def view(self) -> EngineView:
        if self.external is not None:
            return EngineView(
                state="external", model=self.external.model, managed=False,
                detail=f"using {self.external.base_url} (not managed by the app)",
            )
        if self.launcher is None:
            return EngineView(state="stopped", managed=False, detail="no engine configured")
        return EngineView(
            state=self.launcher.state.value,
            model=self.launcher.model.served_name,
            profile=self.launcher.profile.name,
            detail=self._detail,
            managed=True,
            profiles=self.profiles,
        )

    def replace_launcher(self, launcher: Any) -> None:
        """A switch left another engine serving: follow it (state, log) from now on."""
        old = self.launcher
        for name, slot in (("state_changed", self._on_state_changed), ("log_line", self._on_log_line)):
            if old is not None and getattr(old, name, None) is not None:
                getattr(old, name).disconnect(slot)
            if getattr(launcher, name, None) is not None:
                getattr(launcher, name).connect(slot)
        self.launcher = launcher
        self._detail = ""
        self.view_changed.emit(self.view())

    def _on_log_line(self, line: str) -> None:
        self.log_line.emit(line)

    def log_tail(self) -> list[str]:
        return list(self.launcher.log_tail) if self.launcher is not None else []

    def _on_state_changed(self, state: Any, detail: str) -> None:
        self._detail = detail
        self.view_changed.emit(self.view())
        self.endpoint_changed.emit(self.endpoint)

    def _set_profile(self, profile: str | None) -> None:
        if not profile or self.launcher is None or profile == self.launcher.profile.name:
            return
        from workstation.core.profiles import PRESETS

        if profile not in PRESETS:
            raise UserError(f"unknown engine profile '{profile}'")
        self.launcher.profile = PRESETS[profile]

    async def start(self, profile: str | None = None) -> None:
        if self.launcher is None:
            return
        self._set_profile(profile)
        try:
            await self.launcher.start(self._progress)
        except UserError as exc:
            self._detail = str(exc).split("\n", 1)[0]
            self.view_changed.emit(self.view())
            raise

    async def stop(self) -> None:
        if self.launcher is not None:
            await self.launcher.stop()

    async def restart(self, profile: str | None = None) -> None:
        if self.launcher is None:
            return
        await self.launcher.stop()
        await self.start(profile)
