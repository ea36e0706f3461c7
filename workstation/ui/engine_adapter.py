"""The engine as the window sees it: a view of the live engine's one owner
(:class:`workstation.engine.host.EngineHost`) behind :class:`workstation.ui.backend.EngineControl`.

It decides nothing: start, stop and restart go to the host; which engine serves (after a
restart, or the engine a switch left serving) is the host's. The host's events (psygnal, on
the event loop = the GUI thread under qasync) become :class:`EngineView` s for the dock and
the toolbar.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from psygnal import Signal

from workstation.core.endpoints import Endpoint
from workstation.engine.host import EngineHost, ManagedEngine
from workstation.engine.launcher import EngineState
from workstation.ui.backend import EngineView

log = logging.getLogger(__name__)


class EngineAdapter:
    """State and log of the live engine for the dock; start / stop / restart with a profile."""

    view_changed = Signal(object)
    """An :class:`EngineView`."""
    log_line = Signal(str)

    def __init__(self, host: EngineHost, *, profiles: tuple[str, ...] = (),
                 progress: Callable[[str], None] | None = None) -> None:
        self.host = host
        self.profiles = profiles
        self._progress = progress
        host.state_changed.connect(self._on_state_changed)
        host.log_line.connect(self._on_log_line)
        host.launcher_changed.connect(self._on_launcher_changed)

    @property
    def launcher(self) -> ManagedEngine | None:
        return self.host.launcher

    @property
    def external(self) -> Endpoint | None:
        return self.host.external

    @property
    def endpoint(self) -> Endpoint | None:
        return self.host.endpoint

    def view(self) -> EngineView:
        external = self.host.external
        if external is not None:
            return EngineView(
                state="external", model=external.model, managed=False,
                detail=f"using {external.base_url} (not managed by the app)",
            )
        launcher = self.host.launcher
        if launcher is None:
            return EngineView(state="stopped", managed=False, detail="no engine configured")
        return EngineView(
            state=launcher.state.value,
            model=launcher.model.served_name,
            profile=launcher.profile.name,
            detail=self.host.detail,
            managed=True,
            profiles=self.profiles,
        )

    def log_tail(self) -> list[str]:
        launcher = self.host.launcher
        return list(launcher.log_tail) if launcher is not None else []

    def _on_log_line(self, line: str) -> None:
        self.log_line.emit(line)

    def _on_state_changed(self, _state: EngineState, _detail: str) -> None:
        self.view_changed.emit(self.view())

    def _on_launcher_changed(self, _launcher: ManagedEngine | None) -> None:
        self.view_changed.emit(self.view())

    async def start(self, profile: str | None = None) -> None:
        await self.host.start(profile, self._progress)

    async def stop(self) -> None:
        await self.host.stop()

    async def restart(self, profile: str | None = None) -> None:
        await self.host.restart(profile, self._progress)
