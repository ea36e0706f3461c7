"""Secrets never reach the log file, the stored transcript or a world-readable settings file."""

from __future__ import annotations

import logging
import stat
from pathlib import Path

import orjson

from workstation.config import Settings, save_settings
from workstation.core import agent_events as ev
from workstation.fleet.event_codec import decode, encode
from workstation.logging_setup import SecretFilter, register_secret

KEY = "sk-proj-Zz9Yy8Xx7Ww6Vv5Uu4Tt3Ss2Rr1Qq0Pp"
PEM = "-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA3Tz2mr7SZiAMfQyuvBjM9Oi\n-----END RSA PRIVATE KEY-----"


def test_log_records_are_scrubbed_in_messages_args_and_tracebacks(tmp_path: Path) -> None:
    path = tmp_path / "app.log"
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.addFilter(SecretFilter())
    handler.setFormatter(logging.Formatter("%(message)s"))
    logger = logging.getLogger("test.secret.wiring")
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    register_secret("engine-key-abcdef123456")
    try:
        logger.info("calling with %s", KEY)
        logger.warning("engine said: key=%s", "engine-key-abcdef123456")
        try:
            raise RuntimeError(f"failed with Authorization: Bearer {KEY}\n{PEM}")
        except RuntimeError:
            logger.exception("request failed")
    finally:
        logger.removeHandler(handler)
        handler.close()
    text = path.read_text()
    assert KEY not in text and "engine-key-abcdef123456" not in text and "MIIEpAIB" not in text
    assert "[REDACTED:openai-key]" in text and "[REDACTED:secret]" in text
    assert "[REDACTED:private-key]" in text and "RuntimeError" in text


def test_stored_transcript_events_are_scrubbed_and_still_decode() -> None:
    message = {"role": "tool", "content": f"$ cat .env\nOPENAI_API_KEY={KEY}\n{PEM}\n"}
    events = [
        ev.ToolCallFinished("s1", "c1", "execute_command", "ok", f"OPENAI_API_KEY={KEY}\n{PEM}", 0.1),
        ev.MessageAppended("s1", 3, "tool", orjson.dumps(message).decode()),
        ev.ToolCallStarted("s1", "c2", "execute_command",
                           {"command": f"curl -H 'Authorization: Bearer {KEY}' http://x"}, "curl"),
    ]
    for event in events:
        kind, body = encode(event)
        assert KEY.encode() not in body and b"MIIEpAIB" not in body
        back = decode(kind, orjson.loads(body))
        assert type(back) is type(event)
    stored = decode(*[(k, orjson.loads(b)) for k, b in [encode(events[1])]][0])
    restored = orjson.loads(stored.message_json)  # the history the agent resumes from parses
    assert restored["role"] == "tool" and "[REDACTED:openai-key]" in restored["content"]


def test_settings_file_is_private(tmp_path: Path) -> None:
    path = save_settings(Settings(data_dir=tmp_path))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_app_logging_is_private_and_scrubbed(tmp_path: Path) -> None:
    """The app's own logging set-up (a child process: it configures the root logger)."""
    import os
    import subprocess
    import sys

    code = ("import logging; from workstation.logging_setup import setup_logging; setup_logging(); "
            f"logging.getLogger('workstation.test').warning('engine answered with key %s', {KEY!r})")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "WORKSTATION_DATA_DIR": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr
    logs = tmp_path / "logs"
    assert stat.S_IMODE(logs.stat().st_mode) == 0o700
    text = (logs / "workstation.log").read_text()
    assert "engine answered with key [REDACTED:openai-key]" in text and KEY not in text
    assert KEY not in proc.stderr and "[REDACTED:openai-key]" in proc.stderr


def test_the_file_log_leaves_out_the_event_loops_own_debug_chatter(tmp_path) -> None:
    """qasync's per-callback DEBUG lines were 97 % of the file log of a 32-session window."""
    import os
    import subprocess
    import sys

    code = ("import logging; from workstation.logging_setup import setup_logging; setup_logging(); "
            "logging.getLogger('qasync.QThreadExecutor').debug('Submitting callback %s', 'x' * 3000); "
            "logging.getLogger('workstation.test').debug('kept')")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "WORKSTATION_DATA_DIR": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr
    text = (tmp_path / "logs" / "workstation.log").read_text()
    assert "kept" in text and "Submitting callback" not in text
