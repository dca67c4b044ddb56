"""Footprint: prompts of shape-only traces are synthesized outside the workers (no tokenizer, no
pyarrow in a worker); token counts missing from answers are filled in after the run."""

from __future__ import annotations

import random
from array import array

import numpy as np
import pyarrow.parquet as pq
import pytest
from replay_helpers import T0_US, results, run_info, run_replay

from llmreplay.trace_format import TraceMeta, TraceRecord
from llmreplay.trace_io import write_trace
from replayer.config import ScheduleConfig
from replayer.loop.client import Outcome
from replayer.loop.result_spool import ResultSpool
from replayer.loop.runner import Sent
from replayer.plan.prepare import BuildJob, Shard, write_requests
from replayer.plan.request_builder import BuildOptions
from replayer.plan.schedule import build_schedule, schedule_input
from replayer.plan.sessions import link_sessions, session_codes
from replayer.plan.trace_rows import read_trace_rows
from replayer.results.merge import WorkerPart, merge_worker_results

BLOCK = 16
HEAVY_MODULES = {"pyarrow", "numpy", "aiohttp"}


def shape_records(n: int) -> list[TraceRecord]:
    rng = random.Random(3)
    shared = tuple(rng.getrandbits(62) for _ in range(2))
    out = []
    for i in range(n):
        prompt = 40 + i
        hashes = shared + tuple(rng.getrandbits(62) for _ in range(-(-prompt // BLOCK) - 2))
        out.append(
            TraceRecord(
                request_id=f"s{i}",
                arrival_time=T0_US + i * 20_000,
                endpoint="chat_completions",
                prompt_tokens=prompt,
                completion_tokens=6,
                token_source="imported",
                model="sim-model",
                stream=True,
                prefix_block_hashes=hashes,
            )
        )
    return out


@pytest.mark.e2e
def test_shape_trace_is_synthesized_outside_the_light_workers(tmp_path, shared_sim):
    trace = tmp_path / "shape.parquet"
    records = shape_records(12)
    write_trace(trace, records, TraceMeta(source="test", block_size=BLOCK, relative_time=True))
    out = tmp_path / "run"
    done = run_replay(trace, shared_sim, out, "--engine", "vllm", "--workers", "2")
    assert done.returncode in (0, 1), done.stderr  # 1: lag bound broken on a loaded machine
    rows = {r["request_id"]: r for r in results(out)}
    assert len(rows) == 12 and all(r["error_kind"] is None for r in rows.values())
    # the sim counts prompts with the same tokenizer: synthesis is exact
    assert all(rows[r.request_id]["prompt_tokens"] == r.prompt_tokens for r in records)
    info = run_info(out)
    assert info["builder"]["in_process"] is False  # the tokenizer lived in a short-lived process
    assert len(info["workers"]) == 2
    for worker in info["workers"]:
        assert not HEAVY_MODULES & set(worker["modules_loaded"]), worker
        assert worker["max_rss_mb"] < info["builder"]["peak_rss_mb"], (worker, info["builder"])
    assert not (out / ".parts").exists()


def test_answers_without_usage_are_counted_with_the_tokenizer_after_the_run(tmp_path):
    records = shape_records(1)
    trace = tmp_path / "shape.parquet"
    write_trace(trace, records, TraceMeta(source="test", block_size=BLOCK, relative_time=True))
    trace_rows = read_trace_rows(trace)
    rows = schedule_input(trace_rows.table)
    schedule = build_schedule(rows, ScheduleConfig())
    plans = link_sessions(
        schedule, np.arange(1), session_codes(trace_rows.table.column("session_id")), rows.turn_index
    )
    tails, fields = tmp_path / "requests.bin", tmp_path / "requests.fields"
    shard = Shard(plans, array("q", [0]), str(tails), str(fields))
    write_requests(BuildJob(str(trace), (shard,), BuildOptions("vllm", None, None), BLOCK, None, None, True))
    outcome = Outcome(1_000)
    outcome.http_status, outcome.e2e_ns, outcome.finish_reason = 200, 5_000, "stop"
    outcome.chunk_offsets_ns, outcome.ttft_ns = [2_000, 3_000], 2_000
    outcome.response_text_bytes = [
        b'data: {"choices": [{"index": 0, "delta": {"content": "Hello"}}]}\n\ndata: {"choi',
        b'ces": [{"index": 0, "delta": {"content": " world"}}]}\n\ndata: [DONE]\n\n',
    ]
    spool = ResultSpool(tmp_path / "results-0.marshal")
    spool.append(Sent(plans[0], 900, outcome))
    spool.close()
    out = tmp_path / "results.parquet"
    merge_worker_results(
        [WorkerPart(0, spool.path, fields, tails, plans)], trace_rows, 0, None, out, tmp_path
    )
    [row] = pq.read_table(out).to_pylist()
    assert row["token_source"] == "tokenizer"
    assert row["completion_tokens"] == 2  # "Hello", " world" in Tekken
    assert row["prompt_tokens"] == records[0].prompt_tokens
    assert row["dispatch_lag_ns"] == 100 and row["sent_offset_ns"] == 1_000
    assert row["chunk_offsets_ns"] == [2_000, 3_000]
