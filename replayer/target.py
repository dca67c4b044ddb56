"""The target engine, probed before any clock starts: base URL, host name, model list, engine and the
metrics endpoint to scrape (--server-metrics, else its own); a bad answer is one BadInput line.

Blocking HTTP is fine here: it runs once, before the run.
"""

from __future__ import annotations

import dataclasses
import http.client
import json
import socket
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass

from llmreplay.bounded_read import AnswerTooLarge, AnswerTooSlow, fetch
from llmreplay.engines import BY_NAME, DEFAULT, ENGINES, Engine, Lookup, Probe
from llmreplay.errors import BadInput
from llmreplay.options import http_url
from llmreplay.probe_ids import probe_headers

PROBE_TIMEOUT_S = 2.0  # each engine-specific GET, once, before the clock


@dataclass(frozen=True, slots=True)
class TargetInfo:
    base_url: str
    models: tuple[str, ...]
    engine: str  # a name in llmreplay.engines
    detected_from: str  # "flag" | "owned_by" | "server header" | "GET <path>" | "default"
    metrics_url: str | None = None  # the Prometheus endpoint scraped during the run (with_server_metrics)
    metrics_from: str | None = None  # "flag" | "default" (the engine row's metrics path on the target)
    metrics_warning: str | None = None  # why the default metrics endpoint is not scraped


def normalise_base_url(url: str) -> str:
    """`http://h:p`, `http://h:p/` and `http://h:p/v1` all mean the same server root."""
    parsed = http_url(url, "--target")
    path = parsed.path.rstrip("/")
    if path.endswith("/v1"):
        path = path[: -len("/v1")]
    return f"{parsed.scheme}://{parsed.netloc}{path}"


def check_resolves(url: str, flag: str = "--target") -> None:
    """The URL's host name resolves (an unknown host is bad input, not a run of connect errors)."""
    parsed = urllib.parse.urlsplit(url)
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    try:
        socket.getaddrinfo(parsed.hostname, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        reason = exc.strerror if isinstance(exc, socket.gaierror) else "not a valid host name"
        raise BadInput(f"{flag} {url}: cannot resolve host {parsed.hostname} ({reason})") from None


def _fetch(request: urllib.request.Request, timeout_s: float) -> tuple[http.client.HTTPResponse, bytes]:
    """The whole body within `timeout_s` all told (llmreplay.bounded_read: redirects to another origin
    refused); every malformed answer (bad status line, huge or too many headers, a short body, not
    HTTP at all, too slow) raises ProbeFailed with a one-line reason; an answer past the size bound is
    BadInput whatever the caller does with a failed probe (an endless body is no engine's answer)."""
    try:
        return fetch(request, timeout_s)
    except AnswerTooLarge as exc:
        raise BadInput(str(exc)) from None
    except AnswerTooSlow as exc:
        raise ProbeFailed(str(exc)) from None
    except urllib.error.HTTPError as exc:
        raise ProbeFailed(f"HTTP {exc.code} {exc.reason}") from None
    except urllib.error.URLError as exc:
        raise ProbeFailed(str(getattr(exc.reason, "strerror", None) or exc.reason)) from None
    except http.client.HTTPException as exc:
        name, text = type(exc).__name__, _short(exc)
        text = text.removeprefix(name).strip("() ")  # IncompleteRead repeats its own name
        raise ProbeFailed(f"malformed HTTP answer: {name} {text}".strip()) from None
    except (OSError, ValueError) as exc:
        raise ProbeFailed(f"{type(exc).__name__}: {_short(exc)}") from None


class ProbeFailed(Exception):
    """A probe got no usable answer; the message is the reason, one line."""


def _short(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= 120 else text[:117] + "..."


def probe_target(base_url: str, engine: str, api_key: str | None, timeout_s: float = 10.0) -> TargetInfo:
    """GET /v1/models for the model names and the engine; `engine` other than 'detect' wins."""
    check_resolves(base_url)
    try:
        response, body = _fetch(_request(base_url + "/v1/models", api_key), timeout_s)
        server = response.headers.get("Server", "")
        payload = json.loads(body)
    except (ProbeFailed, ValueError) as exc:
        if engine != "detect":
            return TargetInfo(base_url, (), engine, "flag")
        reason = exc if isinstance(exc, ProbeFailed) else f"not JSON: {_short(exc)}"
        raise BadInput(
            f"--target {base_url}: GET /v1/models failed ({reason}); pass --engine (and --model) to skip detection"
        ) from None
    entries = payload.get("data") if isinstance(payload, dict) else None
    entries = [e for e in entries or () if isinstance(e, dict)]
    models = tuple(str(e["id"]) for e in entries if "id" in e)
    if engine != "detect":
        return TargetInfo(base_url, models, engine, "flag")
    owners = " ".join(str(e.get("owned_by", "")) for e in entries).lower()
    found = _detect(base_url, api_key, owners, server.lower())
    if found is None:
        return TargetInfo(base_url, models, DEFAULT.name, "default")
    return TargetInfo(base_url, models, found[0].name, found[1])


def lookup(base_url: str, api_key: str | None, where: Lookup) -> object:
    """The value at `where` on the target (an engine row's version or context length, asked by the
    preflight); None when anything on the way is missing."""
    try:
        _, body = _fetch(_request(base_url + where.path, api_key), PROBE_TIMEOUT_S)
        value = json.loads(body)
    except (ProbeFailed, ValueError):
        return None
    for key in where.keys:
        if isinstance(key, int) and isinstance(value, list) and -len(value) <= key < len(value):
            value = value[key]
        elif isinstance(key, str) and isinstance(value, dict):
            value = value.get(key)
        else:
            return None
    return value


def _detect(base_url: str, api_key: str | None, owners: str, server: str) -> tuple[Engine, str] | None:
    """The engine table's markers in order: every row's owned_by, then Server header, then probes."""
    for engine in ENGINES:
        if any(marker in owners for marker in engine.owned_by):
            return engine, "owned_by"
    for engine in ENGINES:
        if any(marker in server for marker in engine.server_header):
            return engine, "server header"
    for engine in ENGINES:
        for probe in engine.probes:
            if _probe_says(base_url + probe.path, api_key, probe):
                return engine, f"GET {probe.path}"
    return None


def _probe_says(url: str, api_key: str | None, probe: Probe) -> bool:
    """The answer is a JSON object whose probe.key holds probe.contains; any failure is a no."""
    try:
        _, body = _fetch(_request(url, api_key), PROBE_TIMEOUT_S)
        payload = json.loads(body)
    except (ProbeFailed, ValueError):
        return False
    value = payload.get(probe.key) if isinstance(payload, dict) else None
    return value is not None and probe.contains in str(value).lower()


def _request(url: str, api_key: str | None) -> urllib.request.Request:
    path = urllib.parse.urlsplit(url).path.strip("/").replace("/", "-") or "root"
    request = urllib.request.Request(url, headers={"User-Agent": "llmreplay", **probe_headers(path)})
    if api_key:
        request.add_header("Authorization", f"Bearer {api_key}")
    return request


def probe_metrics(
    url: str, api_key: str | None, timeout_s: float = 5.0, flag: str = "--server-metrics"
) -> None:
    """GET the --server-metrics URL once: it must answer 200 with Prometheus text, before the clock."""
    check_resolves(url, flag)
    try:
        _, body = _fetch(_request(url, api_key), timeout_s)
    except ProbeFailed as exc:
        raise BadInput(f"{flag} {url}: {exc}") from None
    from replayer.results.server_metrics import parse_prometheus

    if not parse_prometheus(body.decode("utf-8", "replace")):
        raise BadInput(f"{flag} {url}: the answer holds no Prometheus samples (is it the /metrics path?)")


def with_server_metrics(target: TargetInfo, given: str | None, off: str, api_key: str | None) -> TargetInfo:
    """The target with the metrics URL to scrape: `given` (--server-metrics) is checked, a dead or
    malformed one is BadInput; by default the engine row's metrics path on the target, which when it
    does not answer is a warning and no scraping, never a failed run. `off`: scrape nothing."""
    if given == off:
        return target
    if given is not None:
        probe_metrics(given, api_key)
        return dataclasses.replace(target, metrics_url=given, metrics_from="flag")
    path = BY_NAME[target.engine].metrics_path
    if path is None:
        return target
    url = target.base_url + path
    try:
        probe_metrics(url, api_key, PROBE_TIMEOUT_S, flag="server metrics")
    except BadInput as exc:
        warning = f"{exc}; not scraped (--server-metrics URL names another, {off} silences this)"
        return dataclasses.replace(target, metrics_warning=warning)
    return dataclasses.replace(target, metrics_url=url, metrics_from="default")
