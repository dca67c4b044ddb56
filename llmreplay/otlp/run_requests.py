"""A finished run as the export sees it: the requests that were sent, their wall-clock start and end (ns),
the attribute set (series) each belongs to, and the run's resource attributes. Pure over the run's files.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from llmreplay.otlp import semconv

if TYPE_CHECKING:
    from llmreplay.run_format import RunInfo


@dataclass(frozen=True, slots=True)
class RunRequests:
    """Row i of `table` was sent at `start_ns[i]` and answered (or failed) at `end_ns[i]` (Unix ns)."""

    run_id: str
    resource: dict[str, str]
    table: pa.Table  # the sent rows of results.parquet
    start_ns: np.ndarray
    end_ns: np.ndarray
    ok: np.ndarray  # llmreplay.metrics.success_mask
    series: np.ndarray  # index into series_attributes
    series_attributes: list[dict[str, str | int]]
    not_sent: int  # rows never sent (shed by the client, or the run stopped first): in no metric or span

    @property
    def first_ns(self) -> int:
        return int(self.start_ns.min())

    @property
    def last_ns(self) -> int:
        return int(self.end_ns.max())


def read_run_requests(run: Path, name: str | None = None) -> RunRequests:
    """The run at `run` (a directory or its results.parquet), called `name` (default: the directory's name)
    in its run id; BadInput when it is not a run or sent nothing."""
    from llmreplay.errors import BadInput
    from llmreplay.metrics import success_mask
    from llmreplay.run_csv import results_path
    from llmreplay.run_format import read_run

    results = results_path(Path(run))
    run = read_run(results, "export otlp")
    table, info = run.table, run.info
    sent = pc.is_valid(table.column("sent_time"))
    not_sent = table.num_rows - pc.sum(sent).as_py() if table.num_rows else 0
    table = table.filter(sent)
    if table.num_rows == 0:
        raise BadInput(f"{results.parent}: the run sent no request; nothing to export")
    start_ns = _int_ns(pc.cast(table.column("sent_time"), pa.int64())) * 1000
    end_ns = start_ns + _elapsed_ns(table)
    common = _common_attributes(info)
    keys, attributes = _series(table, common)
    run_id = _run_id(name or results.parent.resolve().name, info, int(start_ns.min()))
    return RunRequests(
        run_id=run_id,
        resource=_resource(run_id, info),
        table=table,
        start_ns=start_ns,
        end_ns=end_ns,
        ok=success_mask(table),
        series=keys,
        series_attributes=attributes,
        not_sent=not_sent,
    )


def _int_ns(column) -> np.ndarray:
    return np.asarray(pc.fill_null(column, 0).to_numpy(zero_copy_only=False), dtype=np.int64)


def _elapsed_ns(table: pa.Table) -> np.ndarray:
    """E2E where measured; for a request that failed before its last byte, the latest offset it reached."""
    known = [table.column(name) for name in ("e2e_ns", "ttft_ns", "ttfb_ns")]
    return _int_ns(pc.coalesce(*known))


def _common_attributes(info: RunInfo | None) -> dict[str, str | int]:
    found: dict[str, str | int] = {}
    if info is None:
        return found
    if info.target.engine:
        found[semconv.PROVIDER_NAME] = info.target.engine
    if info.target.base_url:
        import urllib.parse

        parts = urllib.parse.urlsplit(info.target.base_url)
        if parts.hostname:
            found[semconv.SERVER_ADDRESS] = parts.hostname
            found[semconv.SERVER_PORT] = parts.port or (443 if parts.scheme == "https" else 80)
    return found


def _series(table: pa.Table, common: dict) -> tuple[np.ndarray, list[dict[str, str | int]]]:
    """Per row, the index of its attribute set: operation, model, error.type (plus the common ones)."""
    index: dict[tuple, int] = {}
    rows = zip(
        table.column("endpoint").to_pylist(),
        table.column("model").to_pylist(),
        table.column("error_kind").to_pylist(),
        strict=True,
    )
    keys = np.fromiter(
        (index.setdefault(key, len(index)) for key in rows), dtype=np.int64, count=table.num_rows
    )
    attributes = []
    for endpoint, model, error in index:
        found: dict[str, str | int] = {semconv.OPERATION_NAME: semconv.OPERATIONS.get(endpoint, endpoint)}
        if model is not None:
            found[semconv.REQUEST_MODEL] = model
        found.update(common)
        if error is not None:
            found[semconv.ERROR_TYPE] = error
        attributes.append(found)
    return keys, attributes


def _run_id(name: str, info: RunInfo | None, first_ns: int) -> str:
    """The run's name and its start (UTC, to the second): readable, and two runs never share it."""
    started = (info.started_unix_ns if info is not None else 0) or first_ns
    stamp = dt.datetime.fromtimestamp(started / 1e9, dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    return f"{name}-{stamp}"


def _resource(run_id: str, info: RunInfo | None) -> dict[str, str]:
    from llmreplay import __version__

    base_url, engine = ("", "") if info is None else (info.target.base_url, info.target.engine)
    found = {
        semconv.SERVICE_NAME: "llmreplay",
        semconv.SERVICE_VERSION: __version__,
        semconv.SERVICE_INSTANCE_ID: run_id,
        "llmreplay.run.id": run_id,
        "llmreplay.target": _without_query(base_url),
        "llmreplay.engine": engine,
        "llmreplay.semconv.version": semconv.SEMCONV_VERSION,
    }
    return {key: value for key, value in found.items() if value}


def _without_query(url: str) -> str:
    """A URL as an attribute: scheme, host, port and path only (a query may hold a key)."""
    import urllib.parse

    parts = urllib.parse.urlsplit(url)
    return urllib.parse.urlunsplit(
        parts._replace(netloc=parts.netloc.rpartition("@")[2], query="", fragment="")
    )
