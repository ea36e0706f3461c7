"""Launch, health-check, tail and stop a managed ``vllm serve``.

- Bound to 127.0.0.1 on a free port, with a random API key per launch passed through
  the environment (``VLLM_API_KEY``), so it never shows in ``ps`` or in a log.
- Its own process group (``start_new_session``), stopped with SIGTERM then SIGKILL
  after a grace period; the shim asks the kernel to kill it if the app dies.
- Caches, temp files and sockets stay under the app's data dir.
- Errors the user can act on are :class:`EngineStartError` with the last log lines.
- The profile's flags are resolved for the engine's platform; on CUDA its sized values
  (batch, context, memory share) come from the model's config and the GPU's free memory,
  read once before the start (``core/engine_sizing.py``). An engine that shares its GPU with
  others (``engines_on_device``) always gets its memory share, whatever the profile asks:
  vLLM's own 90 % would make the next engine's start fail.
- The user's own ``VLLM_*`` variables reach the engine, except where the app or the profile
  sets the same one; the engine log says which value won.
- LoRA is on where adapters are configured (``engine.lora_dir``, ``engine.lora_runtime``:
  ``engine/lora.py``); its flags are base arguments, validated like the rest.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import re
import secrets
import signal
import socket
import stat
import tempfile
import time
from collections.abc import Callable
from enum import Enum
from pathlib import Path

import httpx
import psutil
from psygnal import Signal

from workstation.config import Settings
from workstation.core.endpoints import Endpoint
from workstation.core.errors import UserError
from workstation.core.engine_sizing import GpuMemory, ModelShape, Sizing, SizingError, size_engine
from workstation.core.profiles import PRESETS, Profile, apply_changes, effective, split_flags
from workstation.engine.cpu_dtype import FLOAT32, dtype_note, host_engine_dtype
from workstation.engine.environment import EngineInstall
from workstation.engine.flags import validate_args
from workstation.engine.lora import RUNTIME_ENV, Adapter, find_adapters, lora_args
from workstation.engine.models import ModelSpec

log = logging.getLogger(__name__)

LOG_TAIL_LINES = 2000
GIB = 1 << 30

# vLLM's tool-call parser per model family (config.json ``model_type``). The built-in models
# use hermes with the app's own chat template; a family not listed gets no native tool calls
# (the agent then uses its text protocol) unless ``engine.tool_call_parser`` names one.
TOOL_CALL_PARSERS: dict[str, str] = {
    "qwen2": "hermes", "qwen2_moe": "hermes", "qwen3": "hermes", "qwen3_moe": "hermes",
    "llama": "llama3_json", "mistral": "mistral", "granite": "granite",
}
# Variables the launcher itself owns: a user's value for these never reaches the engine.
_APP_OWNED_ENV = ("VLLM_API_KEY", "VLLM_CACHE_ROOT", "VLLM_NO_USAGE_STATS", "VLLM_TARGET_DEVICE")


def new_api_key() -> str:
    """A fresh key for one engine start: 48 hex digits. Never URL-safe base64, whose keys
    start with ``-`` one time in 64: ``--api-key -x…`` is then taken for an option (CI met
    one, and ten tests of the CLI against the engine failed with "expected one argument")."""
    return secrets.token_hex(24)


IPC_TMP_MAX = 70
"""The longest ``TMPDIR`` the engine can have: vLLM binds its ZeroMQ sockets at
``ipc://$TMPDIR/<uuid4>``, an AF_UNIX path of at most 107 bytes on Linux (36 of them the
uuid and its slash). Under a data directory deeper than that the engine died at start-up
with zmq's 'addr length' error and nothing a user could act on (seen with pytest's tmp dirs)."""


def engine_tmp(preferred: Path) -> Path:
    """The engine's temporary folder: ``preferred`` (under the data directory) where its path
    is short enough for vLLM's sockets, else a private one of this user's in the system's
    temporary folder (mode 0700, checked to be a real folder of ours, not a link someone left),
    else a fresh private one."""
    if len(str(preferred)) <= IPC_TMP_MAX:
        preferred.mkdir(parents=True, exist_ok=True)
        return preferred
    for root in dict.fromkeys((tempfile.gettempdir(), "/tmp")):
        short = Path(root) / f"workstation-engine-{os.getuid()}"
        if len(str(short)) > IPC_TMP_MAX:
            continue
        try:
            short.mkdir(mode=0o700, exist_ok=True)
            st = short.lstat()
        except OSError:
            continue
        if stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o077:
            return short
    return Path(tempfile.mkdtemp(prefix="ws-engine-", dir="/tmp"))


class EngineState(str, Enum):
    STOPPED = "stopped"
    STARTING = "starting"
    READY = "ready"
    STOPPING = "stopping"
    FAILED = "failed"


class EngineStartError(UserError):
    """The engine did not come up; the message carries its last log lines."""


class EngineStartCancelled(EngineStartError):
    """:meth:`EngineLauncher.stop` was called while the engine was still starting."""


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def port_in_use(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False


def cpu_kv_cache_bytes(requested_gib: float | None, *, bytes_per_value: int = 2) -> int:
    """KV cache for the CPU engine: enough for 32 agents where memory allows.

    SmolLM2 needs ~23 KB per token in bf16; 4 GiB holds ~186k tokens (32 agents x ~5.8k); a
    float32 engine (``bytes_per_value=4``, ``engine/cpu_dtype.py``) gets twice the bytes for
    as many tokens. Capped at a third of the memory that is available now, at least 512 MiB.
    """
    if requested_gib is not None:
        return int(requested_gib * GIB)
    available = psutil.virtual_memory().available
    size = min(4 * GIB * max(1, bytes_per_value // 2), int(available / 3))
    size -= size % (256 << 20)
    return max(size, 512 << 20)


def _env_note(name: str, users: str, final: str | None) -> str:
    """One line for the engine log: whose value of a ``VLLM_*`` variable the engine got."""
    if final == users:
        return f"{name}={users!r} from your environment"
    owner = "the app's own value" if name in _APP_OWNED_ENV else f"the profile's {final!r}"
    shown = "" if "KEY" in name or "TOKEN" in name else f" ({users!r})"
    return f"{name}: {owner} wins over yours{shown}"


_POLL_LINE = re.compile(r'"GET /(?:metrics|health)(?:\?\S*)? HTTP/[\d.]+" 2\d\d\b')


def is_poll_line(line: str) -> bool:
    """An access line of a successful ``GET /metrics`` or ``GET /health`` (the meters scrape
    every second): kept in the log file, left out of the tail the dock shows. A failed poll
    stays visible."""
    return "GET /" in line and _POLL_LINE.search(line) is not None


class EngineLauncher:
    """One managed vLLM server. ``await start()``, use ``.endpoint``, ``await stop()``."""

    state_changed = Signal(object, str)  # EngineState, detail
    log_line = Signal(str)

    def __init__(
        self,
        settings: Settings,
        engine: EngineInstall,
        model: ModelSpec,
        *,
        log_dir: Path | None = None,
        profile: str | Profile | None = None,
        extra_args: list[str] | None = None,
        port: int | None = None,
        env: dict[str, str] | None = None,
        gpu_memory: Callable[[], list[GpuMemory]] | None = None,
        host_dtype: Callable[[], str | None] = host_engine_dtype,
        sessions: int | None = None,
        sequences_per_session: int = 1,
        name: str | None = None,
        engines_on_device: int = 1,
        place: int = 1,
    ) -> None:
        """``gpu_memory``: reads the engine's GPUs' memory before a CUDA start (default: one
        NVML read of the GPUs its ``CUDA_VISIBLE_DEVICES`` shows it); ``sessions``: how many
        sessions the sizing plans for (default: the fleet's ``max_generating``), each with a
        request of ``sequences_per_session`` sequences in flight (the guided protocol's n); ``name``:
        its endpoint's name (default ``managed:<model>``; several engines need one each);
        ``engines_on_device``: engines sharing this one's GPUs, itself included, of which it
        starts ``place``-th (its share of their memory and of the sessions); ``host_dtype``:
        the CPU engine's data type for this host (``engine/cpu_dtype.py``)."""
        self.settings = settings
        self.engine = engine
        self.model = model
        self.log_dir = log_dir or settings.logs_dir
        chosen = profile or settings.engine.profile
        if isinstance(chosen, Profile):
            self.profile = chosen
        else:
            if chosen not in PRESETS:
                raise UserError(f"unknown engine profile '{chosen}' (known: {', '.join(PRESETS)})")
            self.profile = PRESETS[chosen]
        self.extra_args = list(extra_args or settings.engine.extra_args)
        self.requested_port = port if port is not None else settings.engine.port
        self.extra_env = dict(env or {})
        self.sessions = sessions if sessions is not None else settings.fleet.max_generating
        self.sequences_per_session = max(1, sequences_per_session)
        self.name = name or f"managed:{model.served_name}"
        self.engines_on_device = max(1, engines_on_device)
        self.place = max(1, place)
        self._gpu_memory = gpu_memory
        self._host_dtype = host_dtype
        self.chosen_dtype: str | None = None
        """The ``--dtype`` the app chose for the last command (CPU hosts without AVX-512)."""
        self.sizing: Sizing | None = None
        """What the last start sized (CUDA only)."""
        self.env_notes: list[str] = []
        """Which value won where the user's environment and the profile name the same variable."""
        self.state = EngineState.STOPPED
        self.log_tail: collections.deque[str] = collections.deque(maxlen=LOG_TAIL_LINES)
        self.port: int | None = None
        self.started_s: float | None = None
        self._api_key = ""
        self._proc: asyncio.subprocess.Process | None = None
        self._reader: asyncio.Task[None] | None = None
        self._log_file = None

    # ----- public -----
    @property
    def endpoint(self) -> Endpoint:
        if self.port is None:
            raise UserError("the engine is not running")
        return Endpoint(
            base_url=f"http://{self.settings.engine.host}:{self.port}",
            api_key=self._api_key,
            model=self.model.served_name,
            name=self.name,
            managed=True,
            native_tools=self.tool_call_parser() is not None,
        )

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def log_path(self) -> Path:
        return self.log_dir / "engine.log"

    def tool_call_parser(self) -> str | None:
        """vLLM's tool-call parser for this model (None: no native tool calls)."""
        chosen = self.settings.engine.tool_call_parser
        if chosen:
            return None if chosen == "none" else chosen
        if self.model.builtin:
            return "hermes"  # our chat template renders `tools`; hermes parses <tool_call> blocks
        config = self.model.config_json or {}
        return TOOL_CALL_PARSERS.get(str(config.get("model_type", "")))

    def size(self) -> Sizing | None:
        """Batch, context and memory share for this model on the engine's GPUs (CUDA only).

        Raises EngineStartError when the model cannot fit in what is free."""
        if self.engine.platform != "cuda":
            return None
        args, _ = effective(self.profile, PRESETS, platform="cuda")
        tp_values = split_flags(apply_changes(args, self.extra_args)).get("--tensor-parallel-size") \
            or split_flags(apply_changes(args, self.extra_args)).get("-tp")
        tp = int(tp_values[0]) if tp_values and tp_values[0].isdigit() else 1
        if self._gpu_memory is None:
            from workstation.engine.gpu_memory import read_gpu_memory

            gpus = read_gpu_memory(env={**os.environ, **self.extra_env})  # the GPUs it will see
        else:
            gpus = self._gpu_memory()
        weights = None
        if self.model.local_dir is not None:
            weights = sum(f.stat().st_size for f in self.model.local_dir.glob("*.safetensors")) or None
        shape = ModelShape.from_config(self.model.config_json, weight_bytes=weights)
        try:
            return size_engine(shape, gpus[:tp], sessions=self.sessions, sequences_per_session=self.sequences_per_session,
                               model_max_len=self.model.max_model_len, engines_on_device=self.engines_on_device,
                               place=self.place)
        except SizingError as exc:
            raise EngineStartError(str(exc), hint="stop what else uses the GPU, or serve a smaller model") from None

    def command(self) -> list[str]:
        """The full argv of ``vllm serve`` for this launch (without the key)."""
        values = self.sizing.values() if self.sizing is not None else {}
        profile_args, _ = effective(self.profile, PRESETS, platform=self.engine.platform, values=values)
        base = [
            "--served-model-name", self.model.served_name,
            "--host", self.settings.engine.host,
            "--port", str(self.port or 0),
        ]
        if self.model.max_model_len:
            base += ["--max-model-len", str(self.model.max_model_len)]
        parser = self.tool_call_parser()
        if parser is not None:
            base += ["--enable-auto-tool-choice", "--tool-call-parser", parser]
        dtype = self.chosen_dtype = self.cpu_dtype(profile_args)
        if self.engine.platform == "cpu":
            kv = cpu_kv_cache_bytes(self.settings.engine.kv_cache_gib, bytes_per_value=4 if dtype == FLOAT32 else 2)
            base += ["--kv-cache-memory-bytes", str(kv)]
        if dtype is not None:
            base += ["--dtype", dtype]
        base += self.lora_args()
        args = apply_changes(base, profile_args)
        share = values.get("gpu_memory_utilization")
        if self.engines_on_device > 1 and share is not None:  # over the profile's; the user's extra args still win
            args = apply_changes(args, ["--gpu-memory-utilization", share])
        args = apply_changes(args, self.extra_args)
        return [*self.engine.vllm_argv, "serve", self.model.source, *args]

    def cpu_dtype(self, profile_args: list[str]) -> str | None:
        """The data type the app chooses for a CPU engine on this host (None: vLLM's own), unless
        the profile or the user's extra args name one."""
        if self.engine.platform != "cpu" or "--dtype" in split_flags([*profile_args, *self.extra_args]):
            return None
        return self._host_dtype()

    def adapters(self) -> tuple[Adapter, ...]:
        """The LoRA adapters of ``engine.lora_dir`` (none without it)."""
        folder = self.settings.engine.lora_dir
        return find_adapters(folder) if folder else ()

    def lora_args(self) -> list[str]:
        """LoRA flags where adapters are configured (a folder, or loading at run time)."""
        cfg = self.settings.engine
        return lora_args(self.adapters(), runtime=cfg.lora_runtime, max_loras=cfg.max_loras,
                         max_rank=cfg.max_lora_rank)

    def environment(self) -> dict[str, str]:
        data = self.settings.data_dir
        tmp = engine_tmp(self.settings.engine_dir / "tmp")
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("WORKSTATION_TEST") and k not in _APP_OWNED_ENV}
        users_vllm = {k: v for k, v in os.environ.items() if k.startswith("VLLM_")}
        env.update(
            VLLM_API_KEY=self._api_key,
            VLLM_CACHE_ROOT=str(self.settings.engine_dir / "cache"),
            TMPDIR=str(tmp),
            HF_HOME=str(data / "hf"),
            HF_HUB_OFFLINE="1" if self.model.local_dir is not None else env.get("HF_HUB_OFFLINE", "0"),
            WORKSTATION_PARENT_PID=str(os.getpid()),
            PYTHONUNBUFFERED="1",
            VLLM_NO_USAGE_STATS="1",
            DO_NOT_TRACK="1",
        )
        if self.engine.platform == "cpu":
            env["VLLM_TARGET_DEVICE"] = "cpu"
            if not env.get("VLLM_CPU_KVCACHE_SPACE", "x").strip():
                env.pop("VLLM_CPU_KVCACHE_SPACE")  # an empty value crashes the worker
            iomp = self.engine.iomp_library()
            if iomp is not None:
                env["LD_PRELOAD"] = ":".join(filter(None, [str(iomp), env.get("LD_PRELOAD", "")]))
        if self.settings.engine.lora_runtime:
            env[RUNTIME_ENV] = "True"  # sessions may load adapters through the API
        _, profile_env = effective(self.profile, PRESETS, platform=self.engine.platform)
        env.update(profile_env)
        env.update(self.extra_env)
        self.env_notes = [_env_note(k, v, env.get(k)) for k, v in sorted(users_vllm.items())]
        return env

    async def start(self, progress: Callable[[str], None] | None = None) -> Endpoint:
        if self.state in (EngineState.STARTING, EngineState.READY):
            return self.endpoint
        say = progress or (lambda _m: None)
        host = self.settings.engine.host
        if self.requested_port:
            if port_in_use(host, self.requested_port):
                raise EngineStartError(
                    f"port {self.requested_port} on {host} is already in use",
                    hint="stop what uses it, or set engine.port to 0 to pick a free port",
                )
            self.port = self.requested_port
        else:
            self.port = free_port(host)
        self._api_key = new_api_key()
        self.sizing = self.size()
        argv = self.command()
        self._validate(argv)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.log_tail.clear()
        self._log_file = open(self.log_path, "a", encoding="utf-8")  # noqa: SIM115
        self._log_file.write(f"\n===== start {time.strftime('%Y-%m-%d %H:%M:%S')} profile={self.profile.name}\n")
        self._log_file.write(" ".join(argv) + "\n")
        env = self.environment()
        if self.sizing is not None:
            for note in self.sizing.notes:
                self._log_file.write(f"sizing: {note}\n")
                say(f"  sizing: {note}")
        if self.chosen_dtype is not None:
            self._log_file.write(f"dtype: {dtype_note(self.chosen_dtype)}\n")
            say(f"  dtype: {dtype_note(self.chosen_dtype)}")
        for note in self.env_notes:
            self._log_file.write(f"environment: {note}\n")
            say(f"  environment: {note}")
        self._set_state(EngineState.STARTING, f"starting {self.model.served_name} on port {self.port}")
        say(f"starting vLLM ({self.engine.platform}, {self.engine.version}) with {self.model.served_name}, profile '{self.profile.name}'")
        t0 = time.monotonic()
        try:
            self._proc = await asyncio.create_subprocess_exec(
                *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
                stdin=asyncio.subprocess.DEVNULL, env=env, start_new_session=True,
            )
        except OSError as exc:
            self._set_state(EngineState.FAILED, str(exc))
            raise EngineStartError(f"cannot run the engine's Python {self.engine.python}: {exc}") from None
        self._reader = asyncio.create_task(self._read_log(), name=f"engine-log-{self.port}")
        try:
            await self._wait_healthy(t0, say)
        except EngineStartCancelled:
            self._set_state(EngineState.STOPPED, "start cancelled")
            say("engine start cancelled")
            raise
        except BaseException:
            await self.stop()
            self._set_state(EngineState.FAILED, "start failed")
            raise
        self.started_s = time.monotonic() - t0
        self._set_state(EngineState.READY, f"ready in {self.started_s:.1f} s")
        say(f"engine ready in {self.started_s:.1f} s at {self.endpoint.base_url}")
        return self.endpoint

    async def stop(self) -> None:
        proc = self._proc
        if proc is None:
            self._set_state(EngineState.STOPPED, "")
            return
        self._set_state(EngineState.STOPPING, "")
        if proc.returncode is None:
            await self._terminate_group(proc, self.settings.engine.stop_grace_s)
        if self._reader is not None:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(self._reader, timeout=5)
            self._reader = None
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None
        self._proc = None
        self._set_state(EngineState.STOPPED, "")

    async def restart(self, progress: Callable[[str], None] | None = None) -> Endpoint:
        await self.stop()
        return await self.start(progress)

    def alive(self) -> bool:
        return self._proc is not None and self._proc.returncode is None

    # ----- internals -----
    def _validate(self, argv: list[str]) -> None:
        serve_at = argv.index("serve")
        validate_args(self.engine, argv[serve_at + 2:], self.settings.cache_dir)

    def _set_state(self, state: EngineState, detail: str) -> None:
        if state is self.state and not detail:
            return
        self.state = state
        log.info("engine %s %s", state.value, detail)
        self.state_changed.emit(state, detail)

    async def _read_log(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        stream = self._proc.stdout
        while True:
            raw = await stream.readline()
            if not raw:
                break
            line = raw.decode("utf-8", "replace").rstrip("\n")
            if self._api_key and self._api_key in line:
                line = line.replace(self._api_key, "***")
            if self._log_file is not None:
                self._log_file.write(line + "\n")
                self._log_file.flush()
            if is_poll_line(line):  # the meters' scrape every second, health checks: file only
                continue
            self.log_tail.append(line)
            self.log_line.emit(line)

    def _last_lines(self, n: int = 15) -> str:
        lines = [ln for ln in self.log_tail if ln.strip()][-n:]
        return "\n".join("    " + ln[-200:] for ln in lines)

    def _diagnose_exit(self, code: int | None) -> str:
        text = "\n".join(self.log_tail).lower()
        if code in (-9, 137) or "out of memory" in text or "cannot allocate memory" in text:
            return "the engine ran out of memory (lower engine.kv_cache_gib or close other programs)"
        if "address already in use" in text:
            return f"port {self.port} is already in use"
        if "no such file or directory" in text and "config.json" in text:
            return "the model directory is missing files"
        if "modulenotfounderror" in text or "no module named" in text:
            return "the engine environment is incomplete (run `workstation engine setup --force`)"
        return f"the engine exited with code {code} during start-up"

    async def _wait_healthy(self, t0: float, say: Callable[[str], None]) -> None:
        proc = self._proc
        assert proc is not None
        url = f"http://{self.settings.engine.host}:{self.port}/health"
        deadline = t0 + self.settings.engine.start_timeout_s
        last_note = t0
        async with httpx.AsyncClient(timeout=2.0, trust_env=False) as http:
            while True:
                if self._proc is not proc or self.state is EngineState.STOPPING:  # stop() while starting
                    raise EngineStartCancelled("the engine's start was cancelled")
                if proc.returncode is not None:
                    await asyncio.sleep(0.2)  # let the reader drain the last lines
                    raise EngineStartError(
                        f"{self._diagnose_exit(proc.returncode)}; last log lines:\n{self._last_lines()}",
                        hint=f"full log: {self.log_path}",
                    )
                with contextlib.suppress(httpx.HTTPError):
                    if (await http.get(url)).status_code == 200:
                        return
                now = time.monotonic()
                if now > deadline:
                    raise EngineStartError(
                        f"the engine did not become healthy within {self.settings.engine.start_timeout_s:.0f} s; "
                        f"last log lines:\n{self._last_lines()}",
                        hint=f"full log: {self.log_path}",
                    )
                if now - last_note > 10:
                    last_note = now
                    tail = self.log_tail[-1][-100:] if self.log_tail else ""
                    say(f"  … {now - t0:.0f} s: {tail}")
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(proc.wait(), timeout=0.5)

    @staticmethod
    async def _terminate_group(proc: asyncio.subprocess.Process, grace_s: float) -> None:
        """SIGTERM the process group, SIGKILL it after the grace period, then make sure
        no descendant outlives it (the main pid is reaped by asyncio, the rest polled)."""
        try:
            pgid = os.getpgid(proc.pid)
            descendants = psutil.Process(proc.pid).children(recursive=True)
        except (ProcessLookupError, psutil.Error):
            pgid, descendants = None, []
        if pgid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), timeout=grace_s)
        except asyncio.TimeoutError:
            if pgid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pgid, signal.SIGKILL)
            await proc.wait()
        _, alive = await asyncio.to_thread(psutil.wait_procs, descendants, grace_s)
        for leftover in alive:
            with contextlib.suppress(psutil.Error):
                leftover.kill()
