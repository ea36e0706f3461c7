"""Samplers and meters: NVML, host, vLLM /metrics, stream counters, cost. No Qt."""
