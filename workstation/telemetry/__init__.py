"""Samplers and meters: NVML, host, vLLM /metrics, stream counters, cost. No Qt.

What the UI draws, and where it comes from
==========================================

The service factory builds the :class:`workstation.telemetry.meters.Meters`::

    meters = services.meters(streams=fleet.streams)   # scrapes the live engine and follows it
                                                      # (restart, switch), marks its pid on the
                                                      # GPU cards, reads the fleet's token counters
    await meters.start()                              # ... services.aclose() closes it

Everything is pushed through psygnal signals on the asyncio thread (the UI bridge
re-emits them as Qt signals); nothing needs polling. Samples are frozen dataclasses;
a field that is ``None`` is "not available" (show ``n/a``), never zero.

Signals on ``Meters`` (payload type):

``gpu_sampled(GpuSnapshot)`` — ``telemetry/nvml.py``, every ``telemetry.gpu_interval_s``.
    ``snap.state``: ``GpuState.OK`` / ``NO_NVML`` / ``NO_GPU`` / ``ERROR``; when not OK,
    ``snap.message`` is the sentence to show ("no GPU: the NVIDIA driver library (NVML)
    was not found") and no more GPU samples follow. ``snap.devices``: one
    ``GpuDevice`` per card — ``index name uuid pci_bus_id gpu_util_pct mem_util_pct
    memory_used_bytes memory_total_bytes memory_reserved_bytes power_w power_limit_w
    energy_j temperature_c sm_clock_mhz mem_clock_mhz sm_clock_max_mhz
    clock_event_reasons`` (words, e.g. ``("software power cap",)``) ``pstate`` (int, P0=0)
    ``fan_pct processes`` (``GpuProcess``: ``pid name used_memory_bytes is_engine is_app``)
    ``engine_memory_bytes unsupported`` (field names the card refuses). Per-GPU cards
    read these; the meter strip uses ``gpu_util_pct``, ``memory_used_bytes`` /
    ``memory_total_bytes``, ``power_w``, ``temperature_c``.
``host_sampled(HostSample)`` — ``telemetry/host.py``: ``cpu_pct per_cpu_pct
    memory_used_bytes memory_total_bytes`` and ``app`` / ``engine``
    (``ProcessTreeUsage``: ``processes cpu_pct rss_bytes alive``; ``engine`` None when
    there is no local engine process).
``engine_sampled(EngineMetricsSample)`` — ``telemetry/vllm_metrics.py``, one per
    endpoint per ``telemetry.metrics_interval_s``: ``endpoint up error model
    generation_tokens_per_s prompt_tokens_per_s`` (last interval)
    ``windowed_generation_tokens_per_s windowed_prompt_tokens_per_s`` (last ``rate_window_s``,
    the streams' 5 s) ``running waiting kv_cache_usage_pct prefix_cache_hit_rate_pct`` (last ``window_s``, 60 s) ``prefix_cache_hit_rate_lifetime_pct
    preemptions_total preemptions_in_window spec_acceptance_rate_pct
    spec_mean_acceptance_length ttft_s itl_s e2e_s queue_s`` (``Percentiles``: ``p50 p90
    p99 mean count``, over the window) and the raw counter totals.
``sessions_sampled(tuple[SessionTokens, ...])`` — ``telemetry/streams.py``, 1 Hz:
    per session ``requests prompt_tokens cached_prompt_tokens completion_tokens``
    (from ``usage``) and ``tokens_per_s`` (live, from chunks). The fleet feeds these
    counters (``Fleet.streams``, passed as ``Meters(streams=…)``): the app counts tokens once.
``cost_updated(CostEstimate)`` — ``core/cost.py``, 1 Hz: ``self_host_usd_per_m_tokens
    api_usd_per_m_tokens savings_pct saved_usd`` (cumulative since start)
    ``joules_per_token tokens energy_j elapsed_s``, ``api`` (the ``ApiPrice`` with
    ``source`` and ``date``), ``assumptions`` (``describe()`` gives the panel's
    label/value lines) and ``notes`` (why a value is None). Edit with
    ``meters.set_api_price("gpt-4.1-mini")`` / ``meters.set_assumptions(SelfHostAssumptions(...))``;
    ``meters.prices.models()`` lists the choices; ``telemetry.prices.ensure_user_copy(data_dir)``
    makes the editable ``prices.toml``.
``series_updated(tuple[str, ...])`` — names of the series just appended to.

Charts: ``meters.series`` is a ``core.series.SeriesBook`` holding 15 minutes of
every value, x = ``time.monotonic()`` seconds. ``meters.series.get(name)`` →
``TimeSeries`` with ``.unit``, ``.times()``, ``.values()`` (``array('d')``, NaN for
gaps; ``numpy.frombuffer`` them for pyqtgraph). Names:
``gpu{i}.util_pct mem_util_pct memory_used_bytes power_w temperature_c sm_clock_mhz
engine_memory_bytes``; ``host.cpu_pct memory_used_bytes app_cpu_pct app_rss_bytes
engine_cpu_pct engine_rss_bytes``; ``engine.{endpoint}.generation_tokens_per_s
prompt_tokens_per_s running waiting kv_cache_usage_pct prefix_cache_hit_rate_pct
spec_acceptance_rate_pct ttft_p50_s ttft_p99_s itl_p50_s itl_p99_s`` (the token rates are the
samples' windowed ones, over the stream counters' 5 s, as the strip's);
``sessions.tokens_per_s``; ``cost.savings_pct saved_usd self_host_usd_per_m_tokens
api_usd_per_m_tokens joules_per_token``.

Also: ``meters.snapshot()`` → ``MetersSnapshot`` (latest of everything, ``to_dict()``
for JSON); ``meters.export_csv(path)`` (long format: ``time_utc, t_s, series, unit,
value``); ``Meters(..., app_metrics_port=0)`` serves the app's own meters on
``meters.app_metrics_url`` (127.0.0.1 only); ``workstation meters --once --json`` on
the command line.
"""
