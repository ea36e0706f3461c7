"""What a GPU-hour typically costs to rent, per GPU model: the default of the self-hosting
cost (``telemetry.gpu_hourly_usd``) that the settings offer for the GPU this machine has.

Typical on-demand prices of single GPUs at large clouds and GPU clouds in 2025 (US dollars
per GPU-hour, rounded); a real contract differs, so the value is a starting point the user
edits, never a measurement."""

from __future__ import annotations

TYPICAL_GPU_HOURLY_USD: tuple[tuple[str, float], ...] = (
    # (a piece of the name NVML reports, USD per GPU-hour); the first match wins
    ("GB200", 6.00),
    ("B200", 5.50),
    ("GH200", 3.50),
    ("H200", 3.80),
    ("H100", 2.90),
    ("A100-SXM4-80GB", 1.80),
    ("A100 80GB", 1.80),
    ("A100", 1.40),
    ("L40S", 1.00),
    ("L40", 0.90),
    ("A10G", 0.75),
    ("A10", 0.70),
    ("L4", 0.60),
    ("RTX 6000 Ada", 1.00),
    ("RTX A6000", 0.80),
    ("RTX 5090", 0.70),
    ("RTX 4090", 0.45),
    ("RTX 3090", 0.25),
    ("T4", 0.35),
    ("V100", 0.60),
)


def typical_gpu_hourly_usd(gpu_name: str) -> float | None:
    """The typical rental price per hour of ``gpu_name`` (as NVML names it), or None when the
    model is not in the table."""
    name = gpu_name.upper().replace("NVIDIA ", "")
    for piece, usd in TYPICAL_GPU_HOURLY_USD:
        if piece.upper() in name:
            return usd
    return None
