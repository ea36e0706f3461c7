"""Everything into logging: a rotating file in the data dir, warnings to stderr,
``faulthandler`` into a crash file. Qt messages are routed here by ``ui/``."""

from __future__ import annotations

import faulthandler
import logging
import logging.handlers
import sys
from typing import IO

from workstation.config import default_data_dir

_crash_file: IO[str] | None = None


def setup_logging(*, verbose: bool = False) -> None:
    global _crash_file
    root = logging.getLogger()
    if getattr(root, "_workstation_configured", False):
        return
    root.setLevel(logging.DEBUG)
    stderr = logging.StreamHandler(sys.stderr)
    stderr.setLevel(logging.DEBUG if verbose else logging.WARNING)
    stderr.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    root.addHandler(stderr)
    logs = default_data_dir() / "logs"
    try:
        logs.mkdir(parents=True, exist_ok=True)
        handler = logging.handlers.RotatingFileHandler(
            logs / "workstation.log", maxBytes=5_000_000, backupCount=3, encoding="utf-8"
        )
        handler.setLevel(logging.DEBUG)
        handler.setFormatter(
            logging.Formatter("%(asctime)s %(levelname)s %(name)s [%(threadName)s] %(message)s")
        )
        root.addHandler(handler)
        _crash_file = open(logs / "crash.log", "a", encoding="utf-8")  # noqa: SIM115
        faulthandler.enable(_crash_file)
    except OSError as exc:  # a read-only data dir must not stop the app
        logging.getLogger(__name__).warning("file logging disabled: %s", exc)
    for noisy in ("httpx", "httpcore", "asyncio", "git"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    root._workstation_configured = True  # type: ignore[attr-defined]
