"""Secrets out of free text before it is stored: an error body may echo the request's API key.

Two passes: the exact secret values the caller knows (the API key, header values), then patterns
that look like credentials whoever they belong to (`sk-...` keys, bearer tokens, `api_key=...`,
`Authorization: ...`). Pure and light (the replayer's workers import it: no pyarrow, no numpy).
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Iterable

REDACTED = "[redacted]"
MIN_SECRET_CHARS = 6  # shorter known values ("1", "on") would blank out ordinary words
# Headers whose values are not secrets: sent by llmreplay itself, the same for everyone.
PUBLIC_HEADERS = frozenset({"user-agent", "content-type", "accept", "content-length", "host"})

_PATTERNS = (
    # Authorization / API-key style fields, in JSON, headers or query strings: keep the name, drop the value.
    re.compile(
        r"(?i)((?:authorization|proxy-authorization|x-api-key|api[_-]?key|access[_-]?token|secret|password)"
        r"[\"']?\s*[:=]\s*[\"']?)(?:bearer\s+|basic\s+)?[^\s\"',;&}]+"
    ),
    re.compile(r"(?i)(\b(?:bearer|basic)\s+)[A-Za-z0-9._~+/=-]{6,}"),
    # Provider key shapes: OpenAI / Anthropic (sk-...), Google (AIza...), GitHub, Slack, AWS access keys.
    re.compile(r"()\bsk-[A-Za-z0-9_-]{6,}"),
    re.compile(r"()\bAIza[0-9A-Za-z_-]{20,}"),
    re.compile(r"()\bgh[pousr]_[A-Za-z0-9]{20,}"),
    re.compile(r"()\bxox[abprs]-[A-Za-z0-9-]{10,}"),
    re.compile(r"()\bAKIA[0-9A-Z]{16}\b"),
    # JSON web tokens: three base64url parts, the first one a JSON header.
    re.compile(r"()\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"),
)


def secret_values(headers: Iterable[tuple[str, str]], api_key: str | None = None) -> tuple[str, ...]:
    """The values to blank out of anything a request's answer says: the API key and every header
    value except the public ones (a `Bearer x` value also as its bare token x). Longest first."""
    values = set()
    if api_key:
        values.add(api_key)
    for name, value in headers:
        if name.strip().lower() in PUBLIC_HEADERS:
            continue
        value = value.strip()
        values.add(value)
        scheme, _, token = value.partition(" ")
        if token and scheme.lower() in ("bearer", "basic"):
            values.add(token.strip())
    return tuple(sorted((v for v in values if len(v) >= MIN_SECRET_CHARS), key=len, reverse=True))


def scrub_secrets(text: str, known: Iterable[str] = ()) -> str:
    """`text` with every known secret value and every credential-looking string replaced by [redacted]."""
    for value in known:
        if value in text:
            text = text.replace(value, REDACTED)
    for pattern in _PATTERNS:
        text = pattern.sub(lambda m: m.group(1) + REDACTED, text)
    return text


_JSON_SLASH = re.compile(r"\\+/")
_JSON_UNICODE = re.compile(r"\\u([0-9a-fA-F]{4})")
_PERCENT = re.compile(r"%[0-9a-fA-F]{2}")


def decoded(text: str) -> str:
    """`text` with the encodings a server may wrap an echoed key in undone, so the scrub sees the key
    whole: JSON's `\\/` and `\\uXXXX` escapes (a quote, backslash or control character stays escaped: the
    text stays the JSON it was) and percent-encoding."""
    text = _JSON_SLASH.sub("/", text)
    text = _JSON_UNICODE.sub(_unicode, text)
    if _PERCENT.search(text) is not None:
        text = urllib.parse.unquote(text, errors="replace")
    return text


def _unicode(match: re.Match) -> str:
    char = chr(int(match.group(1), 16))
    return match.group(0) if char in "\"\\" or char < " " or "\ud800" <= char <= "\udfff" else char


def scrubbed_excerpt(text: str, known: Iterable[str] = (), max_bytes: int | None = None) -> str:
    """What an answer said, safe to show or store: decoded, then scrubbed, then cut to `max_bytes` of
    UTF-8 (in that order: a key escaped or straddling the cut is blanked whole, not shown in part)."""
    text = scrub_secrets(decoded(text), known)
    if max_bytes is None or len(text) <= max_bytes // 4:
        return text
    return text.encode()[:max_bytes].decode("utf-8", "ignore")
