"""The tuning lab: profile checks, traffic-shape capture, load benchmarks, the autotuner and the
safe switch of the live engine. No Qt.

Modules
=======

``checks``         a profile against the installed engine's ``--help=all``, the model's
                   ``config.json`` and the platform → :class:`checks.CheckReport` (plain words)
``store``          ``<data_dir>/tuning/``: user profiles (TOML), shapes and results (JSON)
``capture``        :class:`capture.TrafficRecorder`: records finished requests from
                   ``ChatClient`` observers or ``Fleet.agent_event`` → ``core.traffic.TrafficShape``
``fleet_capture``  a bounded headless fleet run on the demo's sample repositories, recorded
``workload``       token-exact synthetic prompts and the replay of a shape (its captured prefix
                   sharing, within and across sessions, and structured-outputs constraints)
``loadgen``        the app's own httpx load generator → :class:`results.BenchResult`
``bench_serve``    vLLM's ``vllm bench serve`` for synthetic workloads → the same result type
``bench``          a managed engine for a profile (always stopped), stamping and storing results
``autotune``       one change at a time, ≥ 3 runs each, kept above twice the noise, time budget
``placement``      where a second engine runs: a spare GPU, or apart on the CPU's cores
``switch``         :class:`switch.SafeSwitch`: start, probe, point clients, drain, stop, roll back
``live_switch``    :class:`live_switch.LiveSwitch`: the safe switch of the live engine's owner

The Tuning panel: the data it shows and where it comes from
===========================================================

The panel is drawn by ``ui/`` (not here). Everything it needs is below; services are async
on the app's event loop, store reads and writes are small blocking files (call them through
``asyncio.to_thread``), and psygnal signals are re-emitted on the GUI thread by the UI bridge.
The panel never polls: it redraws from the signals listed.

1. **Profiles** (a list with a detail pane)

   - rows: ``TuningStore(settings.data_dir).catalogue()`` → ``{name: core.profiles.Profile}``;
     per row ``name``, ``description``, ``parent``, ``platforms`` (badge "CUDA only" when it
     is ``{"cuda"}``), and "yours" when ``name not in core.profiles.PRESETS``;
   - detail: ``core.profiles.diff_against_parent(profile)`` (one line per change, the
     report's ladder reads as its five steps), and the check:
     ``checks.check_against_engine(settings, engine, model, profile, catalogue)`` →
     ``CheckReport.ok`` (green/red badge) and ``findings`` (``severity`` error / warning /
     note + ``message``; show errors first — they are sorted). Run the check off the loop
     (the first one reads the engine's help, seconds).
   - actions: *New from…* (``Profile(name, description, args, env, parent)`` →
     ``store.save_profile``; a ``UserError`` message goes to the dialog as is), *Delete*
     (``store.delete_profile``), *Switch the live engine to it* (5. below). Files the store
     could not read are in ``store.problems`` (show them as a warning line).

2. **Traffic shapes** (a list; the selected one as small charts)

   - rows: ``store.shapes()`` names; ``store.load_shape(name)`` → ``core.traffic.TrafficShape``;
     ``shape.summary_line()`` fits a row;
   - charts: ``prompt_tokens.histogram`` and ``completion_tokens.histogram`` are
     ``(upper_edge, count)`` pairs on log2 edges (two bar charts, x labelled ``≤ edge``);
     ``concurrency_series`` with ``bin_s`` seconds per point (a line chart);
   - numbers: ``requests``, ``sessions``, ``span_s``, ``request_rate_per_s``,
     ``prompt_tokens.p50/p90``, ``completion_tokens.p50/p90``, ``concurrency_mean/p90/max``,
     ``shared_prefix_share`` (0-1), ``prefix_cache_hit_rate`` (0-1 or None → "n/a") with
     ``prefix_cache_source``, ``guided_fraction`` (0-1: requests held to a structured-outputs
     constraint) with ``constraint_kinds``, ``prefix_reuse`` (per-request percent shared), ``notes``;
   - action *Record live traffic*: ``rec = TrafficRecorder(name, http=http, endpoint=endpoint)``;
     ``rec.attach_fleet(fleet)``; ``await rec.start()``; a counter shows ``len(rec.records)``
     (refresh on the fleet's ``SessionStatsChanged`` tick, not a timer); *Stop* →
     ``await rec.stop()``; ``store.save_shape(rec.shape())``.

3. **Results** (a table and a bar chart)

   - rows: ``store.results(limit=50)`` → ``results.BenchResult``; columns ``profile``,
     ``output_tok_s``, ``total_tok_s``, ``ttft.p50_ms/p99_ms``, ``tpot.p50_ms/p99_ms``,
     ``itl.p50_ms/p99_ms``, ``goodput_pct`` (with ``slo.describe()`` in the header tooltip),
     ``workload.describe()``, ``engine_version``, ``model``, ``hardware_key``, ``completed`` /
     ``failed`` / ``cut``, ``created_s``;
   - compare: select rows; ``results.comparison_table(selected)`` marks rows whose workload,
     model or hardware differ from the first; the chart shows ``output_tok_s`` per selected
     result, bars grouped by ``workload.describe()``;
   - action *Benchmark…*: a dialog with a shape (or synthetic input/output lengths,
     concurrency, rate), duration, SLO → ``bench.run_workload(http, endpoint, workload,
     bench.context_for(profile, engine, model), shape=…, slo=…, store=store)`` against the
     live endpoint, or inside ``bench.managed_engine(…)`` for a profile on a spare device.

4. **Autotuner** (a live table, the story's)

   - start: ``services.autotuner(tuning_settings(settings), engine, model, baseline, workload,
     shape=shape, traits=checks.model_traits(...), help_flags=..., candidates=
     autotune.candidates_for(...), budget_s=..., store=store, log_dir=...)``; ``await run()``
     in a named task the panel owns (cancel = *Stop*; the engine it started is stopped);
   - ``step_done(TuneStep)``: append a row ``step``, ``change``, ``output_tok_s``,
     ``delta_pct``, ``kept`` (bold when kept), ``runs_tok_s`` (tooltip), ``note`` (why a step
     was skipped, failed or stopped); ``progress(str)``: the status line;
   - end: ``TuneReport`` → ``table()`` lines, ``noise_pct`` ("changes are kept above 2 x
     noise"), ``best_profile`` → *Save as profile* / *Switch to it*.

5. **Switch** (a button with a stepper)

   - ``placement.plan_placement(engine.platform, live_env=..., cpu_count=...,
     gpus=placement.gpu_inventory())`` says where the new engine will run (``reason``);
   - ``SafeSwitch(http, live_launcher, factory, clients=[…ChatClients…],
     retarget=[fleet router update], side_by_side=placement.side_by_side,
     placement_env=placement.env)``; ``state_changed(SwitchPhase, detail)`` drives the
     stepper (starting new → probing → retargeting → draining → stopping old → done, or
     rolling back → rolled back);
   - end: ``SwitchReport.lines()``; headline ``largest_gap_s`` ("sessions paused at most …")
     next to ``baseline_gap_s``. The panel runs it through ``services.live_switch()``
     (:class:`live_switch.LiveSwitch`), which makes the new engine with the live engine's
     owner, moves sessions and meters with its ``endpoint_changed`` and has it adopt the
     engine that serves afterwards.
"""
