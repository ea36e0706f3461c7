"""The composition root: builds every service in order, runs the Qt + asyncio loop
(qasync), and shuts down in stages.

Start-up: settings → logging (done by the CLI) → Qt application and its message
handler → the shared HTTP client → the engine (managed launcher, or the external
endpoint from ``settings.engine.external_url``) → telemetry → sessions → window.

Shutdown (window close, Ctrl-C, SIGTERM alike): stop accepting work → cancel the
agents → stop the engine → close the HTTP client → close the window.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import socket
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from workstation.config import Settings, load_settings
from workstation.core.errors import UserError
from workstation.ui.event_loop import make_event_loop, settle_garbage_collector

if TYPE_CHECKING:
    from collections.abc import Callable, Coroutine, Mapping

    import httpx
    from PySide6.QtCore import QMessageLogContext, QtMsgType

    from workstation.core.profiles import Profile
    from workstation.tuning.checks import CheckReport

    from workstation.core.cost import CostEstimate
    from workstation.core.endpoints import Endpoint
    from workstation.fleet.service import Fleet
    from workstation.services import Services
    from workstation.telemetry.meters import Meters
    from workstation.telemetry.nvml import GpuSnapshot
    from workstation.tuning.live_jobs import LiveJobs
    from workstation.tuning.store import TuningStore
    from workstation.ui.bridge import FleetBridge
    from workstation.ui.engine_adapter import EngineAdapter
    from workstation.ui.main_window import MainWindow
    from workstation.ui.recorder import Recorder
    from workstation.ui.recorder.overlay import OverlayValues

__all__ = ["Application", "install_qt_logging", "make_event_loop", "run_gui", "settle_garbage_collector"]

log = logging.getLogger("workstation.app")
qt_log = logging.getLogger("workstation.qt")

def _qt_message_handler(mode: QtMsgType, context: QMessageLogContext | None, message: str) -> None:
    from PySide6.QtCore import QtMsgType

    level = {
        QtMsgType.QtDebugMsg: logging.DEBUG,
        QtMsgType.QtInfoMsg: logging.INFO,
        QtMsgType.QtWarningMsg: logging.WARNING,
        QtMsgType.QtCriticalMsg: logging.ERROR,
        QtMsgType.QtFatalMsg: logging.CRITICAL,
    }.get(mode, logging.WARNING)
    if "propagateSizeHints" in message:  # the offscreen platform says this for every window
        level = logging.DEBUG
    where = f" ({context.file}:{context.line})" if context is not None and context.file else ""
    qt_log.log(level, "%s%s", message, where)


def install_qt_logging() -> None:
    from PySide6.QtCore import qInstallMessageHandler

    qInstallMessageHandler(_qt_message_handler)


class SignalWakeup:
    """Ctrl-C and SIGTERM while Qt sits in C++: the signal writes to a socket
    (``signal.set_wakeup_fd``) that a ``QSocketNotifier`` watches, so the loop wakes and
    the shutdown runs as Python code on the GUI thread."""

    def __init__(self, on_signal: Callable[[int], None]) -> None:
        from PySide6.QtCore import QSocketNotifier

        self._rsock, self._wsock = socket.socketpair()
        self._rsock.setblocking(False)
        self._wsock.setblocking(False)
        self._old_fd = signal.set_wakeup_fd(self._wsock.fileno())
        self._old_handlers = {
            sig: signal.signal(sig, lambda *_: None) for sig in (signal.SIGINT, signal.SIGTERM)
        }
        self._on_signal = on_signal
        self.notifier = QSocketNotifier(self._rsock.fileno(), QSocketNotifier.Type.Read)
        self.notifier.activated.connect(self._readable)

    def _readable(self, *_: object) -> None:
        with contextlib.suppress(BlockingIOError, InterruptedError):
            data = self._rsock.recv(64)
            for signum in data:
                self._on_signal(signum)

    def close(self) -> None:
        self.notifier.setEnabled(False)
        signal.set_wakeup_fd(self._old_fd)
        for sig, handler in self._old_handlers.items():
            signal.signal(sig, handler)
        self._rsock.close()
        self._wsock.close()


@dataclass(frozen=True, slots=True)
class DemoRequest:
    """``workstation demo`` in the window: the manifest's sessions, optionally recorded."""

    sessions: int | None = None
    manifest: str | None = None
    record: Path | None = None
    duration_s: float | None = None
    size_px: tuple[int, int] | None = None
    headless: bool = False
    """Nobody watches (offscreen): approvals are refused back to the agents, never waited on."""


class Application:
    """Owns the window and its wiring for one run; the services come from
    :class:`workstation.services.Services` (the same factory the verbs use)."""

    def __init__(self, settings: Settings, *, demo: DemoRequest | None = None) -> None:
        self.settings = settings
        self.demo = demo
        self.exit_code = 0
        self.services: Services | None = None
        self.http: httpx.AsyncClient | None = None
        self.engine: EngineAdapter | None = None
        self.fleet: Fleet | None = None
        self.bridge: FleetBridge | None = None
        self.meters: Meters | None = None
        self.recorder: Recorder | None = None
        self.window: MainWindow | None = None
        self._cost: CostEstimate | None = None
        self._shutdown = asyncio.Event()
        self._accepting = True
        self._tasks: set[asyncio.Task[None]] = set()
        self.ready = asyncio.Event()
        """Set when sessions can be created (the fleet is up)."""

    def request_shutdown(self, reason: str = "") -> None:
        if not self._shutdown.is_set():
            log.info("shutdown requested %s", reason)
            self._shutdown.set()

    def _spawn(self, coro: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
        task = asyncio.get_event_loop().create_task(coro, name=f"app:{name}")
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if task.cancelled() or task.exception() is None:
            return
        exc = task.exception()
        message = str(exc) if isinstance(exc, UserError) else f"{task.get_name()} failed: {exc!r}"
        log.error("%s", message, exc_info=None if isinstance(exc, UserError) else exc)
        if self.window is not None:
            self.window.show_error(message)

    # ----- start-up -----
    async def _build_engine(self) -> None:
        from workstation.core.profiles import PRESETS
        from workstation.ui.engine_adapter import EngineAdapter

        assert self.services is not None
        try:
            host = await self.services.engine()
        except UserError as exc:
            raise UserError(str(exc), hint=f"{exc.hint or 'run `workstation engine setup`'}; or set "
                                           "engine.external_url to use a running server") from None
        host.endpoint_changed.connect(self._on_endpoint)
        self.engine = EngineAdapter(host, profiles=tuple(PRESETS) if host.managed else ())

    def _build_window(self) -> None:
        from workstation.ui.main_window import MainWindow

        assert self.engine is not None
        window = self.window = MainWindow(self.settings, engine=self.engine)
        window.close_requested.connect(lambda: self.request_shutdown("(window closed)"))
        window.settings_saved.connect(self._settings_saved)
        window.engine_dock.set_log(self.engine.log_tail())
        self.engine.view_changed.connect(window.set_engine_view)
        self.engine.log_line.connect(window.engine_log_line)
        self._install_tuning()
        self._install_recorder()
        self._spawn(self._show_sandbox(), "sandbox-status")
        recording = self.demo is not None and self.demo.record is not None
        window.show_first((1920, 1080) if recording else None)  # recorded as a 1080p screen, scaled

    def _install_recorder(self) -> None:
        """The recorder's REC button (Ctrl+R) in its toolbar slot, its timer in the status bar;
        the caption shows live sessions, tok/s and the saving against the API."""
        window = self.window
        assert window is not None
        try:
            from workstation.ui.recorder import (
                Recorder,
                RecordingIndicator,
                RecordingOptions,
                create_record_action,
                default_recording_path,
            )
        except ImportError as exc:  # PyAV (the encoder) is missing: say so, the rest works
            log.warning("recording is not available: %s", exc)
            window.show_status(f"Recording is not available here: {exc}", 20000)
            return
        recorder = Recorder(parent=window)

        def options() -> RecordingOptions:
            return RecordingOptions(path=default_recording_path(self.settings.recordings_dir), overlay=True)

        def saved(message: str) -> None:
            window.show_status(message, 60000)
            window.attention.notify("workstation", message)

        action = create_record_action(recorder, window, options, overlay_source=self.overlay_values,
                                      on_error=window.show_error, on_saved=saved, parent=window)
        window.install_record_action(action)
        window.statusBar().addPermanentWidget(RecordingIndicator(recorder))
        self.recorder = recorder

    def overlay_values(self) -> OverlayValues:
        """The recording's caption, read from the services (the fleet's sessions, the meters' one
        token rate — the number the strip shows — and their last cost estimate), never from
        widgets."""
        from workstation.core.session_state import SessionState
        from workstation.ui.recorder.overlay import OverlayValues

        sessions = self.fleet.sessions() if self.fleet is not None else []
        view = self.engine.view() if self.engine is not None else None
        return OverlayValues(
            sessions=len(sessions),
            sessions_running=sum(1 for s in sessions if s.state is SessionState.RUNNING),
            tokens_per_s=(self.meters.rate if self.meters is not None
                          else self.fleet.tokens_per_s_total() if self.fleet is not None else None),
            savings_pct=self._cost.savings_pct if self._cost is not None else None,
            note=(view.model or None) if view is not None else None,
        )

    def _live_jobs(self, store: TuningStore) -> LiveJobs:
        """Capture and Bench against whatever engine serves when the job starts."""
        from workstation.engine.environment import find_engine
        from workstation.tuning.live_jobs import LiveJobs

        assert self.services is not None and self.engine is not None and self.http is not None
        host = self.engine.host
        return LiveJobs(self.http, endpoint=lambda: host.get(), store=store, fleets=self.services.fleet,
                        engine=lambda: find_engine(self.settings), settings=self.settings,
                        autotuners=self.services.autotuner)

    def _install_tuning(self) -> None:
        """The Tuning dock's checks and the live engine's safe switch. Only an engine the app
        started can be switched; the engine's owner moves sessions and meters to the new one."""
        assert self.window is not None and self.services is not None and self.engine is not None
        dock = self.window.tuning_dock
        host = self.engine.host
        dock.jobs.set_jobs(self._live_jobs(dock.store))
        switch = self.services.live_switch()
        if switch is None or host.launcher is None:
            external = host.external
            why = (f"this window uses an external endpoint ({external.base_url}); only an engine the app "
                   "started can be switched" if external is not None else "no engine is configured")
            dock.set_switch(None, why)
            dock.set_checker(None, why)
            return
        from workstation.tuning.checks import check_against_engine

        settings = self.settings

        def check(profile: Profile, catalogue: Mapping[str, Profile]) -> CheckReport:
            live = host.launcher  # the engine serving when the check runs (a switch may have moved it)
            assert live is not None
            return check_against_engine(settings, live.engine, live.model, profile, catalogue,
                                        extra_args=settings.engine.extra_args)

        dock.set_checker(check)
        dock.set_switch(switch)

    def _on_endpoint(self, endpoint: Endpoint | None) -> None:
        """The live endpoint changed: the first one brings the fleet up (a managed engine picks
        its port and key at start); later ones reach the fleet and the meters through the
        service factory's wiring."""
        if endpoint is None or not self._accepting or self.fleet is not None:
            return
        self._spawn(self._build_fleet(), "fleet-start")

    async def _show_sandbox(self) -> None:
        """The banner over the grid while agents' commands are not confined (the agents
        themselves ask for every command then, or refuse it headless: agent/sandbox_status.py)."""
        from workstation.agent.sandbox import SandboxPolicy
        from workstation.agent.sandbox_status import sandbox_status

        status = await sandbox_status(SandboxPolicy.from_settings(self.settings))
        log.log(logging.INFO if status.confined else logging.WARNING, "%s", status.summary())
        if self.window is not None:
            self.window.sandbox_banner.show_status(status)

    async def _show_stored(self) -> None:
        """The stored sessions in the grid at once, while the engine starts (the fleet, once up,
        brings their histories into the same panes)."""
        from workstation.ui.restart_flow import show_stored_sessions

        assert self.window is not None
        shown = await show_stored_sessions(self.window, self.settings.data_dir / "store.sqlite3")
        if shown:
            self.window.show_status(f"{shown} stored session(s); the engine is starting…", 15000)

    async def _build_fleet(self) -> None:
        """Fleet (on the live engine, followed across restarts and switches), its bridge to the
        window, the sessions in the store, meters."""
        from workstation.ui.bridge import FleetBridge
        from workstation.ui.fleet_backend import FleetCommands

        assert self.services is not None and self.window is not None
        fleet = self.fleet = self.services.fleet()
        await self._show_sandbox()  # the settings the fleet's agents run under
        self.bridge = FleetBridge(fleet, self.window)
        self.window.attach_bridge(self.bridge)
        await fleet.start()
        await self.bridge.load_existing()
        settle_garbage_collector()
        from workstation.agent.model_info import model_takes_images
        from workstation.engine.lora import served_adapters

        assert self.engine is not None
        endpoint = self.engine.host.get()  # the live engine: its adapters, whether it takes images
        commands = FleetCommands(fleet, adapters=tuple(await served_adapters(self.http, endpoint)),
                                 takes_images=await model_takes_images(self.http, endpoint, self.settings),
                                 model=endpoint.model)
        await commands.refresh_recent()
        self.window.commands = commands
        self.ready.set()
        log.info("fleet ready: %d session(s)", len(self.window.panes))
        if self.demo is not None:
            self._spawn(self._run_demo(), "demo")
        await self._build_meters()

    async def _run_demo(self) -> None:
        """Create and start the manifest's sessions; record them for the duration asked."""
        from workstation.fleet.demo_run import start_demo

        demo = self.demo
        assert demo is not None and self.fleet is not None
        started = await start_demo(self.fleet, self.settings.data_dir, sessions=demo.sessions,
                                   manifest=demo.manifest, headless=demo.headless)
        plan = started.plan
        log.info("demo '%s': %d sessions in %s", plan.manifest.name, len(plan.sessions), plan.workdir)
        notice = started.notice()
        if notice and self.window is not None:  # which it kept, and that they are the user's now
            self.window.show_status(notice[0].upper() + notice[1:], 20000, details=started.details())
        if demo.record is not None and self.recorder is not None:
            from workstation.ui.recorder import RecordingOptions

            overrides: dict[str, Any] = {"duration_s": demo.duration_s}
            if demo.size_px is not None:
                overrides["size_px"] = demo.size_px
            options = RecordingOptions.from_demo(plan.manifest.recording, demo.record, **overrides)
            self.recorder.start(self.window, options, overlay_source=self.overlay_values)
            result = await self.recorder.wait_async()
            print(f"recorded {result.path}: {result.frames_written} frames "
                  f"({result.frames_dropped} dropped, {result.frames_repeated} repeated)"
                  + (f"; error: {result.error}" if result.error else ""), file=sys.stderr, flush=True)
            self.exit_code = 0 if result.error is None else 1
            if demo.duration_s is not None:
                self.request_shutdown("(demo recorded)")
        elif demo.duration_s is not None:
            await asyncio.sleep(demo.duration_s)
            self.request_shutdown("(demo duration reached)")

    async def _build_meters(self) -> None:
        """The meter strip and dock on the service factory's meters; where a part of them cannot
        load (a broken plotting install), the window says so and the sessions go on without."""
        assert self.services is not None and self.window is not None and self.fleet is not None
        try:
            from workstation.ui.meters.install import install_meters
        except ImportError as exc:
            log.warning("meters are not available: %s", exc)
            self.window.show_status(f"Meters are not available here: {exc}", 20000)
            return
        meters = self.meters = self.services.meters(streams=self.fleet.streams)
        meters.cost_updated.connect(self._on_cost)
        meters.gpu_sampled.connect(self._on_gpu)
        install_meters(self.window, meters, settings=self.settings)
        await meters.start()

    def _on_cost(self, estimate: CostEstimate) -> None:
        self._cost = estimate

    def _on_gpu(self, snapshot: GpuSnapshot) -> None:
        """The settings offer this GPU model's typical hourly price."""
        if snapshot.devices and self.window is not None:
            self.window.gpu_name = snapshot.devices[0].name

    async def _start_engine(self) -> None:
        assert self.engine is not None and self.window is not None
        try:
            await self.engine.start()
        except UserError as exc:
            self.window.engine_dock.show()
            self.window.show_error(f"engine: {str(exc).splitlines()[0]}")

    def _settings_saved(self, settings: Settings) -> None:
        self.settings = settings

    # ----- the run -----
    async def run(self) -> int:
        from workstation.services import Services

        self.services = Services(self.settings)
        self.http = self.services.http
        try:
            await self._build_engine()
            self._build_window()
            await self._show_stored()
            self._spawn(self._start_engine(), "engine-start")
            await self._shutdown.wait()
        finally:
            await self.shutdown()
        return self.exit_code

    async def shutdown(self) -> None:
        """Stop accepting work → cancel agents → stop the engine → close the client. Each stage
        that fails is logged, and the next one still runs."""
        from workstation.services import shutdown_stage

        self._accepting = False
        window = self.window
        if window is not None:
            window.save_layout()  # where the user left it, however the app is stopped (Ctrl+C, a signal)
            window.stop_accepting_work()
        recorder = self.recorder
        if recorder is not None and recorder.state.value in ("starting", "recording"):
            recorder.stop()
            with shutdown_stage("finishing the recording"):
                await asyncio.wait_for(recorder.wait_async(), 15)
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=10)
        if self.services is not None:
            with shutdown_stage("ending the sessions"):
                await self.services.close_sessions()  # ends every agent; states stay
        if self.bridge is not None:
            with shutdown_stage("closing the fleet's bridge"):
                self.bridge.close()
        if window is not None:
            with shutdown_stage("ending the window's tasks"):
                await window.tasks.aclose()
        if self.services is not None:
            await self.services.aclose()  # meters → engine → HTTP client, each stage logged
        if window is not None:
            window.allow_close()
            window.close()


def run_gui(args: argparse.Namespace | None = None) -> int:
    """Open the window; returns the exit status."""
    from PySide6.QtWidgets import QApplication

    from workstation.ui.theme import apply_theme

    from workstation.ui.qt_platform import check_platform, preflight_message

    platform = check_platform()
    if not platform.platform_plugin_ok:  # before Qt aborts with exit 134 and no names
        raise UserError(preflight_message(platform))
    settings = load_settings()
    demo = demo_request(args, settings) if args is not None and args.func is not None else None
    if demo is not None and args.endpoint:
        engine = settings.engine.model_copy(update={
            "external_url": args.endpoint, "external_api_key": args.api_key or "",
            "external_model": args.model})
        settings = settings.model_copy(update={"engine": engine})
    elif demo is not None and args.model:
        settings = settings.model_copy(update={"engine": settings.engine.model_copy(update={"model": args.model})})
    install_qt_logging()
    app = QApplication.instance() or QApplication(sys.argv[:1])
    app.setApplicationName("workstation")
    app.setOrganizationName("workstation")
    app.setDesktopFileName("org.workstation.Workstation")
    apply_theme(app, settings.ui.theme)
    loop = make_event_loop(app)
    application = Application(settings, demo=demo)
    wakeup = SignalWakeup(lambda signum: application.request_shutdown(f"(signal {signum})"))
    app.aboutToQuit.connect(lambda: application.request_shutdown("(application quit)"))
    try:
        with loop:
            code = loop.run_until_complete(application.run())
            loop.run_until_complete(loop.shutdown_asyncgens())
    finally:
        wakeup.close()
    log.info("window closed (exit %s, pid %s)", code, os.getpid())
    return code


def demo_request(args: argparse.Namespace, settings: Settings) -> DemoRequest:
    """The window side of ``workstation demo`` (see ``commands/demo_cmd.py``)."""
    size = None
    if args.size:
        try:
            w, h = (int(v) for v in args.size.lower().replace("×", "x").split("x"))
        except ValueError:
            raise UserError(f"--size must look like 1280x720, not {args.size!r}") from None
        size = (w - w % 2, h - h % 2)
    record = Path(args.record).expanduser().resolve() if args.record else None
    if record is not None and record.parent and not record.parent.is_dir():
        raise UserError(f"cannot record to {record}: folder {record.parent} does not exist")
    return DemoRequest(sessions=args.sessions, manifest=args.manifest, record=record,
                       duration_s=args.duration, size_px=size, headless=bool(args.headless))
