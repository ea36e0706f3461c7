"""The one place that builds the app's services from the settings — for the window, every
verb and the benchmarks — so a setting (the sandbox!) is honoured everywhere or nowhere.

::

    async with Services(settings) as services:           # shared HTTP client, staged close
        engine = await services.engine()                  # the live engine's one owner
        endpoint = await engine.start(progress=say)       # stopped by the staged close
        fleet = services.fleet()                          # follows the engine, agents sandboxed
        meters = services.meters(streams=fleet.streams)   # scrapes the live engine, marks its pid
        tuner = services.screening_tuner(lab, install, model, baseline, ...)  # trial engines beside it
        ...

:meth:`Services.aclose` shuts down what it built in stages — stop accepting work (fleets end
their agents) → the tuners' trial engines → meters → the engines' scrapers → the engine → the stream worker → the HTTP
client — and logs every stage that fails instead of hiding it. Whatever follows the live
engine is wired here: after a restart or a safe switch the fleet's router and the meters'
scraper and engine pid use the new engine. Every engine's ``/metrics`` is scraped once
(:meth:`engine_scrapers`) for every reader: the meters chart it, each fleet's adaptive
admission steers by it. The paid API the cost panel compares against is the one sessions'
costs and budgets use.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx

from workstation.agent.sandbox import SandboxPolicy
from workstation.config import Settings
from workstation.core.admission_limit import AdmissionTarget
from workstation.core.cost import ApiPrice
from workstation.core.endpoints import Endpoint
from workstation.core.engine_sizing import GpuMemory
from workstation.core.errors import UserError
from workstation.core.profiles import PRESETS, Profile, engine_count
from workstation.core.replicas import PlacementError, ReplicaPlan, plan_replicas
from workstation.core.requests import OpenRequests
from workstation.core.traffic import TrafficShape
from workstation.engine.chat_client import ChatClient
from workstation.engine.environment import EngineInstall
from workstation.engine.host import EngineHost, Launchers
from workstation.engine.http import make_http_client
from workstation.engine.models import ModelSpec
from workstation.engine.stream_worker import StreamWorker
from workstation.fleet import Fleet, real_agent_factory
from workstation.fleet.agent_bridge import AgentFactory
from workstation.fleet.bootstrap import BootstrapOptions
from workstation.telemetry.meters import Meters
from workstation.telemetry.scrapers import ScraperSet
from workstation.tuning.autotune import MIN_REPEATS, Autotuner, Candidate
from workstation.tuning.checks import ModelTraits
from workstation.tuning.live_switch import LiveSwitch, plan_beside
from workstation.tuning.placement import Placement
from workstation.tuning.results import Slo, Workload
from workstation.tuning.screening import ScreeningTuner, SideBySide
from workstation.tuning.store import TuningStore

log = logging.getLogger(__name__)

EndpointFollower = Callable[[Endpoint], Any]


class Services:
    def __init__(self, settings: Settings, *, http: httpx.AsyncClient | None = None,
                 engine: EngineHost | None = None) -> None:
        """``http``: a client made elsewhere (kept open on close); ``engine``: an engine owner
        made elsewhere (a test's stand-in)."""
        self.settings = settings
        self._http = http
        self._owns_http = http is None
        self._engine = engine
        self._launchers: dict[str | None, Launchers] = {}
        self._gpu_indices: list[int] | None = None
        """The GPUs NVML lists, read once for the engines' placement."""
        self._fleets: list[Fleet] = []
        self._meters: list[Meters] = []
        self._tuners: list[ScreeningTuner] = []
        self._followers: list[EndpointFollower] = []
        self._streams: StreamWorker | None = None
        self.open_requests = OpenRequests()
        """The app's one count of model requests open per endpoint: every chat client made
        here shares it, and a safe switch drains the old engine until nothing is open to it."""
        self._scrapers: ScraperSet | None = None
        self._following: list[Fleet] = []
        """Fleets on the engine's endpoints (they follow restarts, switches and replicas)."""
        self._api_price: ApiPrice | None | object = ...  # ...: the settings' until the panel picks one
        if engine is not None:
            self._follow_engine(engine)

    async def __aenter__(self) -> Services:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.aclose()

    # ----- the shared client -----
    @property
    def http(self) -> httpx.AsyncClient:
        """The one HTTP client every stream, scrape and health check shares."""
        if self._http is None:
            self._http = make_http_client()
        return self._http

    @property
    def streams(self) -> StreamWorker | None:
        """The one thread that reads every chat stream (``engine.stream_batch_ms``; None when
        that is 0: streams are then read over the shared client on the loop)."""
        batch_ms = self.settings.engine.stream_batch_ms
        if batch_ms <= 0:
            return None
        if self._streams is None:
            self._streams = StreamWorker(batch_s=batch_ms / 1000.0)
        return self._streams

    def chat_client(self, endpoint: Endpoint | None = None, *, model: str | None = None) -> ChatClient:
        """A chat client on ``endpoint`` (default: the live engine's) over the shared client;
        ``model``: another model the engine serves (a LoRA adapter)."""
        if endpoint is None:
            endpoint = self._require_engine().get()
        client = ChatClient(self.http, endpoint, model=model, streams=self.streams)
        client.open_requests = self.open_requests
        return client

    # ----- the engine -----
    def launchers(self, *, model: str | None = None) -> Launchers:
        """Makes managed engines of the installed vLLM with ``model`` (default: the settings')."""
        made = self._launchers.get(model)
        if made is None:
            from workstation.tuning.loadgen import agent_sequences_per_request

            # a CUDA engine's batch holds every draft of the agents' guided draws (n=6 each)
            made = self._launchers[model] = Launchers.from_settings(
                self.settings, model, sequences_per_session=lambda spec: agent_sequences_per_request(self.settings, spec))
        return made

    async def engine(self, *, url: str | None = None, api_key: str = "", model: str | None = None,
                     profile: str | None = None) -> EngineHost:
        """The live engine's owner, made once: the endpoint at ``url`` (or the settings'
        external one), else the managed engines with ``model`` and ``profile`` (a preset or
        one of the user's saved profiles), placed as :meth:`engine_layout` says."""
        if self._engine is not None:
            return self._engine
        from workstation.engine.acquire import external_endpoint

        es = self.settings.engine
        url = url or es.external_url
        extra = [replace(await external_endpoint(e.url, e.api_key, e.model), name=e.name) for e in es.endpoints]
        if url:
            key = api_key or es.external_api_key or ""
            host = EngineHost(external=await external_endpoint(url, key, model or es.external_model), extra=extra)
        else:
            launchers = self.launchers(model=model)
            platform = launchers.install.platform
            chosen = await asyncio.to_thread(self.engine_profile, profile or es.profile, platform)
            layout = functools.partial(self.engine_layout, platform)
            host = EngineHost(launchers=launchers, profile=chosen, extra=extra,
                              replicas=await asyncio.to_thread(layout, chosen), layout=layout)
        self._engine = host
        self._follow_engine(host)
        return host

    def engine_profile(self, name: str | Profile, platform: str) -> str | Profile:
        """The profile a managed engine runs: a preset by its name (the launcher knows the
        presets), one of the user's saved profiles folded with its ancestry for ``platform``
        (what the Tuning dock's switch runs too); an unknown name is a ``UserError``. Blocking
        (reads the saved profiles)."""
        if isinstance(name, Profile) or name in PRESETS:
            return name
        from workstation.tuning.store import TuningStore

        profile, _ = TuningStore(self.settings.data_dir).resolve(name, platform=platform)
        return profile

    def engine_layout(self, platform: str, profile: str | Profile | None) -> list[ReplicaPlan]:
        """Where each managed engine runs under ``profile``: ``engine.replicas`` GPU groups of
        ``engine.gpus_per_engine`` GPUs, each with the profile's ``engines_per_gpu`` engines
        (GPU platforms only: the CPU engine shares out cores), from the GPUs NVML lists (read
        once) or the CPU count; empty for one engine as vLLM places it. Blocking (NVML, the
        saved profiles): the engine host calls it in a worker thread."""
        es = self.settings.engine
        engines = self._engines_per_gpu(profile, platform)
        if es.replicas == 1 and es.gpus_per_engine == 1 and engines == 1:
            return []
        gpus: list[int] = []
        if platform != "cpu":
            if self._gpu_indices is None:
                from workstation.engine.gpu_memory import read_gpu_memory

                self._gpu_indices = [g.index for g in read_gpu_memory()]
            gpus = self._gpu_indices
        try:
            return plan_replicas(platform, replicas=es.replicas, gpus_per_engine=es.gpus_per_engine,
                                 gpu_indices=gpus, cpu_count=os.cpu_count() or 1, engines_per_gpu=engines)
        except PlacementError as exc:
            hint = "lower engine.replicas or engine.gpus_per_engine"
            if engines > 1:
                hint = f"choose a profile with one engine on each GPU, or {hint}"
            raise UserError(str(exc), hint=hint) from None

    def _engines_per_gpu(self, profile: str | Profile | None, platform: str) -> int:
        """The profile's ``engines_per_gpu``, through its ancestry (presets and saved profiles)."""
        if platform == "cpu":
            return 1
        chosen = profile if profile is not None else self.settings.engine.profile
        if isinstance(chosen, str) and chosen in PRESETS:
            return engine_count(PRESETS[chosen], PRESETS, platform=platform)
        if isinstance(chosen, Profile) and (chosen.parent is None or chosen.parent in PRESETS):
            return engine_count(chosen, {**PRESETS, chosen.name: chosen}, platform=platform)
        from workstation.tuning.store import TuningStore

        folded, _ = TuningStore(self.settings.data_dir).resolve(chosen, platform=platform)
        return engine_count(folded, PRESETS, platform=platform)

    def follow_endpoint(self, follower: EndpointFollower) -> None:
        """Call ``follower(endpoint)`` whenever the live engine's endpoint changes (a restart,
        a switch); never with None."""
        self._followers.append(follower)

    def _follow_engine(self, host: EngineHost) -> None:
        host.endpoint_changed.connect(self._on_endpoint_changed)
        host.launcher_changed.connect(self._on_launcher_changed)
        host.endpoint_joined.connect(self._on_endpoint_joined)

    def _on_endpoint_joined(self, endpoint: Endpoint) -> None:
        """Another endpoint serves (a replica, an extra endpoint): fleets that follow the
        engine route sessions to it, and it is scraped like the live one."""
        for fleet in self._following:
            fleet.update_endpoint(endpoint)
        if self._scrapers is not None:
            self._scrapers.add(endpoint)

    def _on_endpoint_changed(self, endpoint: Endpoint | None) -> None:
        if endpoint is None:
            return
        for follower in list(self._followers):
            follower(endpoint)
        self._on_launcher_changed(None)

    def _on_launcher_changed(self, _launcher: object) -> None:
        pid = self._engine.pid if self._engine is not None else None
        for meters in self._meters:
            meters.set_engine_pid(pid)

    # ----- the engines' /metrics -----
    def engine_scrapers(self, *, interval_s: float | None = None) -> ScraperSet:
        """The one set of ``/metrics`` scrapers every reader shares (the meters, each fleet's
        admission), following the live engine; made once."""
        if self._scrapers is None:
            self._scrapers = ScraperSet(self.http, interval_s=interval_s or self.settings.telemetry.metrics_interval_s)
            for endpoint in self._engine.endpoints() if self._engine is not None else ():
                self._scrapers.add(endpoint)
            self.follow_endpoint(self._scrapers.follow)
        return self._scrapers

    def api_price(self) -> ApiPrice | None:
        """The paid API that costs are counted at: the cost panel's choice, else the settings'."""
        if self._api_price is ...:
            from workstation.telemetry.prices import load_price_table

            name = self.settings.telemetry.api_price_model
            self._api_price = load_price_table(self.settings.data_dir).find(name) if name else None
        return self._api_price  # type: ignore[return-value]

    def _on_api_price(self, price: ApiPrice | None) -> None:
        self._api_price = price
        for fleet in self._fleets:
            fleet.scheduling.set_price(price)

    def _require_engine(self) -> EngineHost:
        if self._engine is None:
            raise UserError("no engine yet", hint="await services.engine() first")
        return self._engine

    # ----- sessions -----
    def sandbox_policy(self) -> SandboxPolicy:
        """How agents' commands are confined (``settings.sandbox``), for an agent made by hand."""
        return SandboxPolicy.from_settings(self.settings)

    def agent_factory(self, **kwargs: Any) -> real_agent_factory:
        """Agents over the shared client whose commands run under ``settings.sandbox``."""
        kwargs.setdefault("streams", self.streams)
        kwargs.setdefault("open_requests", self.open_requests)
        return real_agent_factory.from_settings(self.http, self.settings, **kwargs)

    def fleet(self, *, endpoints: Sequence[Endpoint] | None = None, data_dir: Path | None = None,
              agent_factory: AgentFactory | None = None, max_generating: int | None = None,
              resume_on_start: bool = True, store_path: Path | None = None,
              engine_poll_s: float = 2.0, sandbox: SandboxPolicy | None = None) -> Fleet:
        """A fleet on ``endpoints`` (default: the live engine's, followed across restarts and
        switches) with its store and worktrees under ``data_dir`` (default: the settings');
        its agents, worktree set-ups, dev servers and merges run under ``settings.sandbox`` (or
        ``sandbox``, a benchmark's own), its worktrees bootstrap and get ports as ``settings`` say;
        its admission reads the shared scrapers of its endpoints (``settings.fleet.admission``,
        ``ttft_target_s``) and its sessions' costs use :meth:`api_price`."""
        follow = endpoints is None
        if endpoints is None:
            endpoints = self._require_engine().endpoints()
        fs = self.settings.fleet
        fleet = Fleet(
            data_dir=data_dir or self.settings.data_dir, endpoints=list(endpoints),
            agent_factory=agent_factory or self.agent_factory(), http=self.http,
            max_generating=max_generating or fs.max_generating,
            resume_on_start=resume_on_start, store_path=store_path, engine_poll_s=engine_poll_s,
            sandbox=sandbox or self.sandbox_policy(), bootstrap=BootstrapOptions.from_settings(self.settings),
            adaptive=fs.admission == "adaptive", target=AdmissionTarget(ttft_p95_s=fs.ttft_target_s),
            price=self.api_price(),
        )
        if follow:
            self.follow_endpoint(fleet.update_endpoint)
            self._following.append(fleet)
        scrapers = self.engine_scrapers()
        for endpoint in endpoints:
            scrapers.add(endpoint)
        scrapers.sampled.connect(fleet.scheduling.observe_engine)
        scrapers.start_soon()
        self._fleets.append(fleet)
        return fleet

    # ----- meters and tuning -----
    def meters(self, *, endpoints: Sequence[Endpoint] | None = None, **kwargs: Any) -> Meters:
        """Every meter from the settings; the engine meters scrape ``endpoints`` (default: the
        live engine's, followed across restarts and switches, its pid marked on the GPU cards)."""
        follow = endpoints is None and self._engine is not None
        if follow:  # the shared scrapers follow the live engine themselves
            scrapers = self.engine_scrapers(interval_s=kwargs.get("metrics_interval_s"))
            meters = Meters.from_settings(self.settings, self.http, scrapers=scrapers, **kwargs)
            meters.set_engine_pid(self._engine.pid if self._engine is not None else None)
        else:
            meters = Meters.from_settings(self.settings, self.http, endpoints=list(endpoints or ()), **kwargs)
        if self._api_price is not ...:
            meters.set_api_price(self._api_price.key if self._api_price is not None else None)  # type: ignore[union-attr]
        meters.api_price_changed.connect(self._on_api_price)
        self._meters.append(meters)
        return meters

    def live_switch(self, *, plan: Callable[[], Placement] | None = None) -> LiveSwitch | None:
        """The safe switch of the live engine; None when it is external (nothing to switch)."""
        host = self._require_engine()
        if not host.managed:
            return None
        return LiveSwitch(host, self.http, plan=plan or self._plan_beside, open_requests=self.open_requests.on)

    def _plan_beside(self) -> Placement:
        live = self._require_engine().launcher
        if live is None:
            raise UserError("the engine is not running")
        return plan_beside(live.engine.platform, dict(live.extra_env))

    # ----- tuners -----
    def autotuner(self, trial_settings: Settings, engine: EngineInstall, model: ModelSpec, baseline: Profile,
                  workload: Workload, *, candidates: Sequence[Candidate], traits: ModelTraits,
                  help_flags: set[str] | None, budget_s: float, log_dir: Path, shape: TrafficShape | None = None,
                  repeats: int = MIN_REPEATS, store: TuningStore | None = None, slo: Slo | None = None,
                  env: Mapping[str, str] | None = None) -> Autotuner:
        """The tuner that tries one change after another from ``baseline`` over the shared
        client. Its trial engines start with ``trial_settings`` (the lab's, as a rule
        :func:`~workstation.tuning.bench.tuning_settings`: a fixed KV cache and a free port, so
        that no trial takes the live engine's port), one at a time, each stopped after its
        measurement; their logs go under ``log_dir``."""
        return Autotuner(trial_settings, engine, model, self.http, baseline, workload, shape=shape, traits=traits,
                         help_flags=help_flags, candidates=candidates, budget_s=budget_s, repeats=repeats,
                         store=store, slo=slo, log_dir=log_dir, env=dict(env or {}))

    def screening_tuner(self, trial_settings: Settings, engine: EngineInstall, model: ModelSpec, baseline: Profile,
                        *, candidates: Sequence[Candidate], traits: ModelTraits, help_flags: set[str] | None,
                        side: SideBySide, log_dir: Path, references: Sequence[Profile] = (), repeats: int = 3,
                        store: TuningStore | None = None, slo: Slo | None = None,
                        gpu_memory: Callable[[], list[GpuMemory]] | None = None,
                        sessions: int | None = None, sequences_per_session: int = 1,
                        env: dict[str, str] | None = None, agent_check: bool = False) -> ScreeningTuner:
        """The tuner that screens every change at once, one engine each beside the baseline
        (``side``: their share of the GPU), over the shared client; engines start with
        ``trial_settings`` and are sized for ``sessions`` of ``sequences_per_session``. Whatever of its engines still runs
        when the services close is stopped then (after the fleets, before the meters). ``env``:
        the trial engines' environment (the user's ``--env``); ``agent_check``: a kept change
        must also pass real agent sessions on a scratch repository (fleets of these services)."""
        tuner = ScreeningTuner(trial_settings, engine, model, self.http, baseline, traits=traits,
                               help_flags=help_flags, candidates=candidates, side=side, references=references,
                               repeats=repeats, store=store, slo=slo, log_dir=log_dir, gpu_memory=gpu_memory,
                               sessions=sessions, sequences_per_session=sequences_per_session, env=env)
        if agent_check:
            from workstation.tuning.agent_check import run_agent_check

            tuner.agent_check = functools.partial(run_agent_check, self.fleet)
        self._tuners.append(tuner)
        return tuner

    # ----- shut-down -----
    async def close_sessions(self) -> None:
        """The first stage of the shut-down alone: every fleet ends its agents (sessions keep
        their state, so the next start resumes them)."""
        fleets, self._fleets = self._fleets, []
        self._following.clear()
        for fleet in reversed(fleets):
            if self._scrapers is not None:
                self._scrapers.sampled.disconnect(fleet.scheduling.observe_engine)
            with shutdown_stage("closing the fleet"):
                await fleet.aclose()

    async def aclose(self) -> None:
        """Stop accepting work (every fleet ends its agents; sessions keep their state) → the
        guided drafts' check processes → the tuners' trial engines → the meters → the engine → the HTTP client. A stage that fails is
        logged and the next runs."""
        await self.close_sessions()
        with shutdown_stage("stopping the guided drafts' check processes"):
            from workstation.agent.guided.checks import close_check_pool

            await asyncio.to_thread(close_check_pool)  # the agents are cancelled: nothing checks now
        tuners, self._tuners = self._tuners, []
        for tuner in reversed(tuners):
            with shutdown_stage("stopping the tuner's trial engines"):
                await tuner.close()
        for meters in reversed(self._meters):
            with shutdown_stage("closing the meters"):
                await meters.aclose()
        self._meters.clear()
        if self._scrapers is not None:
            with shutdown_stage("closing the engines' scrapers"):
                await self._scrapers.aclose()
        if self._engine is not None and self._engine.managed:
            with shutdown_stage("stopping the engine"):
                await self._engine.stop()
        if self._streams is not None:
            with shutdown_stage("stopping the stream worker"):
                await asyncio.to_thread(self._streams.close)
            self._streams = None
        if self._http is not None and self._owns_http:
            with shutdown_stage("closing the HTTP client"):
                await self._http.aclose()
            self._http = None


@contextlib.contextmanager
def shutdown_stage(what: str) -> Iterator[None]:
    """One stage of a staged shut-down (here and in the window's, ``app.py``): a failure is
    logged with its traceback as ``shutdown: <what> failed``, and the next stage still runs."""
    try:
        yield
    except Exception:  # noqa: BLE001 - shut-down goes on; the failure is in the log
        log.exception("shutdown: %s failed", what)


@contextlib.asynccontextmanager
async def served_endpoint(settings: Settings, url: str | None = None, api_key: str = "", model: str | None = None,
                          *, say: Callable[[str], None] | None = None) -> AsyncIterator[tuple[Services, Endpoint]]:
    """What a benchmark runs against, and the services it runs with: the endpoint at ``url``
    where one is given, else the managed engine serving ``model`` (default the embedded
    SmolLM2), started here; when the block ends the services close (what the run built on
    them, then that engine)."""
    async with Services(settings) as services:
        if url:
            from workstation.engine.acquire import external_endpoint

            endpoint = await external_endpoint(url, api_key, model)
        else:
            engine = await services.engine(model=model or "smollm2")
            endpoint = await engine.start(progress=say)
        yield services, endpoint
