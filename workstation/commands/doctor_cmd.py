"""``workstation doctor``: what was found, in plain words."""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import sys

from workstation import __version__
from workstation.config import load_settings
from workstation.core.errors import UserError


def register(subparsers: argparse._SubParsersAction) -> None:
    doctor = subparsers.add_parser("doctor", help="report Python, Qt, engine, models, GPU, command sandbox and disk")
    doctor.add_argument("--json", action="store_true", help="one JSON object instead of sentences")
    doctor.set_defaults(func=_doctor)


def gpu_report() -> dict:
    """GPU and driver through the app's one NVML entry point; 'no GPU' where there is none."""
    from workstation.telemetry.nvml import NvmlReader

    reader = NvmlReader()
    try:
        reader.open()
        snapshot = reader.read()
    finally:
        reader.close()
    gpus = [
        {"index": d.index, "name": d.name,
         "memory_total_gb": round(d.memory_total_bytes / 1e9, 1) if d.memory_total_bytes else None}
        for d in snapshot.devices
    ]
    return {"gpus": gpus, "driver": snapshot.driver_version, "state": snapshot.state.value,
            "reason": "" if gpus else snapshot.message}


def sandbox_report(settings) -> dict:  # noqa: ANN001 - Settings, imported lazily with the rest
    """Whether agents' commands are sandboxed here, and why not (``agent/sandbox_status.py``)."""
    import asyncio

    from workstation.agent.sandbox import SandboxPolicy
    from workstation.agent.sandbox_status import sandbox_status

    return asyncio.run(sandbox_status(SandboxPolicy.from_settings(settings))).as_dict()


def qt_report() -> dict:
    """Qt's platform plugin: does it load, which system libraries does it lack, does a window
    start on it (``ui/qt_platform.py``; a child process takes Qt's abort, not the doctor)."""
    from workstation.ui.qt_platform import check_platform, window_starts

    report = window_starts(check_platform())
    return {**report.as_dict(), "fix": report.fix}


def collect() -> dict:
    from workstation.engine.environment import find_engine, has_nvidia_gpu
    from workstation.engine.models import BUILTIN_MODELS, check_model_dir, model_dir

    settings = load_settings()
    report: dict = {
        "workstation": __version__,
        "python": platform.python_version(),
        "python_path": sys.executable,
        "qt": qt_report(),
        "data_dir": str(settings.data_dir),
    }
    try:
        engine = find_engine(settings)
        report["engine"] = (
            {"python": str(engine.python), "version": engine.version, "platform": engine.platform,
             "managed": engine.managed}
            if engine else None
        )
    except UserError as exc:
        report["engine"] = {"error": str(exc)}
    report["models"] = {
        name: check_model_dir(model_dir(settings, name)) or "ready" for name in BUILTIN_MODELS
    }
    report["gpu"] = gpu_report()
    report["nvidia_driver_present"] = has_nvidia_gpu()
    report["sandbox"] = sandbox_report(settings)
    target = settings.data_dir if settings.data_dir.exists() else settings.data_dir.parent
    while not target.exists():
        target = target.parent
    usage = shutil.disk_usage(target)
    report["disk"] = {"path": str(target), "free_gb": round(usage.free / 1e9, 1), "total_gb": round(usage.total / 1e9, 1)}
    return report


def _doctor(args: argparse.Namespace) -> int:
    report = collect()
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    qt = report["qt"]
    version = qt["version"]
    print(f"workstation {report['workstation']} on Python {report['python']} ({report['python_path']})")
    if version and sys.version_info[:2] == (3, 11) and version.startswith("6.12.0"):
        print(f"Qt: PySide6 {version} — this version crashes on Python 3.11; install 6.11.x")
    else:
        print(f"Qt: PySide6 {version}" if version else "Qt: PySide6 is not installed")
    if qt["platform_plugin_ok"]:
        started = {True: ", a window starts", False: f"; {qt['start_message']}", None: ""}[qt["window_starts"]]
        print(f"  platform {qt['platform']}: the plugin loads{started}")
    elif version:
        print(f"  platform {qt['platform']}: {qt['message']}")
        if qt["fix"]:
            print(f"  to fix it: {qt['fix']} (scripts/setup.sh does it where it can)")
    print(f"data directory: {report['data_dir']}")
    engine = report["engine"]
    if engine is None:
        print("engine: not set up — run `workstation engine setup`")
    elif "error" in engine:
        print(f"engine: {engine['error']}")
    else:
        kind = "managed" if engine["managed"] else "your own install"
        print(f"engine: vLLM {engine['version']} ({engine['platform']}, {kind}) at {engine['python']}")
    for name, state in report["models"].items():
        hint = "" if state == "ready" else f" — run `workstation model prepare {name}`"
        print(f"model {name}: {state}{hint}")
    gpu = report["gpu"]
    if gpu.get("gpus"):
        print(f"GPU: NVIDIA driver {gpu.get('driver')}")
        for g in gpu["gpus"]:
            print(f"  GPU{g['index']}: {g['name']}, {g['memory_total_gb']} GB")
    else:
        print(f"GPU: {gpu.get('reason', 'no GPU found')} — the engine runs on the CPU")
    sandbox = report["sandbox"]
    print(f"command sandbox: {sandbox['summary']}")
    if sandbox["fix"]:
        print(f"  to confine them: {sandbox['fix']}")
    d = report["disk"]
    print(f"disk: {d['free_gb']} GB free of {d['total_gb']} GB at {d['path']}")
    return 0
