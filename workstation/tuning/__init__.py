"""Load benchmarks, traffic shape, autotuner, safe switch. No Qt."""
