"""Everything into logging: a rotating file in the data dir, warnings to stderr,
``faulthandler`` into a crash file. Qt messages are routed here by ``ui/``.

Every handler scrubs known secret shapes (``core/secrets.py``) and the exact values
registered with :func:`register_secret` (an engine's key) from messages and tracebacks."""

from __future__ import annotations

import faulthandler
import logging
import logging.handlers
import sys
from typing import IO

from workstation.config import default_data_dir
from workstation.core.secrets import Scrubber

_crash_file: IO[str] | None = None
_scrubber = Scrubber()


def register_secret(value: str) -> None:
    """Scrub ``value`` from every log record from now on (an engine's random key …)."""
    _scrubber.add(value)


class SecretFilter(logging.Filter):
    """Replaces secrets in a record's message, traceback and stack before any handler formats it."""

    def __init__(self, scrubber: Scrubber | None = None) -> None:
        super().__init__()
        self.scrubber = scrubber or _scrubber

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a bad format is reported by the handler as usual
            return True
        clean = self.scrubber(message)
        if clean != message:
            record.msg, record.args = clean, None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = self.scrubber(record.exc_text)
        if record.stack_info:
            record.stack_info = self.scrubber(record.stack_info)
        return True


def setup_logging(*, verbose: bool = False) -> None:
    global _crash_file
    root = logging.getLogger()
    if getattr(root, "_workstation_configured", False):
        return
    root.setLevel(logging.DEBUG)
    stderr = logging.StreamHandler(sys.stderr)
    stderr.setLevel(logging.DEBUG if verbose else logging.WARNING)
    stderr.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    stderr.addFilter(SecretFilter())
    root.addHandler(stderr)
    data = default_data_dir()
    logs = data / "logs"
    try:
        if not data.exists():  # everything under it is the user's own: keys, transcripts, logs
            data.mkdir(parents=True, mode=0o700)
        logs.mkdir(parents=True, exist_ok=True, mode=0o700)
        logs.chmod(0o700)  # logs are private to the user, like the settings file
        handler = logging.handlers.RotatingFileHandler(
            logs / "workstation.log", maxBytes=5_000_000, backupCount=3, encoding="utf-8"
        )
        handler.setLevel(logging.DEBUG)
        handler.addFilter(SecretFilter())
        handler.setFormatter(
            logging.Formatter("%(asctime)s %(levelname)s %(name)s [%(threadName)s] %(message)s")
        )
        root.addHandler(handler)
        _crash_file = open(logs / "crash.log", "a", encoding="utf-8")  # noqa: SIM115
        faulthandler.enable(_crash_file)
    except OSError as exc:  # a read-only data dir must not stop the app
        logging.getLogger(__name__).warning("file logging disabled: %s", exc)
    # qasync logs every callback it hands its executor at DEBUG, with the callback's repr (a
    # session's whole AgentConfig, ~3 KB): measured in the window with 32 demo sessions, 97 %
    # of the file log (1.8 MB in two minutes, so 5-MB rotations kept ~20 minutes of history),
    # formatted on the GUI thread
    for noisy in ("httpx", "httpcore", "asyncio", "git", "qasync"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    root._workstation_configured = True  # type: ignore[attr-defined]
