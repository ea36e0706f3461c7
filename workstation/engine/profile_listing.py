"""Every preset profile's final flags per platform, as the launcher would pass them here, and
the user's saved profiles (a tune's ``tuned-default``) after them.

``workstation engine profiles`` prints this. The flags are the launcher's own (``command()``),
sized for this machine's GPUs where it has some; they are checked against the installed
engine's ``--help`` where that platform's engine is installed, and marked unvalidated
otherwise (a CUDA listing on a machine with only the CPU engine, say). A profile that runs
several engines on each GPU (``engines_per_gpu``) is listed with one engine's flags: its
share of the GPU's memory and of the sessions.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workstation.config import Settings
from workstation.core.engine_sizing import GpuMemory
from workstation.core.errors import UserError
from workstation.core.profiles import PLATFORMS, PRESETS, Profile, engine_count
from workstation.engine.environment import EngineInstall, engine_help_text, find_engine
from workstation.engine.flags import check_flags, known_flags
from workstation.engine.host import Launchers
from workstation.engine.launcher import EngineLauncher
from workstation.engine.models import BUILTIN_MODELS, ModelError, ModelSpec, resolve_model

_PER_LAUNCH = ("--port",)


@dataclass(frozen=True, slots=True)
class ProfileRow:
    name: str
    platform: str
    args: list[str]
    env: dict[str, str]
    validated: bool
    validation_note: str = ""
    engine_note: str = ""
    sizing_notes: tuple[str, ...] = field(default=())
    engines_per_gpu: int = 1
    """Engines of the model on each GPU under this profile (always 1 on the CPU engine)."""
    yours: bool = False
    """One of the user's saved profiles, not a preset."""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "platform": self.platform, "args": self.args, "env": self.env,
                               "validated": self.validated, "engines_per_gpu": self.engines_per_gpu}
        if self.yours:
            out["yours"] = True
        if self.validation_note:
            out["validation_note"] = self.validation_note
        if self.sizing_notes:
            out["sizing_notes"] = list(self.sizing_notes)
        return out


def _model(settings: Settings, name: str | None) -> ModelSpec:
    try:
        return resolve_model(settings, name)
    except ModelError:
        # not prepared here: list the flags anyway, without what its config would size
        wanted = name or settings.engine.model
        builtin = wanted in BUILTIN_MODELS
        return ModelSpec(served_name=Path(wanted).name, source=wanted, local_dir=None,
                         max_model_len=8192 if builtin else None, builtin=builtin)


def list_profiles(settings: Settings, *, platforms: Sequence[str] | None = None, model: str | None = None,
                  gpu_memory: Callable[[], list[GpuMemory]] | None = None,
                  sequences_per_session: Callable[[ModelSpec], int] | None = None,
                  saved: Callable[[str], Mapping[str, Profile]] | None = None) -> list[ProfileRow]:
    """``sequences_per_session``: the ``n`` of the agents' requests for a model (the app's
    engine is sized for it; see :class:`~workstation.engine.host.Launchers`); ``saved``: the
    user's profiles for a platform, each folded with its ancestry (listed after the presets)."""
    installed = None
    try:
        installed = find_engine(settings)
    except UserError:
        installed = None
    order = list(platforms or sorted(PLATFORMS, key=lambda p: (installed is None or p != installed.platform, p)))
    spec = _model(settings, model)
    per_session = sequences_per_session(spec) if sequences_per_session is not None else 1
    rows: list[ProfileRow] = []
    for platform in order:
        if installed is not None and installed.platform == platform:
            engine, note = installed, f"vLLM {installed.version} installed here"
            try:
                known: set[str] | None = known_flags(engine_help_text(installed, settings.cache_dir))
            except UserError as exc:
                known, note = None, f"vLLM {installed.version} installed, but its options could not be read: {exc}"
        else:
            engine = EngineInstall(python=Path("python3"), platform=platform, version="?", managed=False)
            known, note = None, f"no {platform} engine installed here: flags not validated"
        sizing_notes: tuple[str, ...] = ()
        mine = dict(saved(platform)) if saved is not None else {}
        for name, profile in [*PRESETS.items(), *mine.items()]:
            if platform not in profile.platforms:
                continue
            engines = engine_count(profile, PRESETS, platform=platform)
            sharing = {"engines_on_device": engines} if engines > 1 else {}
            launcher = Launchers(settings, engine, spec, sequences_per_session=per_session)(
                name if name in PRESETS else profile, gpu_memory=gpu_memory, **sharing)
            try:
                launcher.sizing = launcher.size()
            except UserError as exc:
                sizing_notes = (str(exc),)
                launcher.sizing = None
            if launcher.sizing is not None:
                sizing_notes = launcher.sizing.notes
            argv = launcher.command()
            flags = argv[argv.index("serve") + 2:]
            for per_launch in _PER_LAUNCH:
                if per_launch in flags:
                    at = flags.index(per_launch)
                    del flags[at:at + 2]
            env = {k: v for k, v in profile_env(launcher).items()}
            validated, why = False, note
            if known is not None:
                try:
                    check_flags(flags, known, engine.version)
                    validated, why = True, ""
                except UserError as exc:
                    why = str(exc)
            rows.append(ProfileRow(name, platform, flags, env, validated, why, note, sizing_notes, engines,
                                   yours=name not in PRESETS))
    return rows


def profile_env(launcher: EngineLauncher) -> dict[str, str]:
    """The environment the profile itself sets (not the whole process environment)."""
    from workstation.core.profiles import effective

    _, env = effective(launcher.profile, PRESETS, platform=launcher.engine.platform)
    return env
