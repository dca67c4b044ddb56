"""A 200 answer carrying an error object is classified by one rule on both sides (recorder and replayer)."""

from __future__ import annotations

import orjson
import pytest

from llmreplay.wire.response import summarize_json
from recorder.capture import Capture
from recorder.record_builder import classify_error
from recorder.request_shape import RequestShape
from replayer.loop.client import Outcome, _read_whole

BODIES = [
    {"error": {"message": "model overloaded", "type": "server_error"}},
    {"error": "plain string error"},
    {"object": "error", "message": "x", "error": {"code": 500}},
    {"choices": [{"message": {"content": "ok"}, "finish_reason": "stop"}], "usage": {"prompt_tokens": 1}},
    {"choices": [{"message": {"content": "ok"}, "finish_reason": "stop"}], "error": None},
    {"data": [{"embedding": [0.1]}], "error": None},
]


@pytest.mark.parametrize("body", BODIES, ids=range(len(BODIES)))
def test_recorder_and_replayer_agree_on_a_200_json_body(body):
    raw = orjson.dumps(body)
    cap = Capture("r", "chat_completions", 0, 0, 1 << 20)
    cap.status, cap.content_type, cap.outcome = 200, "application/json", "response"
    recorded = classify_error(cap, RequestShape(), summarize_json(raw, "chat_completions"))
    outcome = Outcome(0)
    _read_whole(raw, "application/json", outcome, asked_stream=False)
    assert recorded == outcome.error_kind
    assert recorded == ("stream_error" if body.get("error") is not None else None)
