"""Secret shapes are scrubbed from plain text and from JSON text (which stays valid JSON)."""

from __future__ import annotations

import json
import random

import orjson
import pytest

from workstation.core.secrets import Scrubber, might_contain_secret, scrub, scrub_bytes

PEM = ("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\n"
       "QyNTUxOQAAACBWmX0E1b2VBrRUXhVbJb8p1d0Sb4s4gqfwJ1d0Sb4s4gAAAJiZ\n-----END OPENSSH PRIVATE KEY-----")
RSA_CUT = "-----BEGIN RSA PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\nMIIEpAIBAAKCAQEA3Tz2mr7SZiAMfQyuvBjM9Oi\nZ1f8s9"

SECRETS = {
    "openai-key": "sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4zAB7CD0EF",
    "anthropic-key": "sk-ant-api03-Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0Fe-AbCd",
    "huggingface-token": "hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789",
    "github-token": "ghp_0123456789abcdefghijABCDEFGHIJ012345",
    "aws-access-key-id": "AKIAIOSFODNN7EXAMPLE",
    "slack-token": "xoxb-1234567890-0987654321-AbCdEfGhIjKl",
    "google-api-key": "AIzaSyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q",
}


@pytest.mark.parametrize("kind,value", sorted(SECRETS.items()))
def test_each_shape_is_replaced_with_its_kind(kind: str, value: str) -> None:
    text = f"token: {value} (from env)"
    out = scrub(text)
    assert value not in out and f"[REDACTED:{kind}]" in out and out.endswith("(from env)")


def test_keep_left_rules_keep_the_name() -> None:
    out = scrub("aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\n"
                "curl -H 'Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.e30.abc' x\n"
                "Authorization: Basic dXNlcjpwYXNzd29yZA==")
    assert "wJalrXUtnFEMI" not in out and "aws_secret_access_key = [REDACTED:aws-secret-key]" in out
    assert "eyJhbGci" not in out and "Bearer [REDACTED:bearer-token]" in out
    assert "dXNlcjpw" not in out and "[REDACTED:credentials]" in out


def test_private_key_blocks_whole_and_cut() -> None:
    out = scrub(f"before\n{PEM}\nafter")
    assert out == "before\n[REDACTED:private-key]\nafter"
    cut = scrub(f"x {RSA_CUT}")
    assert "MIIEpAIB" not in cut and "[REDACTED:private-key]" in cut


def test_ordinary_text_is_untouched() -> None:
    text = ("def ask_followup(task-runner): return disk-usage-monitor; sk-short; the highest "
            "gh_ value; AKIA; bearer of bad news; secret = compute()")
    assert scrub(text) == text
    assert not might_contain_secret("plain text without anything")


def test_exact_values_and_scrubber() -> None:
    s = Scrubber()
    s.add("devkey-0123456789")
    s.add("abc")  # too short to scrub safely: ignored
    assert s("key=devkey-0123456789 abc") == "key=[REDACTED:secret] abc"
    assert s.bytes(b"devkey-0123456789") == b"[REDACTED:secret]"


def test_json_text_stays_valid_and_clean() -> None:
    rng = random.Random(7)
    values = [*SECRETS.values(), PEM, RSA_CUT, "Bearer abcdefghijklmnop", "plain", "a\"quote\\", "line\nbreak"]
    for _ in range(300):
        parts = rng.choices(values, k=rng.randint(1, 5))
        doc = {"a": "\n".join(parts), "b": [rng.choice(values), {"c": "\t" + rng.choice(values)}],
               "msg": json.dumps({"content": " ".join(parts)})}
        raw = orjson.dumps(doc)
        cleaned = scrub_bytes(raw)
        parsed = json.loads(cleaned)  # still valid JSON
        flat = json.dumps(parsed) + parsed["msg"]
        for secret in SECRETS.values():
            assert secret not in flat
        assert "b3BlbnNzaC1rZXkt" not in flat and "MIIEpAIBAAKCAQEA" not in flat
        assert scrub(raw.decode()) == cleaned.decode()


def test_secret_after_an_escaped_newline_in_json() -> None:
    raw = orjson.dumps({"output": "token:\n" + SECRETS["openai-key"]})
    assert SECRETS["openai-key"].encode() not in scrub_bytes(raw)
