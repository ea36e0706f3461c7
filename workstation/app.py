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
from typing import Any

from workstation.config import Settings, load_settings
from workstation.core.errors import UserError
from workstation.ui.event_loop import make_event_loop, settle_garbage_collector

__all__ = ["Application", "install_qt_logging", "make_event_loop", "run_gui", "settle_garbage_collector"]

log = logging.getLogger("workstation.app")
qt_log = logging.getLogger("workstation.qt")

FIRST_PROMPT = "Write a short Python function that reverses a string, then explain it in two sentences."
"""What a window without the fleet (``use_fleet=False``) asks the engine first."""


def _qt_message_handler(mode: Any, context: Any, message: str) -> None:
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

    def __init__(self, on_signal: Any) -> None:
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

    def _readable(self, *_: Any) -> None:
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
    """Owns every service for one run of the window.

    ``use_fleet`` (the default) makes every pane a fleet session; without it the window
    runs plain streamed chats (``first_prompt`` opens one as soon as the engine is ready).
    """

    def __init__(self, settings: Settings, *, use_fleet: bool = True, first_prompt: str | None = None,
                 demo: DemoRequest | None = None) -> None:
        self.settings = settings
        self.demo = demo
        self._overlay: Any = None
        self.use_fleet = use_fleet
        self.first_prompt = first_prompt
        self.exit_code = 0
        self.http = None
        self.engine = None
        self.sessions = None
        self.fleet = None
        self.bridge = None
        self.meters = None
        self.recorder = None
        self.window = None
        self._shutdown = asyncio.Event()
        self._accepting = True
        self._tasks: set[asyncio.Task[Any]] = set()
        self.ready = asyncio.Event()
        """Set when sessions can be created (the fleet, or the chat backend, is up)."""

    def request_shutdown(self, reason: str = "") -> None:
        if not self._shutdown.is_set():
            log.info("shutdown requested %s", reason)
            self._shutdown.set()

    def _spawn(self, coro: Any, name: str) -> asyncio.Task[Any]:
        task = asyncio.get_event_loop().create_task(coro, name=f"app:{name}")
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[Any]) -> None:
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

        engine_settings = self.settings.engine
        if engine_settings.external_url:
            from workstation.engine.acquire import external_endpoint

            endpoint = await external_endpoint(
                engine_settings.external_url, engine_settings.external_api_key or "",
                engine_settings.external_model,
            )
            self.engine = EngineAdapter(external=endpoint)
            return
        from workstation.engine.environment import find_engine
        from workstation.engine.launcher import EngineLauncher
        from workstation.engine.models import resolve_model

        install = find_engine(self.settings)
        if install is None:
            raise UserError(
                "the engine is not set up",
                hint="run `workstation engine setup`, or set engine.external_url to use a running server",
            )
        spec = resolve_model(self.settings, engine_settings.model)
        launcher = EngineLauncher(self.settings, install, spec, log_dir=self.settings.logs_dir,
                                  profile=engine_settings.profile)
        self.engine = EngineAdapter(launcher=launcher, profiles=tuple(PRESETS))

    def _build_window(self) -> None:
        from workstation.ui.main_window import MainWindow

        self.window = MainWindow(self.settings, engine=self.engine)
        self.window.close_requested.connect(lambda: self.request_shutdown("(window closed)"))
        self.window.settings_saved.connect(self._settings_saved)
        self.window.engine_dock.set_log(self.engine.log_tail())
        self.engine.view_changed.connect(self.window.set_engine_view)
        self.engine.log_line.connect(self.window.engine_log_line)
        self.engine.endpoint_changed.connect(self._on_endpoint)
        self._install_tuning()
        if not self.use_fleet:
            from workstation.ui.chat_backend import ChatSessions

            self.sessions = ChatSessions(self.window, None)
            self.window.commands = self.sessions
        self._install_recorder()
        if self.use_fleet:
            self._spawn(self._show_sandbox(), "sandbox-status")
        if self.demo is not None and self.demo.record is not None:
            self.window.resize(1920, 1080)  # recorded as a 1080p screen, scaled to the output size
        else:
            self.window.resize(1600, 960)
        self.window.show()

    def _install_recorder(self) -> None:
        """The recorder's REC button (Ctrl+R) in its toolbar slot, its timer in the status bar;
        the caption shows live sessions, tok/s and the saving against the API."""
        try:
            from workstation.ui.recorder import (
                OverlayValues,
                Recorder,
                RecordingIndicator,
                RecordingOptions,
                create_record_action,
                default_recording_path,
            )
        except ImportError:
            return
        window = self.window
        recorder = Recorder(parent=window)

        def options() -> RecordingOptions:
            return RecordingOptions(path=default_recording_path(self.settings.recordings_dir), overlay=True)

        def overlay() -> OverlayValues:
            from workstation.core.session_state import SessionState

            states = [p.info.state for p in window.panes.values()]
            cost = getattr(window.meters_strip, "last_cost", None) if hasattr(window, "meters_strip") else None
            return OverlayValues(
                sessions=len(states),
                sessions_running=sum(1 for st in states if st is SessionState.RUNNING),
                tokens_per_s=sum(p.display_rate() for p in window.panes.values()),
                savings_pct=getattr(cost, "savings_pct", None),
                note=self.engine.view().model or None,
            )

        self._overlay = overlay
        action = create_record_action(recorder, window, options, overlay_source=overlay,
                                      on_error=window.show_error, parent=window)
        window.install_record_action(action)
        window.statusBar().addPermanentWidget(RecordingIndicator(recorder))
        self.recorder = recorder

    def _install_tuning(self) -> None:
        """The Tuning dock's checks and its switch. Only the engine the app started can be
        switched; sessions move through ``_on_endpoint`` (the fleet's ``update_endpoint``)."""
        dock = self.window.tuning_dock
        dock.engine_replaced.connect(self._on_engine_replaced)
        launcher = getattr(self.engine, "launcher", None)
        if launcher is None:
            external = getattr(self.engine, "external", None)
            why = (f"this window uses an external endpoint ({external.base_url}); only an engine the app "
                   "started can be switched" if external is not None else "no engine is configured")
            dock.set_switch_host(None, why)
            dock.set_checker(None, why)
            return
        from workstation.tuning.checks import check_against_engine
        from workstation.ui.tuning_dock import SwitchHost

        settings = self.settings
        dock.set_checker(lambda profile, catalogue: check_against_engine(
            settings, launcher.engine, launcher.model, profile, catalogue, extra_args=settings.engine.extra_args))
        dock.set_switch_host(SwitchHost(http=self.http, live=lambda: self.engine.launcher,
                                        factory=self._switch_launcher, retarget=self._on_endpoint,
                                        plan=self._switch_placement))

    def _switch_launcher(self, profile: Any, env: dict[str, str]) -> Any:
        """The new engine of a switch: same install and model, another profile, a free port."""
        from workstation.engine.launcher import EngineLauncher

        live = self.engine.launcher
        return EngineLauncher(self.settings, live.engine, live.model, log_dir=self.settings.logs_dir / "switch",
                              profile=profile, port=0, env=env)

    def _switch_placement(self) -> Any:
        """Where the new engine runs (blocking: reads NVML on CUDA)."""
        from workstation.tuning.placement import gpu_inventory, plan_placement

        live = self.engine.launcher
        platform = live.engine.platform
        return plan_placement(platform, live_env={**os.environ, **live.extra_env}, cpu_count=os.cpu_count() or 1,
                              gpus=gpu_inventory() if platform == "cuda" else ())

    def _on_engine_replaced(self, serving: Any, report: Any) -> None:
        """A switch (or its roll-back by restart) left another engine serving: adopt it."""
        log.info("engine replaced: %s", report.lines()[0])
        self.engine.replace_launcher(serving)
        if self.meters is not None:
            self.meters.set_engine_pid(getattr(serving, "pid", None))
        if serving.alive():
            self._on_endpoint(serving.endpoint)

    def _on_endpoint(self, endpoint: Any) -> None:
        if endpoint is None or not self._accepting:
            if self.sessions is not None:
                self.sessions.set_client(None)
            return
        if not self.use_fleet:
            from workstation.engine.chat_client import ChatClient

            self.sessions.set_client(ChatClient(self.http, endpoint))
            self.ready.set()
            log.info("chat sessions ready")
            if not self.window.panes and self.first_prompt:
                self.sessions.add("first answer", self.first_prompt, repo="engine check")
            return
        if self.fleet is None:
            self._spawn(self._build_fleet(endpoint), "fleet-start")
        else:
            update = getattr(self.fleet, "update_endpoint", None)
            if update is not None:
                update(endpoint)
            else:
                log.warning("the fleet cannot take a changed endpoint; restart the app after an engine restart")

    async def _show_sandbox(self) -> None:
        """The banner over the grid while agents' commands are not confined (the agents
        themselves ask for every command then, or refuse it headless: agent/sandbox_status.py)."""
        from workstation.agent.sandbox import SandboxPolicy
        from workstation.agent.sandbox_status import sandbox_status

        status = await sandbox_status(SandboxPolicy.from_settings(self.settings))
        log.log(logging.INFO if status.confined else logging.WARNING, "%s", status.summary())
        if self.window is not None:
            self.window.sandbox_banner.show_status(status)

    async def _build_fleet(self, endpoint: Any) -> None:
        """Fleet (after the first endpoint is known: a managed engine picks its port and
        key at start), its bridge to the window, the sessions in the store, meters."""
        from workstation.agent.sandbox import SandboxPolicy
        from workstation.fleet.agent_bridge import real_agent_factory
        from workstation.fleet.bootstrap import BootstrapOptions
        from workstation.fleet.service import Fleet
        from workstation.ui.bridge import FleetBridge
        from workstation.ui.fleet_backend import FleetCommands

        fleet = Fleet(
            data_dir=self.settings.data_dir, endpoints=[endpoint], agent_factory=real_agent_factory.from_settings(self.http, self.settings),
            http=self.http, max_generating=self.settings.fleet.max_generating,
            sandbox=SandboxPolicy.from_settings(self.settings),
            bootstrap=BootstrapOptions.from_settings(self.settings),
        )
        self.fleet = fleet
        await self._show_sandbox()  # the settings the fleet's agents run under
        self.bridge = FleetBridge(fleet, self.window)
        self.window.attach_bridge(self.bridge)
        await fleet.start()
        await self.bridge.load_existing()
        settle_garbage_collector()
        from workstation.agent.model_info import model_takes_images
        from workstation.engine.lora import served_adapters

        commands = FleetCommands(fleet, self.bridge, adapters=tuple(await served_adapters(self.http, endpoint)),
                                 takes_images=await model_takes_images(self.http, endpoint, self.settings),
                                 model=endpoint.model)
        await commands.refresh_recent()
        self.window.commands = commands
        self.ready.set()
        log.info("fleet ready: %d session(s)", len(self.window.panes))
        if self.demo is not None:
            self._spawn(self._run_demo(), "demo")
        await self._build_meters(endpoint)

    async def _run_demo(self) -> None:
        """Create and start the manifest's sessions; record them for the duration asked."""
        from workstation.fleet.demo_run import demo_specs, prepare_demo

        demo = self.demo
        assert demo is not None and self.fleet is not None
        plan = await asyncio.to_thread(prepare_demo, self.settings.data_dir, sessions=demo.sessions,
                                       manifest=demo.manifest)
        log.info("demo '%s': %d sessions in %s", plan.manifest.name, len(plan.sessions), plan.workdir)
        for spec in demo_specs(plan, headless=demo.headless):
            made = await self.fleet.create_session(spec)
            await self.fleet.start_session(made.session_id)
        if demo.record is not None and self.recorder is not None:
            from workstation.ui.recorder import RecordingOptions

            overrides: dict[str, Any] = {"duration_s": demo.duration_s}
            if demo.size_px is not None:
                overrides["size_px"] = demo.size_px
            options = RecordingOptions.from_demo(plan.manifest.recording, demo.record, **overrides)
            self.recorder.start(self.window, options, overlay_source=self._overlay)
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

    async def _build_meters(self, endpoint: Any) -> None:
        try:
            from workstation.telemetry.meters import Meters
        except ImportError:
            return
        from workstation.ui.meters.install import install_meters

        meters = Meters.from_settings(self.settings, self.http, endpoints=[endpoint])
        launcher = getattr(self.engine, "launcher", None)
        if launcher is not None and launcher.pid is not None:
            meters.set_engine_pid(launcher.pid)
        self.meters = meters
        install_meters(self.window, meters, self.fleet, settings=self.settings)
        await meters.start()

    async def _start_engine(self) -> None:
        if self.engine.external is not None:
            self._on_endpoint(self.engine.external)
            return
        try:
            await self.engine.start()
        except UserError as exc:
            self.window.engine_dock.show()
            self.window.show_error(f"engine: {str(exc).splitlines()[0]}")

    def _settings_saved(self, settings: Settings) -> None:
        self.settings = settings

    # ----- the run -----
    async def run(self) -> int:
        from workstation.engine.http import make_http_client

        self.http = make_http_client()
        try:
            await self._build_engine()
            self._build_window()
            self._spawn(self._start_engine(), "engine-start")
            await self._shutdown.wait()
        finally:
            await self.shutdown()
        return self.exit_code

    async def shutdown(self) -> None:
        """Stop accepting work → cancel agents → stop the engine → close the client."""
        self._accepting = False
        window = self.window
        if window is not None:
            for action in (window.new_action, window.start_all_action, window.approve_all_action):
                action.setEnabled(False)
            window.commands = None
        if self.recorder is not None and getattr(self.recorder.state, "value", "") in ("starting", "recording"):
            with contextlib.suppress(Exception):
                self.recorder.stop()
                await asyncio.wait_for(self.recorder.wait_async(), 15)
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=10)
        if self.sessions is not None:
            await self.sessions.aclose()
        if self.fleet is not None:
            with contextlib.suppress(Exception):
                await self.fleet.aclose()  # ends every agent; sessions keep their state
        if self.bridge is not None:
            self.bridge.close()
        if window is not None:
            await window.tasks.aclose()
        if self.meters is not None:
            with contextlib.suppress(Exception):
                await self.meters.aclose()
        if self.engine is not None:
            with contextlib.suppress(Exception):
                await self.engine.stop()
        if self.http is not None:
            await self.http.aclose()
        if window is not None:
            window.allow_close()
            window.close()


def run_gui(args: argparse.Namespace | None = None) -> int:
    """Open the window; returns the exit status."""
    from PySide6.QtWidgets import QApplication

    from workstation.ui.theme import apply_theme

    settings = load_settings()
    demo = demo_request(args, settings) if args is not None and args.func is not None else None
    if demo is not None and getattr(args, "endpoint", None):
        engine = settings.engine.model_copy(update={
            "external_url": args.endpoint, "external_api_key": args.api_key or "",
            "external_model": args.model})
        settings = settings.model_copy(update={"engine": engine})
    elif demo is not None and getattr(args, "model", None):
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
    if getattr(args, "size", None):
        try:
            w, h = (int(v) for v in args.size.lower().replace("×", "x").split("x"))
        except ValueError:
            raise UserError(f"--size must look like 1280x720, not {args.size!r}") from None
        size = (w - w % 2, h - h % 2)
    record = Path(args.record).expanduser().resolve() if getattr(args, "record", None) else None
    if record is not None and record.parent and not record.parent.is_dir():
        raise UserError(f"cannot record to {record}: folder {record.parent} does not exist")
    return DemoRequest(sessions=args.sessions, manifest=args.manifest, record=record,
                       duration_s=args.duration, size_px=size, headless=bool(args.headless))
