"""A key the server echoes never comes out (issue 26, 3): escaped with JSON's `\\/` or straddling the
excerpt's cut, it is decoded, scrubbed, and only then cut, in results.parquet, run.json and the report
(terminal and HTML). A real server on 127.0.0.1 answers 401 with the key in its body (tests/hostile_target.py)."""

from __future__ import annotations

import subprocess

import pytest
from hostile_target import HostileTarget, echo_body
from live_processes import llmreplay_cmd
from replay_helpers import ROOT, content_record, replay_cmd, results, write_content_trace

from llmreplay.redaction import REDACTED, scrubbed_excerpt
from replayer.loop.client import ERROR_EXCERPT_BYTES

KEY = "tok/Q7mZ2pX9/vR4kL8nW3sJ6hT1/yB5cD0fG"  # no provider shape: only the known-value pass finds it


def leaks(text: str) -> list[str]:
    """Any 8 characters of the key, plain or JSON-escaped, found in `text`."""
    forms = (KEY, KEY.replace("/", "\\/"))
    return [form[i : i + 8] for form in forms for i in range(len(form) - 7) if form[i : i + 8] in text]


def test_an_escaped_key_and_one_straddling_the_cut_are_blanked_whole():
    body = echo_body(KEY, ERROR_EXCERPT_BYTES).decode()
    assert KEY not in body and leaks(body[:ERROR_EXCERPT_BYTES])  # escaped; the second copy is cut in two
    excerpt = scrubbed_excerpt(body, (KEY,), ERROR_EXCERPT_BYTES)
    assert leaks(excerpt) == [] and excerpt.count(REDACTED) == 2, excerpt[-200:]
    assert len(excerpt.encode()) <= ERROR_EXCERPT_BYTES
    assert scrubbed_excerpt("a%20key%3A%20" + KEY.replace("/", "%2F"), (KEY,)) == f"a key: {REDACTED}"


@pytest.mark.e2e
def test_a_replay_shows_no_part_of_an_echoed_key_anywhere(tmp_path):
    trace = write_content_trace(tmp_path / "t.parquet", [content_record(i, i * 100.0) for i in range(3)])
    out = tmp_path / "run"
    with HostileTarget(chat="echo_key") as target:
        args = ("--engine", "openai", "--skip-preflight", "--api-key", KEY)
        done = subprocess.run(
            replay_cmd(trace, target.url, out, *args), cwd=ROOT, capture_output=True, text=True, timeout=90
        )
    assert done.returncode in (0, 1), done.stderr[-2000:]
    rows = results(out)
    assert len(rows) == 3 and all(r["http_status"] == 401 for r in rows)
    for row in rows:
        assert leaks(row["error_detail"]) == [] and REDACTED in row["error_detail"], row["error_detail"][
            -300:
        ]
    assert leaks((out / "run.json").read_text()) == []
    assert leaks(done.stdout + done.stderr) == []
    html = tmp_path / "report.html"
    report = subprocess.run(
        llmreplay_cmd("report", str(out), "--html", str(html)),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert report.returncode in (0, 1), report.stderr[-2000:]
    assert leaks(report.stdout + report.stderr) == [] and leaks(html.read_text()) == []
