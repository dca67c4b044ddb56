"""--model-map end to end against `llmreplay sim` serving two models (in this process): each recorded
model goes to its staging name with the per-model mix kept, the run keeps the recorded name, compare's
per-model breakdown groups by it; an unserved mapped name and bad spellings are one line, exit 2."""

from __future__ import annotations

import json
import subprocess

import pyarrow.parquet as pq
import pytest
from bad_input import refused
from live_processes import ROOT, llmreplay_cmd
from replay_helpers import content_record, results, run_replay, write_content_trace

pytestmark = pytest.mark.e2e  # every test here starts a replay process
SERVED = ("sim-model", "other-model")


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    from in_process_sim import sims_in_process

    with sims_in_process() as start:
        yield start("fast", models=SERVED, log_path=tmp_path_factory.mktemp("sim") / "truth.parquet")


@pytest.fixture
def trace(tmp_path):
    models = ["prod-a", "prod-b", "prod-a"] * 8  # 16 prod-a, 8 prod-b
    records = [content_record(i, i * 20.0, model=model) for i, model in enumerate(models)]
    return write_content_trace(tmp_path / "t.parquet", records)


def test_each_model_goes_to_its_staging_name_and_compare_groups_by_the_recorded_one(sim, trace, tmp_path):
    out = tmp_path / "run"
    done = run_replay(trace, sim.url, out, "--skip-preflight",
                      "--model-map", "prod-a=sim-model", "--model-map", "prod-b=other-model")  # fmt: skip
    assert done.returncode in (0, 1), done.stderr[-2000:]
    rows = results(out)
    sent = {(r["recorded_model"], r["model"]) for r in rows}
    assert sent == {("prod-a", "sim-model"), ("prod-b", "other-model")}
    assert sum(r["model"] == "other-model" for r in rows) == 8 and all(r["error_kind"] is None for r in rows)
    sim.stop()  # publishes the ground truth: what the engine was asked for
    truth = pq.read_table(sim.log_path, columns=["request_id", "model"]).to_pylist()
    asked = {t["request_id"]: t["model"] for t in truth}
    assert all(asked[r["request_id"]] == r["model"] for r in rows)

    compared = subprocess.run(llmreplay_cmd("compare", str(trace), str(out), "--json"),
                              capture_output=True, text=True, timeout=120, cwd=ROOT)  # fmt: skip
    assert compared.returncode in (0, 1), compared.stderr[-2000:]
    buckets = [b for b in json.loads(compared.stdout)["buckets"] if b["dimension"] == "model"]
    counts = {b["bucket"]: (b["baseline_requests"], b["candidate_requests"]) for b in buckets}
    assert counts == {"prod-a": (16, 16), "prod-b": (8, 8)}


def test_star_sends_every_model_to_one_name(trace, tmp_path):
    from in_process_sim import sims_in_process

    with sims_in_process() as start:
        url = start("fast", models=SERVED).url
        out = tmp_path / "run"
        done = run_replay(trace, url, out, "--skip-preflight", "--limit", "6", "--model-map", "*=other-model")
    assert done.returncode in (0, 1), done.stderr[-2000:]
    assert {(r["recorded_model"], r["model"]) for r in results(out)} == {
        ("prod-a", "other-model"),
        ("prod-b", "other-model"),
    }


def test_a_mapped_name_the_target_does_not_serve_is_one_line(trace, tmp_path):
    from in_process_sim import sims_in_process

    with sims_in_process() as start:
        url = start("fast", models=SERVED).url
        line = refused("replay", str(trace), "--target", url, "-o", str(tmp_path / "run"),
                       "--model-map", "prod-a=sim-model", "--model-map", "prod-b=nope")  # fmt: skip
    assert "does not serve model 'nope' (8 requests of the trace ask for it" in line
    assert "pass --model-map prod-b=NAME" in line and not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("--model-map", "prod-a"), "--model-map 'prod-a': expected PROD=STAGING"),
        (("--model-map", "a=b", "--model-map", "a=c"), "--model-map: 'a' mapped twice"),
        (("--model-map", "*=b", "--model", "m"), "--model and --model-map: give one"),
    ],
)
def test_bad_spellings_of_the_flag_are_one_line(trace, tmp_path, args, expected):
    refused("replay", str(trace), "--target", "http://127.0.0.1:9", "-o", str(tmp_path / "run"), *args,
            expected=(expected,))  # fmt: skip
