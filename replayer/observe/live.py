"""The --metrics-port server: a daemon thread of the coordinator answering GET /metrics with the run's
live progress. A scrape reads the workers' shared counters and the new tail of their result spools;
nothing is computed between scrapes, and nothing runs in a worker."""

from __future__ import annotations

import threading
from collections import Counter

from llmreplay.error_kinds import ERROR_KINDS
from llmreplay.errors import BadInput
from llmreplay.prometheus.config import ObserveConfig
from llmreplay.prometheus.labels import LABEL_NAMES, model_label, run_labels
from replayer.observe.spool_tail import SpoolTail, Window, now_ns
from replayer.progress import totals

QUANTILES = (0.5, 0.9, 0.99)
_COUNTED = ("sent", "done")  # worker counters that only grow: kept across runs (capacity steps)


class _Attached:
    """The run being watched: its workers' counters, its spools, its size."""

    def __init__(self, stats, tail: SpoolTail, planned: int):
        self.stats, self.tail, self.planned = stats, tail, planned


class LiveMetrics:
    """Serves /metrics from creation to `close`; runs are attached one after another (capacity's steps)."""

    def __init__(self, config: ObserveConfig):
        from prometheus_client import CollectorRegistry, start_http_server

        self._lock = threading.Lock()
        self.labels = dict.fromkeys(LABEL_NAMES, "")
        self.load: dict[str, float] = {}  # axis (speed, scale) -> factor
        self.fixed_run: str | None = None  # the `run` label whatever the replay's (capacity's directory)
        self._run: _Attached | None = None
        self._base: Counter[str] = Counter()
        self.ttft, self.e2e, self.errors = Window(), Window(), Counter()
        registry = CollectorRegistry(auto_describe=False)
        registry.register(self)
        address, port = config.metrics_bind, config.metrics_port
        try:
            self._server, self._thread = start_http_server(port, address, registry)
        except OSError as exc:
            reason = exc.strerror or str(exc)
            raise BadInput(f"--metrics-port {port}: cannot listen on {address}:{port} ({reason})") from None
        host = f"[{address}]" if ":" in address else address
        self.url = f"http://{host}:{self._server.server_port}/metrics"

    def watch(self, config, target) -> None:
        """Label the series for this replay (a ReplayConfig, against a replayer.target.TargetInfo);
        a `run` label fixed by the owner (capacity: its directory's name) is kept."""
        model = model_label(config.model, config.model_map, target.models)
        labels = run_labels(config.observe.run_label, config.run_dir, target.base_url, target.engine, model)
        with self._lock:
            self.labels = {**labels, "run": self.fixed_run or labels["run"]}
            self.load = {"speed": config.schedule.speed, "scale": config.schedule.scale}

    def attach(self, stats, spool_paths, planned: int) -> None:
        """Watch a run whose workers have been told to start."""
        tail = SpoolTail(spool_paths, self.ttft, self.e2e, self.errors)
        with self._lock:
            self._run = _Attached(stats, tail, planned)

    def detach(self) -> None:
        """The run's workers are gone: keep its final counts, let go of its spools."""
        with self._lock:
            run, self._run = self._run, None
            if run is None:
                return
            run.tail.close()
            final = totals(run.stats)
            for name in _COUNTED:
                self._base[name] += final[name]
            self._base["planned"] += run.planned

    def close(self) -> None:
        self.detach()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)

    def collect(self):
        """prometheus_client's collector hook: called on each scrape, in the server's thread. Nothing
        until the first replay's labels are known (its target probed): no series with empty labels."""
        with self._lock:
            if not self.labels["target"]:
                return []
            run = self._run
            live = dict.fromkeys((*_COUNTED, "inflight", "lag_p99_ns"), 0)
            if run is not None:
                run.tail.read()
                live = totals(run.stats)
            planned = self._base["planned"] + (run.planned if run is not None else 0)
            counted = {name: self._base[name] + live[name] for name in _COUNTED}
            families = list(self._families(planned, counted, live, now_ns()))
        return families

    def _families(self, planned: int, counted: dict, live: dict, at_ns: int):
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        names, values = list(self.labels), list(self.labels.values())

        def one(kind, name, doc, value):
            family = kind(name, doc, labels=names)
            family.add_metric(values, value)
            return family

        yield one(
            GaugeMetricFamily,
            "llmreplay_requests_planned",
            "Requests the run (with capacity: its steps so far) plans to send.",
            planned,
        )
        yield one(CounterMetricFamily, "llmreplay_requests_sent", "Requests sent so far.", counted["sent"])
        yield one(
            CounterMetricFamily,
            "llmreplay_requests_finished",
            "Requests finished so far, whatever their outcome.",
            counted["done"],
        )
        yield one(
            GaugeMetricFamily,
            "llmreplay_requests_in_flight",
            "Requests sent and not finished yet.",
            live["inflight"],
        )
        yield one(
            GaugeMetricFamily,
            "llmreplay_dispatch_lag_p99_seconds",
            "p99 of send time minus scheduled time over each worker's last 1000 sends (the worst worker's).",
            live["lag_p99_ns"] / 1e9,
        )
        errors = CounterMetricFamily(
            "llmreplay_request_errors",
            "Failed or unsent requests by error kind (as spooled so far).",
            labels=[*names, "kind"],
        )
        for kind in sorted({*ERROR_KINDS, *self.errors}):  # every kind from 0: rate() works from the start
            errors.add_metric([*values, kind], self.errors[kind])
        yield errors
        for name, window, what in (("ttft", self.ttft, "first token"), ("e2e", self.e2e, "last byte")):
            doc = (
                f"Request sent to {what}, successful requests: quantiles over those finished in the last "
                "minute, count and sum over all (as spooled so far)."
            )
            yield _summary(f"llmreplay_{name}_seconds", doc, names, values, window, at_ns)
        load = GaugeMetricFamily(
            "llmreplay_load_factor",
            "The load factor on each axis (capacity: the current step's).",
            labels=[*names, "axis"],
        )
        for axis, value in sorted(self.load.items()):
            load.add_metric([*values, axis], value)
        yield load


def _summary(name: str, doc: str, names: list, values: list, window: Window, at_ns: int):
    from prometheus_client.core import SummaryMetricFamily
    from prometheus_client.samples import Sample

    family = SummaryMetricFamily(name, doc, labels=names)
    labels = dict(zip(names, values, strict=True))
    for q, value in zip(QUANTILES, window.quantiles(QUANTILES, at_ns), strict=True):
        family.samples.append(Sample(name, {**labels, "quantile": f"{q:g}"}, value))
    family.add_metric(values, count_value=window.count, sum_value=window.sum_ns / 1e9)
    return family


def open_live_metrics(config: ObserveConfig, console=None, quiet: bool = False) -> LiveMetrics | None:
    """The server when --metrics-port is given (its URL printed), else None."""
    if config.metrics_port is None:
        return None
    live = LiveMetrics(config)
    if console is not None and not quiet:
        console.print(f"live metrics at {live.url}", markup=False, highlight=False)
    return live
