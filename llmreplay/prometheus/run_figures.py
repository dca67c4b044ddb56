"""A finished run's figures as Prometheus series, from its run.json summary (the numbers `report`
prints, computed from results.parquet by replayer.results.summary): counts, errors by kind, latency
quantiles, throughput, dispatch lag, verdict. Base units; the four run labels come from run.json."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from llmreplay.error_kinds import ERROR_KINDS
from llmreplay.errors import BadInput
from llmreplay.prometheus.labels import model_label, run_labels
from llmreplay.run_format import RunInfo, find_results, read_run_info

SUMMARY_QUANTILES = ("p50", "p90", "p95", "p99")  # the summary's latency keys, in the metric names
LATENCIES = ("ttft", "ttfo", "tpot", "itl", "e2e", "ttfb")  # llmreplay.metrics.METRICS' names


@dataclass(frozen=True, slots=True)
class Figure:
    """One metric family: its samples are (sample name, labels beyond the run's, value)."""

    name: str
    kind: str  # gauge or counter (the family name without _total)
    help: str
    samples: tuple[tuple[str, dict[str, str], float], ...]


def read_finished_run(run_dir: Path) -> RunInfo:
    """run.json of a finished run; BadInput naming what is missing."""
    if find_results(Path(run_dir)) is None:
        raise BadInput(f"{run_dir}: not a run directory (no results.parquet)")
    return read_run_info(Path(run_dir), "push")


def labels_of(run: RunInfo, run_dir: Path, run_label: str | None = None) -> dict[str, str]:
    """The run, target, engine and model labels of a run, from its run.json."""
    config, target = run.config, run.target
    model = model_label(config.get("model"), config.get("model_map"), target.models)
    return run_labels(run_label, run_dir, target.base_url, target.engine, model)


def run_figures(run: RunInfo) -> list[Figure]:
    """The families of run.json's summary; a figure the summary lacks (None) is left out."""
    summary = run.summary
    out = [
        *_request_figures(summary),
        *_latency_figures(summary.get("latency_ms") or {}),
        *_pace_figures(run, summary),
        *_verdict_figures(summary.get("verdict") or {}),
    ]
    return [figure for figure in out if figure.samples]


def _request_figures(summary: dict) -> list[Figure]:
    """Requests planned, sent and succeeded, and errors by kind: every kind, 0 when none."""
    return [
        _one(
            "llmreplay_run_requests_planned",
            "gauge",
            "Requests the run planned to send.",
            summary.get("planned"),
        ),
        _one("llmreplay_run_requests_sent", "counter", "Requests the run sent.", summary.get("sent")),
        _one(
            "llmreplay_run_requests_succeeded",
            "counter",
            "Requests that succeeded.",
            summary.get("succeeded"),
        ),
        Figure(
            "llmreplay_run_request_errors",
            "counter",
            "Failed or unsent requests by error kind.",
            tuple(
                ("llmreplay_run_request_errors_total", {"kind": kind}, float(count))
                for kind, count in sorted(
                    {**dict.fromkeys(ERROR_KINDS, 0), **(summary.get("errors") or {})}.items()
                )
            ),
        ),
        _one("llmreplay_run_error_ratio", "gauge", "Failed requests / requests.", summary.get("error_rate")),
    ]


def _latency_figures(latency: dict) -> list[Figure]:
    """Each latency metric the summary has, in LATENCIES' order."""
    out = []
    for name in LATENCIES:
        if name in latency:
            out.extend(_latency(name, latency[name]))
    return out


def _pace_figures(run: RunInfo, summary: dict) -> list[Figure]:
    """Throughput, dispatch lag, span and the end's wall-clock time (seconds, base units)."""
    throughput = summary.get("throughput") or {}
    lag = summary.get("dispatch_lag_ms") or {}
    return [
        _one(
            "llmreplay_run_throughput_requests_per_second",
            "gauge",
            "Successful requests per second of the run's span.",
            throughput.get("requests_per_s"),
        ),
        _one(
            "llmreplay_run_output_tokens_per_second",
            "gauge",
            "Output tokens of successful requests per second of the run's span.",
            throughput.get("output_tokens_per_s"),
        ),
        _one(
            "llmreplay_run_dispatch_lag_p99_seconds",
            "gauge",
            "p99 of send time minus scheduled time.",
            _seconds(lag.get("p99")),
        ),
        _one("llmreplay_run_span_seconds", "gauge", "First send to last byte.", summary.get("span_s")),
        _one(
            "llmreplay_run_end_timestamp_seconds",
            "gauge",
            "When the run ended (unix seconds).",
            run.ended_unix_ns / 1e9 or None,
        ),
    ]


def _verdict_figures(verdict: dict) -> list[Figure]:
    """The exit status, and the verdict's status as a label on a 1 (no sample without a status)."""
    return [
        _one(
            "llmreplay_run_exit_code",
            "gauge",
            "The run's exit status: 0 pass, 1 fail.",
            verdict.get("exit_code"),
        ),
        Figure(
            "llmreplay_run_verdict",
            "gauge",
            "1 for the run's verdict status (pass, fail, ...).",
            (("llmreplay_run_verdict", {"status": str(verdict["status"])}, 1.0),)
            if verdict.get("status")
            else (),
        ),
    ]


def _one(name: str, kind: str, help_text: str, value) -> Figure:
    sample = name + ("_total" if kind == "counter" else "")
    return Figure(name, kind, help_text, () if value is None else ((sample, {}, float(value)),))


def _seconds(ms) -> float | None:
    return None if ms is None else ms / 1e3


def _latency(name: str, cell: dict) -> list[Figure]:
    """A gauge per percentile (seconds), like dispatch_lag_p99, and how many values they cover. Not a
    summary: run.json has no `_sum` to give (a Pushgateway would fill in a false 0), and a `quantile`
    label outside a summary is what promtool's lint refuses."""
    what = "chunk gaps" if name == "itl" else "successful requests"
    figures = [
        _one(
            f"llmreplay_run_{name}_{key}_seconds",
            "gauge",
            f"{name.upper()} {key} over the run's {what}.",
            None if cell.get(key) is None else cell[key] / 1e3,
        )
        for key in SUMMARY_QUANTILES
    ]
    count = cell.get("count") or 0
    return [
        *figures,
        _one(f"llmreplay_run_{name}_samples", "gauge", f"{name.upper()} values measured.", count),
    ]
