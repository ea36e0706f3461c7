"""The live engine: the one Qt-free owner of which engine serves.

:class:`EngineHost` holds either a managed engine (an :class:`EngineLauncher` it starts,
stops and restarts, or the one a safe switch left serving, :meth:`EngineHost.adopt`) or an
external endpoint the app does not manage. Whatever talks to the engine follows its
``endpoint_changed``: the fleet's router, the meters' scraper and engine pid, the tuner —
so after a restart (new port, new key) or a switch they all use the new engine. The window's
engine dock is one more view of it; the verbs start it and the service factory stops it.

The endpoints it knows are a registry by name with the live one as the default
(:meth:`endpoints`, :meth:`get`): the live one, the *replicas* — more managed engines of the
same model placed on GPUs or cores of their own (``core/replicas.py``; started, stopped and
restarted with the live one) — and further external endpoints the settings name (a vLLM
production-stack or llm-d router). ``endpoint_joined`` announces each one that serves
besides the live one, so the fleet routes sessions to it and the meters scrape it. A
replica that dies is not restarted here: the fleet drains it and moves its sessions
(``fleet/failover.py``). A safe switch replaces the live engine only.

Engines that share a GPU (a profile's ``engines_per_gpu``) start one after another: vLLM
sizes its KV cache by profiling the memory of the whole device, so another process
allocating on it at the same time corrupts that (or fails the start with "Error in memory
profiling"). The live engine starts first, so sessions can start as soon as it serves; the
others join as each becomes ready, the engines of other GPUs alongside. A restart with a
profile that places the engines otherwise (another engine count) builds the engines anew
from the host's ``layout``.

:class:`Launchers` is the one place a managed engine is made from the settings: the live one,
a switch's new one, the tuning lab's trial engines, the benchmarks'.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from psygnal import Signal

from workstation.config import Settings
from workstation.core.endpoints import Endpoint
from workstation.core.errors import UserError
from workstation.core.profiles import PRESETS, Profile
from workstation.core.replicas import ReplicaPlan
from workstation.engine.environment import EngineInstall
from workstation.engine.launcher import EngineLauncher, EngineState
from workstation.engine.models import ModelSpec

log = logging.getLogger(__name__)

Progress = Callable[[str], None]


def _sharing(plan: ReplicaPlan) -> dict[str, int]:
    """What a launcher is told of the engines sharing its GPU (nothing for one alone, so a
    factory that knows no sharing still makes it)."""
    if plan.engines_on_device == 1:
        return {}
    return {"engines_on_device": plan.engines_on_device, "place": plan.place}


class Launchers:
    """Makes managed engines: same settings, install and model; a profile, environment, port
    and log folder per engine. ``sequences_per_session``: the ``n`` of the requests the
    engines' clients send (the guided protocol draws several drafts at once), which a CUDA
    engine's batch is sized for."""

    def __init__(self, settings: Settings, install: EngineInstall, model: ModelSpec, *,
                 sequences_per_session: int = 1) -> None:
        self.settings = settings
        self.install = install
        self.model = model
        self.sequences_per_session = max(1, sequences_per_session)

    @classmethod
    def from_settings(cls, settings: Settings, model: str | None = None, *,
                      sequences_per_session: Callable[[ModelSpec], int] | None = None) -> Launchers:
        """The installed engine (a ``UserError`` says how to set it up) and the model by name
        (default: ``settings.engine.model``); ``sequences_per_session`` tells it for that model."""
        from workstation.engine.environment import require_engine
        from workstation.engine.models import resolve_model

        install = require_engine(settings)  # first: without an engine, that is what to say
        spec = resolve_model(settings, model)
        n = sequences_per_session(spec) if sequences_per_session is not None else 1
        return cls(settings, install, spec, sequences_per_session=n)

    def __call__(self, profile: str | Profile | None = None, env: Mapping[str, str] | None = None, *,
                 port: int | None = None, log_dir: Path | None = None, log_subdir: str = "",
                 sessions: int | None = None, gpu_memory: Callable[[], list[Any]] | None = None,
                 extra_args: list[str] | None = None, name: str | None = None,
                 add_args: tuple[str, ...] | list[str] = (), engines_on_device: int = 1,
                 place: int = 1) -> EngineLauncher:
        """An engine with ``profile`` (default: the settings'), extra ``env``, ``port`` (None:
        the settings'; 0: a free one), its log in ``log_dir`` (default: the logs folder, or
        ``log_subdir`` inside it); ``sessions``, ``gpu_memory``, ``extra_args`` and ``name`` as
        :class:`EngineLauncher` takes them (the sizing of a CUDA profile, a trial's flags, a
        replica's endpoint name); ``add_args`` come after the settings' (a replica's tensor
        parallelism); ``engines_on_device`` and ``place``: an engine sharing its GPU with
        others, and which of them it starts (its memory and session share)."""
        if log_dir is None and log_subdir:
            log_dir = self.settings.logs_dir / log_subdir
        if add_args:
            extra_args = [*(self.settings.engine.extra_args if extra_args is None else extra_args), *add_args]
        return EngineLauncher(self.settings, self.install, self.model, log_dir=log_dir, profile=profile,
                              port=port, env=dict(env or {}), sessions=sessions,
                              sequences_per_session=self.sequences_per_session, gpu_memory=gpu_memory,
                              extra_args=extra_args, name=name, engines_on_device=engines_on_device,
                              place=place)


class ManagedEngine(Protocol):
    """What the host needs of a managed engine (:class:`EngineLauncher`)."""

    profile: Profile
    engine: EngineInstall
    model: ModelSpec
    state: Any
    state_changed: Any
    log_line: Any
    log_tail: Any
    extra_env: dict[str, str]
    name: str
    """Its endpoint's name."""

    @property
    def endpoint(self) -> Endpoint: ...

    @property
    def pid(self) -> int | None: ...

    def alive(self) -> bool: ...

    async def start(self, progress: Progress | None = None) -> Endpoint: ...

    async def stop(self) -> None: ...


LauncherFactory = Callable[..., ManagedEngine]
"""``factory(profile=None, env=None, *, port=None, log_subdir="")``: a new managed engine
(:class:`Launchers`, or a test's stand-in); an engine sharing its GPU gets
``engines_on_device`` and ``place`` too."""

Layout = Callable[[Any], Sequence[ReplicaPlan]]
"""``layout(profile)``: where each managed engine runs under that profile (a name or a
:class:`Profile`), first the live one; blocking (it may read the GPUs and the saved
profiles), run in a worker thread."""


class EngineHost:
    """Start / stop / restart the managed engine, adopt the one a switch left serving, or hold
    an external endpoint; ``endpoint_changed`` whenever the live endpoint changes."""

    endpoint_changed = Signal(object)
    """The live endpoint, or None while the engine does not serve (emitted on change only)."""
    state_changed = Signal(object, str)
    """The live engine's ``EngineState`` and a detail line (``"external"`` for an endpoint the
    app does not manage)."""
    log_line = Signal(str)
    launcher_changed = Signal(object)
    """Another managed engine serves now (a switch): its pid, profile and log are new."""
    endpoint_joined = Signal(object)
    """An endpoint serves besides the live one: a replica that became ready (or came back
    on a new port and key), or an extra external endpoint."""

    def __init__(self, *, launchers: LauncherFactory | None = None, external: Endpoint | None = None,
                 profile: str | Profile | None = None, replicas: Sequence[ReplicaPlan] = (),
                 extra: Sequence[Endpoint] = (), layout: Layout | None = None) -> None:
        """``replicas``: where each managed engine runs (the first is the live one; more than
        one plan makes replicas); ``extra``: external endpoints served besides; ``layout``:
        the plans under another profile (a restart with a profile that places its engines
        otherwise rebuilds them; None: the plans stay)."""
        if (launchers is None) == (external is None):
            raise ValueError("an engine host holds a managed engine or an external endpoint")
        self.launchers = launchers
        self.external = external
        self.extra = tuple(extra)
        self.detail = ""
        self._layout = layout
        self._launcher: ManagedEngine | None = None
        self._published: Endpoint | None = None
        self._replicas: list[ManagedEngine] = []
        self._plans: tuple[ReplicaPlan, ...] = tuple(replicas)
        self._replica_plans: dict[int, ReplicaPlan] = {}
        self._replica_handlers: list[tuple[ManagedEngine, Callable[..., None]]] = []
        if launchers is not None:
            self._take(*self._make(profile, self._plans))

    def _make(self, profile: str | Profile | None, plans: Sequence[ReplicaPlan]
              ) -> tuple[ManagedEngine, list[tuple[ManagedEngine, ReplicaPlan]]]:
        """The live engine and its replicas for ``plans`` (the first is the live one), made,
        not started; names checked."""
        launchers = self.launchers
        assert launchers is not None
        first = plans[0] if plans else None
        if first is None or (not first.env and not first.args and first.engines_on_device == 1):
            live = launchers(profile)
        else:
            live = launchers(profile, first.env, add_args=first.args, **_sharing(first))
        base = getattr(live, "name", "managed")
        replicas = [(launchers(profile, plan.env, port=0, log_subdir=f"engine{plan.suffix}", add_args=plan.args,
                               name=f"{base}{plan.suffix}", **_sharing(plan)), plan) for plan in plans[1:]]
        names = [base, *(getattr(r, "name", "replica") for r, _ in replicas), *(e.name for e in self.extra)]
        if len(set(names)) != len(names):
            raise UserError(f"engine endpoint names must be unique: {', '.join(names)}")
        return live, replicas

    def _take(self, live: ManagedEngine, replicas: list[tuple[ManagedEngine, ReplicaPlan]]) -> None:
        self._wire(live)
        for replica, plan in replicas:
            handler = functools.partial(self._on_replica_state, replica)
            replica.state_changed.connect(handler)
            self._replicas.append(replica)
            self._replica_plans[id(replica)] = plan
            self._replica_handlers.append((replica, handler))

    @property
    def plans(self) -> tuple[ReplicaPlan, ...]:
        """Where each managed engine runs now, the live one first (empty: one engine as vLLM
        places it)."""
        return self._plans

    @property
    def shares_devices(self) -> bool:
        """Whether some of these engines share a GPU (a profile's ``engines_per_gpu``)."""
        return any(plan.engines_on_device > 1 for plan in self._plans)

    async def plans_for(self, profile: str | Profile | None) -> tuple[ReplicaPlan, ...]:
        """Where the engines would run under ``profile`` (the host's ``layout``; without one,
        or without a profile, where they run now). A placement that cannot work is a
        ``UserError``."""
        if self._layout is None or profile is None:
            return self._plans
        return tuple(await asyncio.to_thread(self._layout, profile))

    # ----- what serves -----
    @property
    def managed(self) -> bool:
        return self.launchers is not None

    @property
    def launcher(self) -> ManagedEngine | None:
        """The managed engine serving now (None for an external endpoint)."""
        return self._launcher

    @property
    def endpoint(self) -> Endpoint | None:
        """The live endpoint: the external one, or the managed engine's while it is ready."""
        if self.external is not None:
            return self.external
        launcher = self._launcher
        if launcher is not None and launcher.state is EngineState.READY:
            return launcher.endpoint
        return None

    @property
    def pid(self) -> int | None:
        """The managed engine's process (its tree is marked on the GPU cards); None otherwise."""
        return self._launcher.pid if self._launcher is not None else None

    @property
    def replicas(self) -> tuple[ManagedEngine, ...]:
        """The managed engines besides the live one."""
        return tuple(self._replicas)

    def endpoints(self) -> tuple[Endpoint, ...]:
        """The endpoints this host serves now: the live one first, then the replicas that are
        ready, then the extra external ones."""
        live = self.endpoint
        ready = tuple(r.endpoint for r in self._replicas if r.state is EngineState.READY)
        return ((live,) if live is not None else ()) + ready + self.extra

    def names(self) -> list[str]:
        """The name of every endpoint this host is set up to serve, serving or not."""
        first = self.external.name if self.external is not None else getattr(self._launcher, "name", "managed")
        return [first, *(getattr(r, "name", "replica") for r in self._replicas), *(e.name for e in self.extra)]

    def get(self, name: str | None = None) -> Endpoint:
        """The endpoint of that name (default: the live one), or a ``UserError``."""
        for endpoint in self.endpoints():
            if name is None or endpoint.name == name:
                return endpoint
        raise UserError("the engine is not serving" if name is None else f"no endpoint named {name!r}")

    # ----- control -----
    async def start(self, profile: str | Profile | None = None, progress: Progress | None = None) -> Endpoint:
        """Start the managed engines (with ``profile``, when given: where it places them
        otherwise, they are made anew first); the external endpoint as is."""
        if self.external is None and profile is not None and not self._running():
            self._relayout(profile, await self.plans_for(profile), progress)
        return await self._start(profile, progress)

    async def _start(self, profile: str | Profile | None, progress: Progress | None) -> Endpoint:
        if self.external is not None:
            self._publish()
            self._announce_extra()
            return self.external
        launcher = self._require_launcher()
        self._set_profile(profile)
        try:
            await launcher.start(progress)
        except UserError as exc:
            self.detail = str(exc).split("\n", 1)[0]
            self.state_changed.emit(launcher.state, self.detail)
            raise
        finally:
            self._publish()
        await self._start_replicas(progress)
        self._announce_extra()
        return launcher.endpoint

    def _running(self) -> bool:
        return any(engine.alive() for engine in (self._launcher, *self._replicas) if engine is not None)

    async def _start_replicas(self, progress: Progress | None) -> None:
        """Start the replicas: those of other GPUs together, those sharing a GPU one after
        another (the live engine's GPU-mates after it); one that fails is logged and left
        out (the others serve)."""
        for replica in self._replicas:
            replica.profile = self._require_launcher().profile
        chains: dict[object, list[ManagedEngine]] = {}  # the engines of one GPU group start in turn
        for replica in self._replicas:
            plan = self._replica_plans[id(replica)]
            key = ("gpus", plan.gpus) if plan.engines_on_device > 1 and plan.gpus else ("alone", id(replica))
            chains.setdefault(key, []).append(replica)
        await asyncio.gather(*(self._start_in_turn(chain, progress) for chain in chains.values()))

    async def _start_in_turn(self, chain: Sequence[ManagedEngine], progress: Progress | None) -> None:
        for replica in chain:
            try:
                await replica.start(progress)
            except Exception as exc:  # noqa: BLE001 - the others serve; the fleet routes around it
                log.warning("engine replica %s did not start: %s", getattr(replica, "name", "?"), exc)
                if progress is not None:
                    progress(f"replica {getattr(replica, 'name', '?')} did not start: {str(exc).splitlines()[0]}")

    def _announce_extra(self) -> None:
        for endpoint in self.extra:
            self.endpoint_joined.emit(endpoint)

    def _on_replica_state(self, replica: ManagedEngine, state: Any, _detail: str) -> None:
        if state is EngineState.READY:
            self.endpoint_joined.emit(replica.endpoint)

    async def stop(self) -> None:
        for replica in self._replicas:
            try:
                await replica.stop()
            except Exception:  # noqa: BLE001 - the live engine must stop anyway
                log.exception("stopping engine replica %s failed", getattr(replica, "name", "?"))
        if self._launcher is not None:
            try:
                await self._launcher.stop()
            finally:
                self._publish()

    async def restart(self, profile: str | Profile | None = None, progress: Progress | None = None) -> Endpoint:
        """Stop every engine and start them again (with ``profile``, when given). Where that
        profile places the engines otherwise (another ``engines_per_gpu``), they are made
        anew for its plans: the live one keeps its name, engines no longer planned stay
        stopped (the fleet moves their sessions), new ones join when ready."""
        if self.external is not None:
            return self.external
        # planned before anything stops: a placement that cannot work stops nothing
        plans = await self.plans_for(profile)
        made = self._make(profile, plans) if plans != self._plans else None
        await self.stop()
        if made is not None:
            self._rebuild(plans, made, progress)
        return await self._start(profile, progress)

    def _relayout(self, profile: str | Profile | None, plans: Sequence[ReplicaPlan],
                  progress: Progress | None) -> None:
        if plans != self._plans:
            self._rebuild(plans, self._make(profile, plans), progress)

    def _rebuild(self, plans: Sequence[ReplicaPlan],
                 made: tuple[ManagedEngine, list[tuple[ManagedEngine, ReplicaPlan]]],
                 progress: Progress | None) -> None:
        """Serve with the engines ``made`` for ``plans`` from now on (the old ones are stopped)."""
        old_names = self.names()
        for replica, handler in self._replica_handlers:
            replica.state_changed.disconnect(handler)
        self._replicas, self._replica_plans, self._replica_handlers = [], {}, []
        self._unwire()
        self._plans = tuple(plans)
        self._take(*made)
        engines = [getattr(self._launcher, "name", "managed"), *(getattr(r, "name", "replica") for r in self._replicas)]
        log.info("engines: %s now (were %s)", ", ".join(engines), ", ".join(old_names))
        if progress is not None:
            where = [f"{name} on {plan.where}" for name, plan in zip(engines, self._plans)] or engines
            progress(f"engines now: {', '.join(where)}")
        launcher = self._launcher
        assert launcher is not None
        self.launcher_changed.emit(launcher)

    # ----- a switch -----
    def new_launcher(self, profile: str | Profile | None, env: Mapping[str, str] | None = None) -> ManagedEngine:
        """A second managed engine beside the live one (a switch's new engine): a free port,
        its log in the logs folder's ``switch``."""
        if self.launchers is None:
            raise UserError("only an engine the app started can be switched")
        return self.launchers(profile, env, port=0, log_subdir="switch")

    def retarget(self, endpoint: Endpoint) -> None:
        """Point everything that follows the engine at ``endpoint`` (a switch moves the
        sessions before the old engine stops, and back on a roll-back)."""
        self._publish(endpoint)

    def adopt(self, launcher: ManagedEngine) -> None:
        """A switch (or its roll-back by restart) left ``launcher`` serving: follow it (state,
        log) and make it the live engine."""
        if launcher is self._launcher:
            return
        self._unwire()
        self._wire(launcher)
        self.detail = ""
        log.info("engine: %s serves now", launcher.profile.name)
        self.launcher_changed.emit(launcher)
        self.state_changed.emit(launcher.state, "")
        self._publish()

    # ----- internals -----
    def _require_launcher(self) -> ManagedEngine:
        if self._launcher is None:
            raise UserError("no engine is configured")
        return self._launcher

    def _set_profile(self, profile: str | Profile | None) -> None:
        launcher = self._require_launcher()
        if profile is None:
            return
        if isinstance(profile, Profile):
            launcher.profile = profile
            return
        if profile == launcher.profile.name:
            return
        if profile not in PRESETS:
            raise UserError(f"unknown engine profile '{profile}'")
        launcher.profile = PRESETS[profile]

    def _wire(self, launcher: ManagedEngine) -> None:
        self._launcher = launcher
        launcher.state_changed.connect(self._on_launcher_state)
        launcher.log_line.connect(self._on_log_line)

    def _unwire(self) -> None:
        old = self._launcher
        if old is None:
            return
        old.state_changed.disconnect(self._on_launcher_state)
        old.log_line.disconnect(self._on_log_line)

    def _on_log_line(self, line: str) -> None:
        self.log_line.emit(line)

    def _on_launcher_state(self, state: Any, detail: str) -> None:
        self.detail = detail
        self.state_changed.emit(state, detail)
        self._publish()

    def _publish(self, endpoint: Endpoint | None | object = ...) -> None:
        live = self.endpoint if endpoint is ... else endpoint
        if live != self._published:
            self._published = live  # type: ignore[assignment]
            self.endpoint_changed.emit(live)
