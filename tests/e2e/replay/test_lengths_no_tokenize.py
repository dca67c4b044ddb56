"""A shape trace replayed against a target without /tokenize that counts one token per 4 characters
(`llmreplay sim --prompt-count chars/4 --no-tokenize`): the calibration from probe requests lands 95%
of prompts within 2% of the recorded length, run.json says which were not, and every request
llmreplay sent besides the replay's carried an X-Request-ID naming it as a probe."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
from replay_helpers import T0_US, results, run_info, run_replay

from llmreplay.calibrated_tokenizer import probe_plan
from llmreplay.probe_ids import PROBE_ID_PREFIX
from llmreplay.trace_format import MessageShape, TraceMeta, TraceRecord
from llmreplay.trace_io import write_trace

pytestmark = pytest.mark.e2e  # starts the sim and the replay as processes

LAYOUTS = (
    ("user",),
    ("system", "user"),
    ("system", "user", "assistant", "user"),
    ("user", "assistant", "user", "assistant", "user"),
)
CHARS_TARGET = (
    "--profile",
    "fast",
    "--prompt-count",
    "chars/4",
    "--no-tokenize",
    "--message-overhead-tokens",
    "3",
)


def shape_trace(path, n: int = 160, seed: int = 7):
    """Chat requests of four layouts (one in seven with a tool), 50 to 3,200 tokens, 30 ms apart."""
    rng = random.Random(seed)
    records = []
    for i in range(n):
        roles = LAYOUTS[i % len(LAYOUTS)]
        total = round(10 ** rng.uniform(1.7, 3.5))
        sizes = [max(4, total // len(roles) + rng.randint(-5, 5)) for _ in roles]
        tools = int(i % 7 == 3)
        records.append(
            TraceRecord(
                request_id=f"r{i}",
                arrival_time=T0_US + i * 30_000,
                endpoint="chat_completions",
                model="sim-model",
                stream=i % 2 == 0,
                messages=tuple(MessageShape(r, s) for r, s in zip(roles, sizes, strict=True)),
                prompt_tokens=sum(sizes) + 3 * len(roles) + 60 * tools,
                completion_tokens=4,
                token_source="server_usage",
                tools_count=tools,
                tool_definition_tokens=60 * tools,
            )
        )
    return write_trace(path, records, TraceMeta(source="test"))


def test_lengths_without_tokenize_land_within_two_percent(tmp_path, start_sim):
    ids_log = tmp_path / "ids.jsonl"
    url = start_sim(*CHARS_TARGET, "--request-id-log", str(ids_log))
    trace = shape_trace(tmp_path / "t.parquet")
    out = tmp_path / "run"
    done = run_replay(trace, url, out, "--max-dispatch-lag", "1s", timeout_s=180)
    assert done.returncode == 0, done.stderr[-3000:]

    rows = [r for r in results(out) if r["error_kind"] is None]
    assert len(rows) == 160
    error = np.array([abs(r["prompt_tokens"] / r["recorded_prompt_tokens"] - 1) for r in rows])
    assert np.percentile(error, 95) <= 0.02, sorted(error)[-10:]

    lengths = run_info(out)["summary"]["prompt_lengths"]
    assert lengths["source"] == "calibrated" and lengths["requests"] == 160
    assert lengths["calibration"]["text"] == "chars"
    assert lengths["calibration"]["per_char"] == pytest.approx(0.25, abs=0.005)
    assert lengths["within_tolerance"] == int((error <= 0.02).sum())
    assert lengths["unverified"]["requests"] == int((error > 0.02).sum())
    assert (
        sum(v["requests"] for v in lengths["unverified"]["by_layout"].values())
        == lengths["unverified"]["requests"]
    )

    seen = [json.loads(line) for line in ids_log.read_text().splitlines()]
    replayed = {r["request_id"] for r in rows}
    # the test's own readiness polls of /health aside, every request not replayed is llmreplay's probe
    probes = [s for s in seen if s["request_id"] not in replayed and s["path"] != "/health"]
    assert probes and all((s["request_id"] or "").startswith(PROBE_ID_PREFIX) for s in probes), probes
    purposes = {s["request_id"][len(PROBE_ID_PREFIX) :].rsplit("-", 1)[0] for s in probes}
    assert {"v1-models", "tokenize", "preflight", "calibrate"} <= purposes, purposes
    calibrations = [s for s in probes if s["request_id"].startswith(f"{PROBE_ID_PREFIX}calibrate-")]
    assert len(calibrations) == len(probe_plan())
    assert len({s["request_id"] for s in calibrations}) == len(calibrations)
