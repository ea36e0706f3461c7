"""``workstation engine setup|serve|profiles`` and ``workstation model prepare``."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import time

from workstation.config import load_settings
from workstation.core.profiles import PRESETS, diff_against_parent, engines_label


def register(subparsers: argparse._SubParsersAction) -> None:
    engine = subparsers.add_parser("engine", help="set up, run and inspect the vLLM engine")
    verbs = engine.add_subparsers(dest="engine_verb", metavar="ACTION", required=True)

    setup = verbs.add_parser("setup", help="create the managed engine environment (idempotent)")
    setup.add_argument("--platform", choices=["cpu", "cuda"], help="default: cuda where an NVIDIA GPU is found")
    setup.add_argument("--force", action="store_true", help="rebuild even if it looks ready")
    setup.set_defaults(func=_setup)

    serve = verbs.add_parser("serve", help="run the managed engine in the foreground until Ctrl-C")
    serve.add_argument("--model", help="smollm2, tiny, a model directory, or a model id")
    serve.add_argument("--profile", help=f"a preset ({', '.join(PRESETS)}) or one of your saved profiles")
    serve.add_argument("--port", type=int, default=None)
    serve.set_defaults(func=_serve)

    profiles = verbs.add_parser("profiles", help="list tuning profiles and the flags each gives, per platform")
    profiles.add_argument("--platform", choices=["cpu", "cuda"],
                          help="only this platform (default: both; this machine's engine first)")
    profiles.add_argument("--model", help="model to size for (default: the configured one)")
    profiles.add_argument("--json", action="store_true", help="a JSON list of {name, platform, args, env, validated, engines_per_gpu}")
    profiles.set_defaults(func=_profiles)

    model = subparsers.add_parser("model", help="prepare the embedded models")
    mverbs = model.add_subparsers(dest="model_verb", metavar="ACTION", required=True)
    prepare = mverbs.add_parser("prepare", help="prepare smollm2 (default) and/or tiny")
    prepare.add_argument("names", nargs="*", metavar="NAME", help="smollm2 (default), tiny, and/or tiny-lora (a LoRA adapter for tiny, built with peft)")
    prepare.add_argument("--force", action="store_true", help="rebuild even if it checks out")
    prepare.set_defaults(func=_prepare)


def _say(msg: str) -> None:
    print(msg, flush=True)


def _setup(args: argparse.Namespace) -> int:
    from workstation.engine.environment import setup_engine

    settings = load_settings()
    started = time.monotonic()
    setup_engine(settings, platform=args.platform, progress=_say, force=args.force)
    _say(f"engine setup took {time.monotonic() - started:.0f} s")
    return 0


def _prepare(args: argparse.Namespace) -> int:
    from workstation.engine.environment import require_engine
    from workstation.engine.adapter_prep import BUILTIN_ADAPTERS, prepare_adapter
    from workstation.engine.models import prepare_model

    settings = load_settings()
    engine = require_engine(settings)
    for name in args.names or ["smollm2"]:
        started = time.monotonic()
        if name in BUILTIN_ADAPTERS:
            prepare_adapter(settings, engine, name, progress=_say, force=args.force)
        else:
            prepare_model(settings, engine, name, progress=_say, force=args.force)
        _say(f"{'adapter' if name in BUILTIN_ADAPTERS else 'model'} '{name}' took {time.monotonic() - started:.0f} s")
    return 0


def _profiles(args: argparse.Namespace) -> int:
    import json

    from workstation.core.profiles import Profile, flatten
    from workstation.engine.profile_listing import list_profiles
    from workstation.tuning.loadgen import agent_sequences_per_request
    from workstation.tuning.store import TuningStore

    settings = load_settings()
    store = TuningStore(settings.data_dir)
    catalogue = store.catalogue()  # presets and the saved profiles, read once

    def saved(platform: str) -> dict[str, Profile]:
        """The user's profiles that run on ``platform``, folded for it (what the host runs);
        one whose ancestry does not fold (a hand-edited parent) is skipped and said."""
        out: dict[str, Profile] = {}
        for name, profile in catalogue.items():
            if name in PRESETS or platform not in profile.platforms:
                continue
            try:
                out[name] = flatten(profile, catalogue, platform=platform)
            except ValueError as exc:
                _say(f"skipped: profile '{name}': {exc}")
        return out

    rows = list_profiles(settings, platforms=[args.platform] if args.platform else None, model=args.model,
                         sequences_per_session=lambda spec: agent_sequences_per_request(settings, spec), saved=saved)
    for problem in store.problems:
        _say(f"skipped: {problem}")
    if args.json:
        print(json.dumps([row.to_json() for row in rows], indent=1))
        return 0
    platform = None
    for row in rows:
        if row.platform != platform:
            platform = row.platform
            _say(f"== {platform}: {row.engine_note}")
            for note in row.sizing_notes:
                _say(f"   sizing: {note}")
        profile = catalogue[row.name]
        parent = f" (from {profile.parent})" if profile.parent else ""
        check = "validated" if row.validated else f"NOT validated: {row.validation_note}"
        _say(f"{row.name}{parent}: {profile.description}{'  [yours]' if row.yours else ''}")
        for line in diff_against_parent(profile):
            _say(f"    change  {line}")
        if row.engines_per_gpu > 1:
            _say(f"    engines {engines_label(row.engines_per_gpu)} (the flags are each one's)")
        _say(f"    flags   {' '.join(row.args) or '(none)'}")
        if row.env:
            _say(f"    env     {' '.join(f'{k}={v}' for k, v in row.env.items())}")
        _say(f"    {check}")
    return 0


def _serve(args: argparse.Namespace) -> int:
    """The app's own engine host in the foreground: a preset or one of the user's saved
    profiles (a tune's ``tuned-default``), every engine the profile places (its
    ``engines_per_gpu`` on each GPU, ``engine.replicas``), as the window would start them."""
    from workstation.services import Services

    settings = load_settings()
    if args.port is not None:
        settings = settings.model_copy(update={"engine": settings.engine.model_copy(update={"port": args.port})})

    async def run() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        async with Services(settings) as services:
            host = await services.engine(model=args.model, profile=args.profile)
            launchers: list = []
            try:
                await host.start(progress=_say)
                launchers = [e for e in (host.launcher, *host.replicas) if e is not None]
                served = host.endpoints()
                many = f" ({len(served)} engines: the profile places them so)" if len(served) > 1 else ""
                for endpoint in served:
                    _say(f"serving {endpoint.model} at {endpoint.v1}{many}")
                _say("API key in the app only; Ctrl-C stops")
                waiter = asyncio.create_task(stop.wait(), name="serve-stop")
                while not stop.is_set() and all(e.alive() for e in launchers):
                    with contextlib.suppress(asyncio.TimeoutError):
                        await asyncio.wait_for(asyncio.shield(waiter), timeout=1.0)
                waiter.cancel()
                if not stop.is_set():
                    _say("an engine stopped by itself: its log is under the logs folder")
            finally:
                await host.stop()
                _say("engine stopped" if len(launchers) < 2 else "engines stopped")

    asyncio.run(run())
    return 0
