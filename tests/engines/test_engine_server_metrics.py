"""A short replay against each real engine scrapes its own /metrics by default (no --server-metrics
given) and stores samples under each name the engine row gives a role (llmreplay.engines)."""

from __future__ import annotations

import json
import subprocess
from dataclasses import asdict

import pyarrow.parquet as pq
import pytest
from replay_helpers import content_record, write_content_trace

from llmreplay.engines import BY_NAME

pytestmark = [pytest.mark.engines, pytest.mark.timeout(600)]

ENGINE_ROWS = {"vllm": "vllm", "llama.cpp": "llamacpp"}


def test_a_replay_stores_a_sample_of_every_role_the_row_names(engine, llmreplay_bin, tmp_path):
    records = [content_record(i, i * 300.0, model="tiny", completion_tokens=8) for i in range(6)]
    trace = write_content_trace(tmp_path / "trace.parquet", records)
    out = tmp_path / "run"
    cmd = [str(llmreplay_bin), "replay", str(trace), "--target", engine.base_url, "-o", str(out),
           "--quiet", "--skip-preflight"]  # fmt: skip
    done = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=500)
    assert done.returncode in (0, 1), done.stderr[-3000:]
    row = BY_NAME[ENGINE_ROWS[engine.name]]
    scraped = json.loads((out / "run.json").read_text())["server_metrics"]
    assert scraped["from"] == "default" and scraped["url"] == engine.base_url + row.metrics_path
    assert scraped["scrapes"] >= 1 and scraped["failures"] == 0, scraped
    stored = set(
        pq.read_table(out / "server_metrics.parquet", columns=["metric"]).column("metric").to_pylist()
    )
    named = {role: name for role, name in asdict(row.metrics).items() if name}
    assert named and {role: name for role, name in named.items() if name not in stored} == {}
    assert scraped["summary"]["peak_running"] is not None and scraped["summary"]["peak_waiting"] is not None
