"""A merged multi-host run's dispatch lag is checked per host too: one client-bound host makes the run
unfaithful even when the rows of all hosts together stay within the bound."""

from __future__ import annotations

import pyarrow as pa

from replayer.judge.gate_limits import FidelityLimits
from replayer.judge.run_fidelity import FAIL, OK, run_checks, run_facts

MS = 1_000_000


def table(lags_ms_by_host: dict[str | None, list[float]]) -> pa.Table:
    hosts, lags = [], []
    for host, values in lags_ms_by_host.items():
        hosts += [host] * len(values)
        lags += [int(v * MS) for v in values]
    n = len(lags)
    return pa.table(
        {
            "sent_offset_ns": pa.array(range(n), pa.int64()),
            "error_kind": pa.nulls(n, pa.string()),
            "http_status": pa.array([200] * n, pa.int16()),
            "dispatch_lag_ns": pa.array(lags, pa.int64()),
            "prompt_tokens": pa.array([10] * n, pa.int32()),
            "recorded_prompt_tokens": pa.array([10] * n, pa.int32()),
            "completion_tokens": pa.array([5] * n, pa.int32()),
            "recorded_completion_tokens": pa.array([5] * n, pa.int32()),
            "host": pa.array(hosts, pa.string()),
        }
    )


def lag_checks(t: pa.Table) -> dict[str, str]:
    checks = run_checks(
        "run", run_facts(t, stop_reason="completed"), FidelityLimits(max_dispatch_lag_p99_ns=5 * MS)
    )
    return {c["check"]: c["status"] for c in checks if "dispatch lag" in c["check"]}


def test_one_client_bound_host_fails_the_merged_run_though_the_whole_stays_within():
    statuses = lag_checks(table({"a": [0.1] * 990, "b": [0.1] * 2 + [40.0] * 8}))
    assert statuses["run: dispatch lag p99 (ms)"] == OK  # 8 of 1000 rows late: p99 of the whole passes
    assert statuses["run: host a dispatch lag p99 (ms)"] == OK
    assert statuses["run: host b dispatch lag p99 (ms)"] == FAIL


def test_a_run_of_one_host_has_only_the_whole_runs_check():
    assert list(lag_checks(table({None: [0.1] * 50}))) == ["run: dispatch lag p99 (ms)"]
