"""The latest reading of every meter, as one frozen value: what ``Meters.snapshot()`` returns,
``workstation meters --once --json`` prints and the app's own ``/metrics`` serves."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from workstation.core.cost import CostEstimate
from workstation.telemetry.host import HostSample
from workstation.telemetry.nvml import GpuSnapshot
from workstation.telemetry.streams import ModelTokens, SessionTokens
from workstation.telemetry.vllm_metrics import EngineMetricsSample


@dataclass(frozen=True, slots=True)
class MetersSnapshot:
    """The latest reading of every meter (``None``: that meter has not reported yet)."""

    t_wall: float
    gpu: GpuSnapshot | None
    host: HostSample | None
    engines: tuple[EngineMetricsSample, ...]
    sessions: tuple[SessionTokens, ...]
    stream_tokens_per_s: float
    cost: CostEstimate | None
    models: tuple[ModelTokens, ...] = ()
    """Tokens per model the requests named: each LoRA adapter apart from the base model."""

    def to_dict(self) -> dict[str, Any]:
        gpu: Any
        if self.gpu is None:
            gpu = {"state": "not sampled", "message": "GPU sampler has not run", "devices": []}
        else:
            gpu = self.gpu.to_dict()
        return {
            "t_wall": self.t_wall,
            "gpu": gpu,
            "host": self.host.to_dict() if self.host else "n/a",
            "engines": [e.to_dict() for e in self.engines],
            "sessions": [s.to_dict() for s in self.sessions],
            "stream_tokens_per_s": self.stream_tokens_per_s,
            "tokens_by_model": [m.to_dict() for m in self.models],
            "cost": _na_values(self.cost.to_dict()) if self.cost else "n/a",
        }


def _na_values(d: dict[str, Any]) -> dict[str, Any]:
    return {k: "n/a" if v is None else v for k, v in d.items()}
