"""`llmreplay capacity` against the sim with a known saturation: the SLO limit within 10% of the queueing
model's, in bounded steps; a throttled client is reported client-bound; a rerun reuses the finished steps."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from in_process_sim import InProcessSim
from replay_helpers import ROOT, content_record, write_content_trace

OUTPUT_TOKENS, BASE_MS, PER_SEQ_MS, SLOTS = 40, 5.0, 1.0, 16
TPOT_SLO_MS = 13.0
TPOT_LIMIT_RPS = (TPOT_SLO_MS - BASE_MS) / (PER_SEQ_MS * OUTPUT_TOKENS * TPOT_SLO_MS) * 1000  # 15.4
SATURATION_RPS = SLOTS / (OUTPUT_TOKENS * (BASE_MS + PER_SEQ_MS * SLOTS)) * 1000  # 19.0


@pytest.fixture
def sim(tmp_path):
    profile = tmp_path / "known.toml"
    profile.write_text(
        f"max_num_seqs = {SLOTS}\ndecode_base_ms = {BASE_MS}\ndecode_per_seq_ms = {PER_SEQ_MS}\nprefill_ns_per_token = 0\n"
    )
    server = InProcessSim(str(profile))
    yield server.start()
    server.stop()


def even_trace(path, lead_s=2.0, dense_s=10.0, rate=10.0):
    """A sparse lead-in (the warm-up's room), then evenly spaced requests at `rate`, fixed lengths."""
    times = [i * 200.0 for i in range(int(lead_s * 5))]
    times += [lead_s * 1000 + i * 1000 / rate for i in range(int(dense_s * rate))]
    records = [
        content_record(i, t, completion_tokens=OUTPUT_TOKENS, prompt_tokens=64) for i, t in enumerate(times)
    ]
    return write_content_trace(path, records)


def capacity(trace, url, out, *flags, timeout_s=150):
    cmd = [
        sys.executable,
        "-m",
        "llmreplay.cli",
        "capacity",
        str(trace),
        "--target",
        url,
        "-o",
        str(out),
        "--json",
        "--skip-preflight",
        "--window",
        "5s",
        "--warmup",
        "1s",
        *flags,
    ]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout_s)


@pytest.mark.e2e
def test_the_tpot_limit_is_found_within_ten_percent(tmp_path, sim):
    trace = even_trace(tmp_path / "trace.parquet")
    flags = (
        "--by",
        "speed",
        "--slo",
        f"tpot_p95<={TPOT_SLO_MS:g}ms",
        "--precision",
        "0.1",
        "--sustain",
        "8s",
    )
    done = capacity(trace, sim, tmp_path / "cap", *flags)
    assert done.returncode == 0, done.stderr[-2000:]
    doc = json.loads(done.stdout)
    assert doc["stop_reason"] == "converged" and len(doc["steps"]) <= 10
    limit = doc["slo_limit"]
    assert limit["confirmed"]
    assert limit["offered_requests_per_s"] == pytest.approx(TPOT_LIMIT_RPS, rel=0.10)
    if doc["knee"]["reached"]:
        assert doc["knee"]["requests_per_s"] == pytest.approx(SATURATION_RPS, rel=0.10)
    assert doc["warmup"]["length_s"] == pytest.approx(1.0) and doc["window"]["length_s"] == 5.0
    # a rerun of the same command reuses every finished step and gives the same answer
    again = capacity(trace, sim, tmp_path / "cap", *flags)
    redo = json.loads(again.stdout)
    assert all(step["reused"] for step in redo["steps"])
    assert redo["slo_limit"] == limit
    changed = capacity(trace, sim, tmp_path / "cap", *flags[:-4], "--precision", "0.1", "--sustain", "9s")
    assert changed.returncode == 2 and "another sustain_s" in changed.stderr


@pytest.mark.e2e
def test_a_throttled_client_is_client_bound_not_the_servers_limit(tmp_path, sim):
    trace = even_trace(tmp_path / "trace.parquet")
    done = capacity(
        trace, sim, tmp_path / "cap", "--max-inflight", "1", "--slo", "e2e_p99<=10s", timeout_s=90
    )
    doc = json.loads(done.stdout)
    assert done.returncode == 1 and doc["stop_reason"] == "client_bound"
    assert doc["steps"][0]["verdict"] == "client_bound" and doc["slo_limit"] is None
    assert "--workers" in doc["client_bound"]["advice"]
