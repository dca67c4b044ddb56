"""The merge: spooled outcomes become ResultRows of results.parquet, trace columns copied, the run's clock
applied, a shed request marked, an error's detail kept only with its error, the run format version in
the footer; Anthropic's cache writes fill cache_write_tokens from the answer's usage (chat's leaves it null)."""

from __future__ import annotations

import json
from array import array

import pyarrow.parquet as pq
from replay_helpers import T0_US, content_record, write_content_trace

from llmreplay.run_format import METADATA_KEY, RUN_FORMAT_VERSION, TRACE_COPIED, read_run
from replayer.loop.client import Outcome
from replayer.loop.request_file import RequestFileWriter
from replayer.loop.result_spool import ResultSpool
from replayer.loop.runner import Sent
from replayer.plan.arrays import NONE, PlanArrays
from replayer.plan.trace_rows import read_trace_rows
from replayer.results.merge import RunClock, WorkerPart, merge_worker_results

START_NS = 1_000_000  # the run's offset 0 on the monotonic clock


def _plans() -> PlanArrays:
    """Three plans of trace rows 0, 1, 2, 100 ns apart; the third is copy 1 of its request."""
    none = array("q", [NONE] * 3)
    return PlanArrays(
        array("q", [0, 1, 2]),
        array("q", [0, 0, 1]),
        array("q", [0, 100, 200]),
        none,
        none,
        none,
        none,
        bytes(3),
    )


def _merge(tmp_path):
    trace = read_trace_rows(
        write_content_trace(tmp_path / "t.parquet", [content_record(i, i) for i in range(3)])
    )
    requests = RequestFileWriter(tmp_path / "r.bin", tmp_path / "r.fields")
    for i in range(3):
        requests.add("/v1/chat/completions", [], b'{"i": %d}' % i, True, 16 + i, "staging-model")
    requests.close()
    plans = _plans()
    answered = Outcome(START_NS + 7)
    answered.http_status, answered.ttft_ns, answered.e2e_ns, answered.finish_reason = 200, 30, 90, "stop"
    answered.chunk_offsets_ns = array("q", [30, 60, 90])
    answered.usage = {
        "prompt_tokens": 8,
        "completion_tokens": 3,
        "prompt_tokens_details": {"cached_tokens": 2},
    }
    failed = Outcome(START_NS + 150)
    failed.fail("http_5xx", "upstream down")
    failed.http_status = 503
    spool = ResultSpool(tmp_path / "results-0.marshal")
    spool.append(Sent(plans[0], START_NS + 5, answered))
    spool.append(Sent(plans[1], START_NS + 120, failed))  # its session made it 20 ns late
    spool.append(Sent(plans[2], START_NS + 200, None, shed=True))
    spool.close()
    out = tmp_path / "results.parquet"
    part = WorkerPart(3, spool.path, tmp_path / "r.fields", tmp_path / "r.bin", plans)
    assert merge_worker_results([part], trace, START_NS, None, out, tmp_path) == 3
    return trace, out


def test_merged_rows_copy_the_trace_measure_the_replay_and_mark_the_shed(tmp_path):
    trace, out = _merge(tmp_path)
    answered, failed, shed = pq.read_table(out).to_pylist()
    source = trace.records([0])[0]
    assert all(answered[name] == source[name] for name in TRACE_COPIED if name != "arrival_time")
    assert answered["arrival_time"].timestamp() * 1e6 == T0_US
    assert (answered["model"], answered["requested_completion_tokens"], answered["worker"]) == (
        "staging-model",
        16,
        3,
    )
    assert (answered["sent_offset_ns"], answered["dispatch_lag_ns"], answered["session_wait_ns"]) == (7, 2, 5)
    assert answered["chunk_offsets_ns"] == [30, 60, 90] and answered["token_source"] == "server_usage"
    assert (answered["prompt_tokens"], answered["completion_tokens"], answered["cached_tokens"]) == (8, 3, 2)
    assert answered["error_kind"] is None and answered["error_detail"] is None
    assert (failed["error_kind"], failed["error_detail"], failed["http_status"]) == (
        "http_5xx",
        "upstream down",
        503,
    )
    assert failed["session_wait_ns"] == 20 and failed["dispatch_lag_ns"] == 30
    assert (shed["request_id"], shed["source_request_id"], shed["copy_index"]) == ("r2#c1", "r2", 1)
    assert (
        shed["error_kind"] == "shed_by_client"
        and shed["sent_offset_ns"] is None
        and shed["http_status"] is None
    )


def test_the_results_file_states_its_run_format_version_and_reads_alone(tmp_path):
    _, out = _merge(tmp_path)
    metadata = pq.read_schema(out).metadata
    assert json.loads(metadata[METADATA_KEY]) == {"run_format_version": RUN_FORMAT_VERSION}
    run = read_run(out, "run")  # no run.json beside it: the footer says the version
    assert run.table.num_rows == 3 and run.document == {} and run.info is None


def test_the_run_clock_turns_a_monotonic_send_time_into_wall_time():
    clock = RunClock(start_ns=500, anchor_unix_ns=1_700_000_000_000_000_000, anchor_mono_ns=2_000)
    assert clock.unix_us(2_000) == 1_700_000_000_000_000
    assert clock.unix_us(5_000) == 1_700_000_000_000_003  # 3 us later on both clocks


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
