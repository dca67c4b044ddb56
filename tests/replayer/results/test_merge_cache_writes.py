"""Anthropic's cache writes reach the run: the merge fills results' cache_write_tokens (run format 1.4)
from the answer's usage, normalised as the recorder normalises it; chat's usage leaves it null."""

from __future__ import annotations

import pyarrow.parquet as pq
from replay_helpers import content_record, write_content_trace

from replayer.loop.client import Outcome
from replayer.loop.request_file import RequestFileWriter
from replayer.loop.result_spool import ResultSpool
from replayer.loop.runner import Sent
from replayer.plan.trace_rows import read_trace_rows
from replayer.results.merge import WorkerPart, merge_worker_results
from tests.replayer.results.test_merge import START_NS, _plans

USAGES = (
    {"input_tokens": 5, "cache_read_input_tokens": 10, "cache_creation_input_tokens": 4, "output_tokens": 3},
    {"prompt_tokens": 8, "completion_tokens": 3, "prompt_tokens_details": {"cached_tokens": 2}},
)


def test_cache_writes_come_from_the_answer_usage(tmp_path):
    trace = read_trace_rows(
        write_content_trace(tmp_path / "t.parquet", [content_record(i, i) for i in range(3)])
    )
    requests = RequestFileWriter(tmp_path / "r.bin", tmp_path / "r.fields")
    for i in range(3):
        requests.add("/v1/messages", [], b'{"i": %d}' % i, True, 16, "staging-model")
    requests.close()
    plans = _plans()
    spool = ResultSpool(tmp_path / "results-0.marshal")
    for i, usage in enumerate(USAGES):
        outcome = Outcome(START_NS + 10 * i)
        outcome.http_status, outcome.e2e_ns, outcome.finish_reason, outcome.usage = 200, 50, "stop", usage
        spool.append(Sent(plans[i], START_NS + 10 * i, outcome))
    spool.append(Sent(plans[2], START_NS + 200, None, shed=True))
    spool.close()
    out = tmp_path / "results.parquet"
    part = WorkerPart(0, spool.path, tmp_path / "r.fields", tmp_path / "r.bin", plans)
    merge_worker_results([part], trace, START_NS, None, out, tmp_path)
    rows = pq.read_table(out, columns=["prompt_tokens", "cached_tokens", "cache_write_tokens"]).to_pylist()
    assert rows[0] == {"prompt_tokens": 19, "cached_tokens": 10, "cache_write_tokens": 4}
    assert rows[1] == {"prompt_tokens": 8, "cached_tokens": 2, "cache_write_tokens": None}
    assert rows[2]["cache_write_tokens"] is None  # shed: never sent
