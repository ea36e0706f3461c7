"""The tuning lab's files under ``<data_dir>/tuning/``: user profiles (TOML, JSON also read),
captured traffic shapes and benchmark results (JSON). Written atomically; a file that does
not parse is reported by name and skipped, never fatal.

Small files, read and written synchronously: call from a worker thread in the app.
"""

from __future__ import annotations

import json
import logging
import os
import re
import tempfile
import time
import tomllib
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from workstation.core.errors import UserError
from workstation.core.profiles import (
    PRESETS,
    Profile,
    effective,
    flatten,
    profile_from_mapping,
    profile_to_toml,
)
from workstation.core.traffic import TrafficShape
from workstation.tuning.results import BenchResult

log = logging.getLogger(__name__)

_SAFE = re.compile(r"[^A-Za-z0-9._-]+")


def write_atomic(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}-", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def safe_name(name: str) -> str:
    cleaned = _SAFE.sub("-", name).strip("-.")
    return cleaned[:80] or "unnamed"


class TuningStore:
    """Profiles, shapes and results of one data dir."""

    def __init__(self, data_dir: Path) -> None:
        self.root = Path(data_dir) / "tuning"
        self.problems: list[str] = []

    @property
    def profiles_dir(self) -> Path:
        return self.root / "profiles"

    @property
    def shapes_dir(self) -> Path:
        return self.root / "shapes"

    @property
    def results_dir(self) -> Path:
        return self.root / "results"

    @property
    def runs_dir(self) -> Path:
        return self.root / "runs"

    # ----- profiles -----
    def user_profiles(self) -> dict[str, Profile]:
        out: dict[str, Profile] = {}
        self.problems = []
        if not self.profiles_dir.is_dir():
            return out
        for path in sorted(self.profiles_dir.iterdir()):
            if path.suffix not in (".toml", ".json") or path.name.startswith("."):
                continue
            try:
                raw = tomllib.loads(path.read_text()) if path.suffix == ".toml" else json.loads(path.read_text())
                profile = profile_from_mapping(raw, name=path.stem)
            except (OSError, ValueError) as exc:  # tomllib.TOMLDecodeError is a ValueError
                self.problems.append(f"{path.name}: {exc}")
                continue
            if profile.name in PRESETS:
                self.problems.append(f"{path.name}: '{profile.name}' is a preset's name; rename the profile")
                continue
            out[profile.name] = profile
        return out

    def catalogue(self) -> dict[str, Profile]:
        """Presets and user profiles (a user profile never shadows a preset)."""
        return {**PRESETS, **self.user_profiles()}

    def save_profile(self, profile: Profile) -> Path:
        if profile.name in PRESETS:
            raise UserError(f"'{profile.name}' is a preset; save your profile under another name")
        catalogue = {**self.catalogue(), profile.name: profile}
        try:
            effective(profile, catalogue)
        except ValueError as exc:
            raise UserError(f"profile '{profile.name}': {exc}") from None
        for stale in (self.profiles_dir / f"{profile.name}.json",):
            stale.unlink(missing_ok=True)
        return write_atomic(self.profiles_dir / f"{profile.name}.toml", profile_to_toml(profile))

    def delete_profile(self, name: str) -> bool:
        removed = False
        for suffix in (".toml", ".json"):
            path = self.profiles_dir / f"{name}{suffix}"
            if path.exists():
                path.unlink()
                removed = True
        return removed

    def resolve(self, name: str | Profile, *, platform: str | None = None) -> tuple[Profile, dict[str, Profile]]:
        """A profile by name with its ancestry folded in (what the launcher runs), and the
        catalogue it came from; with ``platform``, folded for that platform only."""
        catalogue = self.catalogue()
        if isinstance(name, Profile):
            catalogue[name.name] = name
            profile = name
        else:
            if name not in catalogue:
                raise UserError(f"unknown profile '{name}'", hint=f"known: {', '.join(catalogue)}")
            profile = catalogue[name]
        try:
            return flatten(profile, catalogue, platform=platform), catalogue
        except ValueError as exc:
            raise UserError(f"profile '{profile.name}': {exc}") from None

    # ----- traffic shapes -----
    def save_shape(self, shape: TrafficShape) -> Path:
        return write_atomic(self.shapes_dir / f"{safe_name(shape.name)}.json",
                            json.dumps(shape.to_dict(), indent=1) + "\n")

    def shapes(self) -> list[str]:
        if not self.shapes_dir.is_dir():
            return []
        return sorted(p.stem for p in self.shapes_dir.glob("*.json"))

    def latest_shape(self) -> str | None:
        """The name of the shape saved last (by its file's time, whatever the names: the dock's
        ``live-…`` and the verb's ``fleet-…`` captures alike; of two saved at once, the later
        name); None when there is none."""
        paths = [self.shapes_dir / f"{name}.json" for name in self.shapes()]
        return max(paths, key=lambda p: (p.stat().st_mtime, p.stem)).stem if paths else None

    def load_shape(self, name: str) -> TrafficShape:
        path = Path(name) if name.endswith(".json") else self.shapes_dir / f"{safe_name(name)}.json"
        try:
            return TrafficShape.from_dict(json.loads(path.read_text()))
        except FileNotFoundError:
            known = ", ".join(self.shapes()) or "none yet"
            raise UserError(f"no traffic shape '{name}'",
                            hint=f"capture one first (known: {known})") from None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise UserError(f"traffic shape {path} cannot be read: {exc}") from None

    # ----- results -----
    def save_result(self, result: BenchResult) -> BenchResult:
        stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(result.created_s))
        rid = result.result_id or f"{stamp}-{safe_name(result.profile)}-{int(result.created_s * 1000) % 1000:03d}"
        result = replace(result, result_id=rid)
        write_atomic(self.results_dir / f"{rid}.json", json.dumps(result.to_dict(), indent=1) + "\n")
        return result

    def results(self, *, limit: int | None = None) -> list[BenchResult]:
        if not self.results_dir.is_dir():
            return []
        paths = sorted(self.results_dir.glob("*.json"))
        if limit is not None:
            paths = paths[-limit:]
        out = []
        for path in paths:
            try:
                out.append(BenchResult.from_dict(json.loads(path.read_text())))
            except (OSError, ValueError, KeyError, TypeError) as exc:
                log.warning("skipping unreadable result %s: %s", path.name, exc)
        return out

    def save_run(self, name: str, data: Mapping[str, object]) -> Path:
        return write_atomic(self.runs_dir / f"{safe_name(name)}.json", json.dumps(data, indent=1) + "\n")
