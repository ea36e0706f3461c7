"""Entry point of the frozen bundle: the same command line as the ``workstation`` script.

Before the app starts, it gives child processes back the environment the user launched the
bundle with. PyInstaller's bootloader points ``LD_LIBRARY_PATH`` at the bundle's own
libraries, and its Qt hook points ``QT_PLUGIN_PATH`` / ``QML2_IMPORT_PATH`` at the bundle's Qt.
Inherited, those would make the engine's Python (vLLM, torch), git, an agent's test run or
a video player load the bundle's libraries instead of their own. The bundle itself no longer
needs them at this point: the dynamic loader read its search path when the process started,
and Qt finds its plugins relative to its own library.
"""

import multiprocessing
import os
import sys


def _strip_bundle_paths(variable: str, bundle_dir: str) -> None:
    entries = [p for p in os.environ.get(variable, "").split(os.pathsep) if p]
    kept = [p for p in entries if not os.path.abspath(p).startswith(bundle_dir)]
    if kept:
        os.environ[variable] = os.pathsep.join(kept)
    else:
        os.environ.pop(variable, None)


def _restore_child_environment() -> None:
    bundle_dir = os.path.abspath(getattr(sys, "_MEIPASS", os.path.dirname(sys.executable)))
    original = os.environ.pop("LD_LIBRARY_PATH_ORIG", None)
    if original is not None:
        os.environ["LD_LIBRARY_PATH"] = original
    _strip_bundle_paths("LD_LIBRARY_PATH", bundle_dir)
    kept = os.environ.pop("_WORKSTATION_USER_ENV_KEPT", None) is not None  # pyi_rth_user_environment
    for variable in ("QT_PLUGIN_PATH", "QML2_IMPORT_PATH"):
        users_value = os.environ.pop("_WORKSTATION_USER_" + variable, None)
        if kept:
            if users_value is None:
                os.environ.pop(variable, None)
            else:
                os.environ[variable] = users_value
        _strip_bundle_paths(variable, bundle_dir)


if __name__ == "__main__":
    multiprocessing.freeze_support()
    _restore_child_environment()
    from workstation.cli import main

    sys.exit(main())
