"""A fleet of recorders behind a balancer with session affinity: three real `llmreplay record` processes in
front of one sim, each writing a sibling directory; inspect, anonymize and replay read them as one trace."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from llmreplay.trace_io import read_trace
from tests.e2e.recorder.test_recorder import client, start_recorder, stop

pytestmark = pytest.mark.e2e

RECORDERS, SESSIONS_EACH, TURNS = 3, 2, 3


def run_cli(*args: str, timeout_s: float = 120) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "llmreplay.cli", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)


def test_three_recorders_siblings_are_one_trace(processes, start_sim, tmp_path):
    url = start_sim("--profile", "fast", "--model", "sim-model")
    fleet = tmp_path / "fleet"
    recorders = [
        start_recorder(processes, tmp_path, url, fleet / f"recorder-{k}", name=f"recorder-{k}")
        for k in range(RECORDERS)
    ]  # one key file for the fleet: session and user hashes agree across its members
    for k, (base, _) in enumerate(recorders):  # the balancer pins a session to one recorder
        cli = client(base)
        for s in range(SESSIONS_EACH):
            messages = [{"role": "user", "content": f"recorder {k} session {s} opening"}]
            for turn in range(TURNS):
                answer = cli.chat.completions.create(
                    model="sim-model", messages=messages, max_tokens=4,
                    extra_headers={"X-Session-Id": f"conv-{k}-{s}"},
                )  # fmt: skip
                messages += [
                    {"role": "assistant", "content": answer.choices[0].message.content},
                    {"role": "user", "content": f"follow-up {turn}"},
                ]
    for _, proc in recorders:
        stop(proc)
    trace = read_trace(fleet)
    rows = trace.table.to_pylist()
    assert len(rows) == RECORDERS * SESSIONS_EACH * TURNS and len({r["request_id"] for r in rows}) == len(
        rows
    )
    sessions: dict[str, list[int]] = {}
    for r in rows:
        sessions.setdefault(r["session_id"], []).append(r["turn_index"])
    assert len(sessions) == RECORDERS * SESSIONS_EACH and all(
        sorted(t) == list(range(TURNS)) for t in sessions.values()
    )

    inspected = run_cli("inspect", str(fleet), "--json")
    assert inspected.returncode == 0, inspected.stderr
    assert json.loads(inspected.stdout)["requests"] == len(rows)
    anonymized = tmp_path / "anon.parquet"
    done = run_cli(
        "anonymize", str(fleet), "-o", str(anonymized), "--key-file", str(tmp_path / "anon.key"), "--verify"
    )
    assert done.returncode == 0, done.stderr
    replayed = run_cli(
        "replay", str(anonymized), "--target", url, "-o", str(tmp_path / "run"), "--speed", "4", "--quiet"
    )
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
