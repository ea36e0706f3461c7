"""Scrubbing known secret shapes out of text (pure: no I/O, no state but what you give it).

What is recognised (each replaced by a marker such as ``[REDACTED:openai-key]``):

- API keys by their published prefixes: OpenAI/Anthropic ``sk-…``, Hugging Face ``hf_…``,
  GitHub ``ghp_/gho_/ghu_/ghs_/ghr_…`` and ``github_pat_…``, Slack ``xox?-…``, Google
  ``AIza…``, Stripe ``sk_live_/rk_live_…``, GitLab ``glpat-…``;
- AWS access key ids (``AKIA…``/``ASIA…``) and the 40-character secret after an
  ``aws_secret_access_key`` name;
- ``Bearer …`` / ``Authorization: Basic|Token …`` credentials;
- PEM / PGP private key blocks (also when the END line was cut off);
- any exact values the caller knows are secret (``Scrubber(extra=…)``: the engine's key).

The markers and every matched span avoid ``"`` and never start or end inside a JSON escape,
so scrubbing JSON *text* keeps it valid JSON: the store scrubs serialized events in place.
Text without any of the shapes' fixed prefixes skips the regular expression altogether
(a few ``in`` checks), so megabytes of command output cost little.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

# a token may start the text, follow a non-word character, or follow a JSON escape (\n, \t, \r)
_START = r"(?:(?<=\\[ntr])|(?<![A-Za-z0-9_]))"
_END = r"(?![A-Za-z0-9_])"
_PEM_HEAD = r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----"
_PEM_TAIL = r"-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----"
_NL = r"(?:\r?\n|(?:\\+r)?\\+n)"  # a newline, raw or JSON-escaped (once or more)

_RULES: tuple[tuple[str, str], ...] = (
    # a whole private key block; its body never holds a quote, so it cannot cross JSON strings
    ("private-key", _PEM_HEAD + r"[^\"]{0,20000}?" + _PEM_TAIL),
    # a block whose END line was cut off (capped output): header lines and base64 lines
    ("private-key", _PEM_HEAD + rf"(?:{_NL}[A-Za-z-]+: [^\n\\\"]*)*(?:{_NL}[A-Za-z0-9+/=]{{16,}})*"),
    ("anthropic-key", _START + r"sk-ant-[A-Za-z0-9_-]{20,}"),
    ("openai-key", _START + r"sk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,}"),
    ("stripe-key", _START + r"(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,}"),
    ("huggingface-token", _START + r"hf_[A-Za-z0-9]{30,}" + _END),
    ("github-token", _START + r"gh[pousr]_[A-Za-z0-9]{36,}" + _END),
    ("github-token", _START + r"github_pat_[A-Za-z0-9_]{22,}"),
    ("gitlab-token", _START + r"glpat-[A-Za-z0-9_-]{20,}"),
    ("slack-token", _START + r"xox[abposr]-[A-Za-z0-9-]{10,}"),
    ("google-api-key", _START + r"AIza[0-9A-Za-z_-]{35}" + _END),
    ("aws-access-key-id", _START + r"(?:AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16}" + _END),
)

# rules that keep their left part (the name or scheme) and replace only the value
_KEEP_LEFT: tuple[tuple[str, str], ...] = (
    ("aws-secret-key",
     r"(?i:aws_secret_access_key|aws_secret_key|secret_access_key)(?:\\?[\"'])?\s*[:=]\s*(?:\\?[\"'])?"
     r"(?=[A-Za-z0-9/+=]{40}(?![A-Za-z0-9/+=]))"),
    ("bearer-token", r"(?i:\bbearer)\s+(?=[A-Za-z0-9._~+/=-]{8,})"),
    ("credentials", r"(?i:\bauthorization)(?:\\?[\"'])?\s*[:=]\s*(?:\\?[\"'])?(?i:basic|token)\s+"
                    r"(?=[A-Za-z0-9._~+/=-]{8,})"),
)
_VALUE = {"aws-secret-key": r"[A-Za-z0-9/+=]{40}", "bearer-token": r"[A-Za-z0-9._~+/=-]{8,}",
          "credentials": r"[A-Za-z0-9._~+/=-]{8,}"}

TRIGGERS: tuple[str, ...] = (
    "PRIVATE KEY", "sk-", "sk_", "rk_", "hf_", "ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_",
    "glpat-", "xox", "AIza",
    "AKIA", "ASIA", "ABIA", "ACCA", "ecret", "ECRET", "earer", "EARER", "uthorization", "UTHORIZATION",
)
"""Fixed pieces of which at least one occurs in every match (cheap pre-check)."""


def _pattern() -> str:
    parts = [f"(?P<r{i}>{rx})" for i, (_, rx) in enumerate(_RULES)]
    parts += [f"(?P<k{i}>{rx}){_VALUE[name]}" for i, (name, rx) in enumerate(_KEEP_LEFT)]
    return "|".join(parts)


_RX = re.compile(_pattern())
_RXB = re.compile(_pattern().encode())
_BTRIGGERS = tuple(t.encode() for t in TRIGGERS)


def marker(kind: str) -> str:
    return f"[REDACTED:{kind}]"


def _replace(match: re.Match[str]) -> str:
    name = match.lastgroup or ""
    index = int(name[1:])
    if name[0] == "r":
        return marker(_RULES[index][0])
    left = match.group(name)
    return left + marker(_KEEP_LEFT[index][0])


def _replace_b(match: re.Match[bytes]) -> bytes:
    name = match.lastgroup or ""
    index = int(name[1:])
    if name[0] == "r":
        return marker(_RULES[index][0]).encode()
    return match.group(name) + marker(_KEEP_LEFT[index][0]).encode()


def might_contain_secret(text: str) -> bool:
    return any(t in text for t in TRIGGERS)


def scrub(text: str, extra: Iterable[str] = ()) -> str:
    """``text`` with every known secret shape (and every value in ``extra``) replaced."""
    for value in extra:
        if value and len(value) >= 6 and value in text:
            text = text.replace(value, marker("secret"))
    if not might_contain_secret(text):
        return text
    return _RX.sub(_replace, text)


def scrub_bytes(data: bytes, extra: Iterable[bytes] = ()) -> bytes:
    """:func:`scrub` for UTF-8 bytes (serialized JSON), without decoding them."""
    for value in extra:
        if value and len(value) >= 6 and value in data:
            data = data.replace(value, marker("secret").encode())
    if not any(t in data for t in _BTRIGGERS):
        return data
    return _RXB.sub(_replace_b, data)


class Scrubber:
    """:func:`scrub` plus exact values learnt at run time (an engine's key, a user's token)."""

    def __init__(self, extra: Iterable[str] = ()) -> None:
        self._extra: set[str] = {v for v in extra if v}

    def add(self, value: str) -> None:
        """Also scrub ``value`` from now on (values shorter than 6 characters are ignored)."""
        if value and len(value) >= 6:
            self._extra.add(value)

    def discard(self, value: str) -> None:
        self._extra.discard(value)

    def __call__(self, text: str) -> str:
        return scrub(text, self._extra)

    def bytes(self, data: bytes) -> bytes:
        return scrub_bytes(data, (v.encode() for v in self._extra))
