"""An HTTP answer's whole body before a deadline and under a size bound: a server that trickles bytes or
sends an endless body cannot hold the caller, nor fill its memory. Every answer llmreplay reads outside
the timed loop (target probe, /metrics, preflight, version lookups) goes through `fetch`, and every
urllib request through `open_url`, which refuses a redirect to another origin (the key stays home)."""

from __future__ import annotations

import http.client
import socket
import time
import urllib.error
import urllib.parse
import urllib.request


def read_whole(
    response: http.client.HTTPResponse,
    deadline: float,
    sock: socket.socket | None = None,
    max_bytes: int | None = None,
) -> bytes:
    """The body, or TimeoutError once time.monotonic() passes `deadline` (each read is bounded by
    the time left when `sock` is given), or ValueError beyond `max_bytes`."""
    parts, size = [], 0
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("no whole answer in time")
        if sock is not None:
            sock.settimeout(left)
        part = response.read1(65536)
        if not part:
            missing = getattr(response, "length", None)  # Content-Length bytes the peer never sent
            # read1 never marks a Content-Length body done (its last call asks for 0 bytes): closing does,
            # so the kept-alive connection can carry the next request instead of failing after sending it
            response.close()
            if missing:
                raise http.client.IncompleteRead(b"".join(parts), missing)
            return b"".join(parts)
        size += len(part)
        if max_bytes is not None and size > max_bytes:
            raise ValueError(f"an answer larger than {max_bytes >> 20} MB")
        parts.append(part)


# --- every answer llmreplay reads outside the timed loop: one bound, one redirect rule -------------

MAX_ANSWER_BYTES = 16 << 20  # a model list, a /metrics page, a preflight answer: far below this


class AnswerTooLarge(ValueError):
    """An answer past its size bound; the message names the URL and the bound (one line)."""


class AnswerTooSlow(TimeoutError):
    """No whole answer before the deadline; the message names the URL and the bound (one line)."""


class CrossOriginRedirect(urllib.error.HTTPError):
    """A redirect to another origin (scheme, host, port), refused: the request's credentials stay home."""


def origin(url: str) -> tuple[str, str, int]:
    """(scheme, host, port) with the scheme's default port filled in."""
    parts = urllib.parse.urlsplit(url)
    scheme = parts.scheme.lower()
    return scheme, (parts.hostname or "").lower(), parts.port or (443 if scheme == "https" else 80)


class _SameOriginRedirects(urllib.request.HTTPRedirectHandler):
    """Follows a redirect on the same origin; one to another origin is an error, never followed."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        target = urllib.parse.urljoin(req.full_url, newurl)
        if origin(target) != origin(req.full_url):
            scheme, host, port = origin(target)
            raise CrossOriginRedirect(
                req.full_url,
                code,
                f"redirect to another origin {scheme}://{host}:{port} refused",
                headers,
                fp,
            )
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is not None:
            fp.close()  # urllib reads the redirect's body to its end next: an endless one must not hold us
        return new


_OPENER = urllib.request.build_opener(_SameOriginRedirects)


def open_url(request: urllib.request.Request, timeout_s: float):
    """urlopen for every request llmreplay sends with urllib: redirects to another origin refused
    (CrossOriginRedirect, an HTTPError), HTTP errors raised as urlopen raises them."""
    return _OPENER.open(request, timeout=timeout_s)


def fetch(
    request: urllib.request.Request, timeout_s: float, max_bytes: int = MAX_ANSWER_BYTES
) -> tuple[http.client.HTTPResponse, bytes]:
    """(response, whole body) of `request`, within `timeout_s` all told and `max_bytes`: AnswerTooSlow /
    AnswerTooLarge name the URL and the bound; an HTTP error status raises urllib's HTTPError, whose
    body `error_body` reads under the same bound."""
    deadline = time.monotonic() + timeout_s
    with open_url(request, timeout_s) as response:
        return response, read_bounded(response, request.full_url, deadline, max_bytes)


def read_bounded(response, url: str, deadline: float, max_bytes: int = MAX_ANSWER_BYTES) -> bytes:
    """read_whole on a urllib answer (or HTTPError), its errors as one line naming `url` and the bound."""
    raw = getattr(getattr(response, "fp", None), "raw", None)
    sock = getattr(raw, "_sock", None)  # urllib's answer reads a socket.SocketIO
    try:
        return read_whole(response, deadline, sock, max_bytes)
    except TimeoutError:
        raise AnswerTooSlow(f"{url}: no whole answer within the time bound") from None
    except ValueError:
        raise AnswerTooLarge(f"{url}: the answer is larger than the {_size(max_bytes)} bound") from None


def error_body(exc: urllib.error.HTTPError, timeout_s: float, max_bytes: int = 65_536) -> bytes:
    """An HTTP error's body, at most `max_bytes` (the rest dropped) within `timeout_s`; b"" on failure."""
    deadline, parts, size = time.monotonic() + timeout_s, [], 0
    fp = getattr(exc, "fp", None)
    read = getattr(fp, "read1", None) or getattr(fp, "read", None)
    if read is None:
        return b""
    try:
        while size < max_bytes and time.monotonic() < deadline:
            part = read(min(65536, max_bytes - size))
            if not part:
                break
            parts.append(part)
            size += len(part)
    except (OSError, http.client.HTTPException, ValueError, AttributeError):
        pass
    return b"".join(parts)[:max_bytes]


def _size(n: int) -> str:
    return f"{n >> 20} MB" if n >= 1 << 20 else f"{n >> 10} KB" if n >= 1 << 10 else f"{n} bytes"
