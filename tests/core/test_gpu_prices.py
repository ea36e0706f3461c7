"""The typical GPU-hour price per GPU model (the settings' default)."""

from __future__ import annotations

from workstation.core.gpu_prices import typical_gpu_hourly_usd


def test_typical_prices_by_gpu_model() -> None:
    assert typical_gpu_hourly_usd("NVIDIA H100 80GB HBM3") == 2.90
    assert typical_gpu_hourly_usd("NVIDIA GH200 480GB") == 3.50  # not the H200's
    assert typical_gpu_hourly_usd("NVIDIA A100-SXM4-40GB") == 1.40
    assert typical_gpu_hourly_usd("NVIDIA GeForce RTX 4090") == 0.45
    assert typical_gpu_hourly_usd("Some Future GPU") is None
