"""Typed settings in one place (pydantic-settings).

Every field has a docstring, every field can be overridden from the environment
(``WORKSTATION_<FIELD>``, nested with ``__``), and the settings carry a schema
version. Everything the app writes lives under :attr:`Settings.data_dir`, so
``WORKSTATION_DATA_DIR=/some/dir`` starts a run from nothing.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any, Literal

import platformdirs
from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError
from pydantic_settings import (
    BaseSettings,
    JsonConfigSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from workstation.core.errors import UserError

SCHEMA_VERSION = 1
SETTINGS_FILE_NAME = "settings.json"
APP_NAME = "workstation"


def default_data_dir() -> Path:
    """Where the app writes when nothing says otherwise (XDG data dir)."""
    env = os.environ.get("WORKSTATION_DATA_DIR")
    if env:
        return Path(env).expanduser()
    return Path(platformdirs.user_data_dir(APP_NAME, appauthor=False))


class EndpointSettings(BaseModel):
    """An OpenAI-compatible endpoint sessions are spread over besides the engine (a vLLM
    production-stack or llm-d router, another machine's vLLM)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    """Its name in the window and in each session's record (unique)."""
    url: str
    """Its root URL (``/v1`` may be given or not)."""
    api_key: str = ""
    model: str | None = None
    """Model to request (default: the first it lists)."""


class EngineSettings(BaseSettings):
    """How the app finds and launches the vLLM engine."""

    model_config = SettingsConfigDict(extra="ignore")

    python: Path | None = None
    """Python of an existing vLLM install to use instead of the managed environment."""
    model: str = "smollm2"
    """Model to serve: ``smollm2`` (embedded default), ``tiny`` (random weights, tests),
    a local Hugging Face directory, or a model id vLLM downloads itself."""
    profile: str = "default"
    """Name of the tuning profile whose flags the engine starts with."""
    host: str = "127.0.0.1"
    """Address the managed engine binds to. Loopback unless you know why not."""
    port: int = 0
    """Port of the managed engine; 0 picks a free one at each start."""
    start_timeout_s: float = 300.0
    """How long to wait for ``/health`` before giving up on a start."""
    stop_grace_s: float = 10.0
    """Seconds between SIGTERM and SIGKILL when stopping the engine."""
    kv_cache_gib: float | None = None
    """KV cache size for the CPU engine; None sizes it from free memory."""
    stream_batch_ms: float = 33.0
    """How often the stream worker reads the streams and hands what came to the app, in
    coalesced batches per session (ms; about one 30 Hz flush tick of the window). 0 reads every stream on the app's loop instead (one wake-up per
    token; fine for a few sessions, a core's worth at DGX rates)."""
    tool_call_parser: str | None = None
    """vLLM's tool-call parser; None picks one from the model family (hermes for the
    built-in models), ``none`` turns native tool calls off."""
    extra_args: list[str] = Field(default_factory=list)
    """Further ``vllm serve`` arguments appended after the profile's."""
    lora_dir: Path | None = None
    """A folder of LoRA adapters (one sub-folder each, as ``peft`` saves them): the managed
    engine serves each under its folder's name, and sessions pick one."""
    lora_runtime: bool = False
    """Let sessions load adapters into the managed engine at run time (vLLM's
    ``/v1/load_lora_adapter``); turns LoRA on even without ``lora_dir``."""
    max_loras: int = 4
    """Adapters the engine keeps active at once."""
    max_lora_rank: int | None = None
    """Largest adapter rank; None sizes it from the adapters in ``lora_dir`` (16 without any)."""
    external_url: str | None = None
    """Use an OpenAI-compatible endpoint that already runs instead of a managed engine."""
    external_api_key: str | None = None
    """API key for ``external_url``."""
    external_model: str | None = None
    """Model name to request from ``external_url`` (default: the first it lists)."""
    replicas: int = Field(default=1, ge=0)
    """Managed engines of the model to run: each on ``gpus_per_engine`` GPUs of its own
    (``CUDA_VISIBLE_DEVICES``), or on the CPU on cores of its own; 0: as many as the GPUs
    allow. Sessions are spread over them; each session stays on its engine. A profile's
    ``engines_per_gpu`` runs that many engines on each of these GPU groups."""
    gpus_per_engine: int = Field(default=1, ge=1)
    """GPUs per managed engine; more than one serves tensor-parallel across them."""
    endpoints: list[EndpointSettings] = Field(default_factory=list)
    """Further OpenAI-compatible endpoints sessions are spread over (new sessions go to the
    least loaded; one that stops answering is drained and its sessions move)."""


class FleetSettings(BaseSettings):
    """Limits of the session fleet."""

    model_config = SettingsConfigDict(extra="ignore")

    max_generating: int = 32
    """Sessions allowed to generate at once; more wait in a fair queue. With adaptive
    admission this is the ceiling."""
    admission: Literal["adaptive", "fixed"] = "adaptive"
    """``adaptive``: how many sessions generate at once on each engine follows what the engine
    reports (KV-cache use, requests queued inside it, recent time to first token), up to
    ``max_generating``; ``fixed``: ``max_generating`` alone."""
    ttft_target_s: float = Field(default=2.0, gt=0)
    """Adaptive admission's target: time to first token, p95 over the last seconds."""
    port_range_start: int = 24000
    """First port of the range session port blocks are taken from (below Linux's ephemeral
    range, so an outgoing connection never takes a port a session was given)."""
    port_range_end: int = 32000
    """End of that range (exclusive)."""
    ports_per_session: int = 1
    """Ports in a session's block when its repository does not say (``ports = N``)."""
    setup_timeout_s: float = 1800.0
    """How long a worktree's setup command may run before it is stopped."""
    setups_at_once: int = 2
    """Setup commands that run at the same time (32 ``npm ci`` at once help nobody)."""

    def port_range(self) -> range:
        return range(self.port_range_start, self.port_range_end)


class RepoSettings(BaseModel):
    """How new worktrees of one repository are prepared (a task file's keys win over these).
    A plain model, not settings: its fields are read from the settings file only (an
    environment variable named ``RUN`` or ``SETUP`` must never set a command)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    copy_files: list[str | dict[str, str]] = Field(
        default_factory=list, validation_alias=AliasChoices("copy", "copy_files"))
    """``copy``: paths of the main checkout copied into each new worktree (``.env``, local
    config); ``{"link": "node_modules"}`` links a big ignored folder instead of copying it
    (read-only inside the sandbox, shared by every session)."""
    setup: str = ""
    """Command run once in each new worktree, inside the sandbox (``npm ci``, ``make deps``)."""
    ports: int | None = None
    """Ports in each session's block (``WORKSTATION_PORT`` …); None: ``fleet.ports_per_session``."""
    run: str = ""
    """The dev server a session's pane can start (``npm run dev -- --port $WORKSTATION_PORT``)."""
    gate: str = ""
    """The repository's test command: the merge queue's gate when the window runs it."""


class TelemetrySettings(BaseSettings):
    """Meters."""

    model_config = SettingsConfigDict(extra="ignore")

    gpu_interval_s: float = 1.0
    """Seconds between NVML samples."""
    metrics_interval_s: float = 1.0
    """Seconds between scrapes of the engine's ``/metrics``."""
    api_price_model: str = "gpt-4.1-mini"
    """Paid API model the cost meter compares against (see prices.toml)."""
    gpu_hourly_usd: float | None = None
    """Self-hosting cost as a rental price per GPU-hour (times the GPUs NVML sees). None:
    the typical rental price of the GPU model NVML names, or, with a hardware price set or
    an unknown GPU, energy + amortization."""
    electricity_usd_per_kwh: float = 0.15
    """Electricity price for the energy-based self-hosting cost."""
    pue: float = 1.3
    """Power usage effectiveness multiplier for the energy-based cost."""
    hardware_usd: float = 0.0
    """Hardware price amortized over ``hardware_years``."""
    hardware_years: float = 3.0
    """Years over which the hardware price is amortized."""
    app_metrics_port: int | None = None
    """Serve the app's own meters as Prometheus text on 127.0.0.1:<port>; None = off."""


class UiSettings(BaseSettings):
    """The window."""

    model_config = SettingsConfigDict(extra="ignore")

    flush_hz: float = 30.0
    """Rate at which coalesced token deltas are painted into panes."""
    pane_max_blocks: int = 2000
    """Transcript lines a pane widget keeps; older lines stay in the store."""
    theme: Literal["system", "light", "dark"] = "system"
    """Colour scheme; ``system`` follows the desktop palette."""


class SandboxSettings(BaseSettings):
    """How agents' commands are confined (defaults of every session's policy)."""

    model_config = SettingsConfigDict(extra="ignore")

    mode: Literal["auto", "required", "off"] = "auto"
    """``auto``: bubblewrap; where it cannot run, no command runs unattended — each one asks
    for your approval (whatever auto-approve says), and runs nobody watches refuse them.
    ``required``: no command at all without bubblewrap. ``off`` (a RISK, your explicit
    choice): no bubblewrap — commands can read and write whatever your user can (``~/.ssh``
    too) and reach the network; only resource limits and a scrubbed environment remain."""
    bwrap: str = ""
    """The bubblewrap program; empty looks up ``bwrap`` on PATH."""
    network: Literal["none", "host"] = "none"
    """``none``: no network at all, not even the engine's port; ``host``: the host's network."""
    cpu_time_s: int = 900
    """CPU seconds per process of a command; 0 for no limit."""
    address_space_gib: float = 16.0
    """Virtual memory per process of a command; 0 for no limit."""
    max_processes: int = 512
    """Processes (threads) one command may start; 0 for no limit."""
    file_size_gib: float = 1.0
    """Largest file a command may write; 0 for no limit."""
    tmp_size_mib: int = 1024
    """Size of a command's private /tmp."""
    hidden_paths: list[str] = Field(default_factory=list)
    """More paths commands must not see (the app's data, ~/.ssh, ~/.aws … always are)."""


class AgentSettings(BaseSettings):
    """What every session's agent gets besides its task."""

    model_config = SettingsConfigDict(extra="ignore")

    mcp_config: Path | None = None
    """An ``mcpServers`` JSON file (the usual shape: ``{"mcpServers": {"NAME": {"command": …,
    "args": […], "env": {…}} | {"url": …}}}``): servers every session gets, besides its own."""
    rules: bool = True
    """Read each repository's rules files (``AGENTS.md``, ``CLAUDE.md``, ``.clinerules``)."""
    rules_max_chars: int = 12_000
    """Cap of a session's rules section (also at most ~15 % of the context window)."""
    model_takes_images: Literal["auto", "yes", "no"] = "auto"
    """Whether the served model takes images; ``auto`` decides from its ``config.json`` (where
    the folder the server reports is readable here). Images go only to a model that takes them."""
    guided_max_parameters: int = 1_000_000_000
    """Models with at most this many parameters (read from the served model's config) get the
    guided protocol: few tools, each call narrowed by the task's state and held to a schema,
    code written one function at a time. Larger models keep the full, free protocol."""


class Settings(BaseSettings):
    """All settings of the app. Loaded from ``<data_dir>/settings.json`` and the environment."""

    model_config = SettingsConfigDict(
        env_prefix="WORKSTATION_", env_nested_delimiter="__", extra="ignore"
    )

    schema_version: int = SCHEMA_VERSION
    """Version of this schema; files from a newer app are refused, older ones migrated."""
    data_dir: Path = Field(default_factory=default_data_dir)
    """Everything the app writes: engine environment, models, store, logs, recordings."""
    engine: EngineSettings = Field(default_factory=EngineSettings)
    fleet: FleetSettings = Field(default_factory=FleetSettings)
    telemetry: TelemetrySettings = Field(default_factory=TelemetrySettings)
    ui: UiSettings = Field(default_factory=UiSettings)
    sandbox: SandboxSettings = Field(default_factory=SandboxSettings)
    repos: dict[str, RepoSettings] = Field(default_factory=dict)
    """Per repository (its folder, ``~`` allowed): worktree bootstrap, ports, dev server, gate."""
    agent: AgentSettings = Field(default_factory=AgentSettings)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        file = default_data_dir() / SETTINGS_FILE_NAME
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        if file.is_file():
            sources.append(JsonConfigSettingsSource(settings_cls, json_file=file))
        return tuple(sources)

    # ----- derived paths (one place, so nothing writes elsewhere) -----
    @property
    def engine_dir(self) -> Path:
        return self.data_dir / "engine"

    @property
    def engine_venv(self) -> Path:
        return self.engine_dir / "venv"

    @property
    def models_dir(self) -> Path:
        return self.data_dir / "models"

    @property
    def logs_dir(self) -> Path:
        return self.data_dir / "logs"

    @property
    def store_path(self) -> Path:
        return self.data_dir / "store.sqlite3"

    @property
    def cache_dir(self) -> Path:
        return self.data_dir / "cache"

    @property
    def recordings_dir(self) -> Path:
        return self.data_dir / "recordings"

    @property
    def settings_file(self) -> Path:
        return self.data_dir / SETTINGS_FILE_NAME


class SettingsError(UserError):
    """The settings file cannot be used; the message says why in plain words."""


def load_settings(**overrides: Any) -> Settings:
    """Load settings from file and environment; a broken file is a clear error."""
    try:
        settings = Settings(**overrides)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ()))
        raise SettingsError(
            f"settings are invalid at '{where}': {first.get('msg')} "
            f"(file: {default_data_dir() / SETTINGS_FILE_NAME})"
        ) from None
    except json.JSONDecodeError as exc:
        raise SettingsError(
            f"settings file {default_data_dir() / SETTINGS_FILE_NAME} is not valid JSON: {exc}"
        ) from None
    if settings.schema_version > SCHEMA_VERSION:
        raise SettingsError(
            f"settings file was written by a newer workstation (schema {settings.schema_version}, "
            f"this one knows {SCHEMA_VERSION})"
        )
    return settings


def save_settings(settings: Settings) -> Path:
    """Write settings atomically, private to the user (0600)."""
    path = settings.settings_file
    path.parent.mkdir(parents=True, exist_ok=True)
    data = settings.model_dump(mode="json", exclude={"data_dir"})
    data["schema_version"] = SCHEMA_VERSION
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".settings-", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(data, fh, indent=2, sort_keys=True)
            fh.write("\n")
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
