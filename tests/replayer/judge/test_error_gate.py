"""The error rate, its gate and the commonest messages, on a handful of rows."""

from __future__ import annotations

import numpy as np
import pytest

from replayer.judge.error_gate import (
    MESSAGE_CHARS,
    commonest_messages,
    engine_error_mask,
    error_counts,
    error_message,
    error_rate_check,
)

KINDS = np.array(
    [None, "http_5xx", "http_5xx", "shed_by_client", "cancelled", "http_4xx", None, None], dtype=object
)
SENT = np.array([True, True, True, False, True, True, True, True])
SUCCESS = np.array([True, False, False, False, False, False, True, True])


def test_client_side_endings_are_not_engine_errors():
    counts = error_counts(KINDS, SENT, SUCCESS)
    # counted: sent and not ended by the client (the shed one was not sent, the cancelled one is ours)
    assert counts["counted"] == 6 and counts["engine_errors"] == 3 and counts["error_rate"] == 0.5
    assert counts["by_kind"] == {"http_5xx": 2, "shed_by_client": 1, "cancelled": 1, "http_4xx": 1}
    assert counts["client_side_kinds"] == ["cancelled", "shed_by_client"]
    assert engine_error_mask(KINDS, SENT, SUCCESS).tolist() == [
        False,
        True,
        True,
        False,
        False,
        True,
        False,
        False,
    ]


@pytest.mark.parametrize(("rate", "status"), [(0.01, "ok"), (0.0101, "fail"), (None, "ok")])
def test_error_rate_limit_is_inclusive(rate, status):
    counts = {"error_rate": rate, "engine_errors": 1, "counted": 99, "by_kind": {"http_5xx": 1}}
    assert error_rate_check("run", counts, 0.01)["status"] == status


def test_error_rate_check_names_the_kinds():
    check = error_rate_check("run", error_counts(KINDS, SENT, SUCCESS), 0.01)
    assert check["summary"] == "error rate 50.0% > 1% (http_5xx 2, http_4xx 1)"
    assert check["detail"] == "3 of 6 requests failed (http_5xx 2, http_4xx 1)"


@pytest.mark.parametrize(
    ("detail", "message"),
    [
        ('{"error": {"message": "model overloaded", "type": "server_error"}}', "model overloaded"),
        ('{"error": "bad key"}', "bad key"),
        ('{"message": "rate limited"}', "rate limited"),
        (
            '{"detail": [{"loc": ["body", "n"], "msg": "too big"}]}',
            '[{"loc": ["body", "n"], "msg": "too big"}]',
        ),
        ("<html>\n  <b>502 Bad Gateway</b>\n</html>", "<html> <b>502 Bad Gateway</b> </html>"),
        ("stream ended without [DONE]", "stream ended without [DONE]"),
        (None, ""),
    ],
)
def test_error_message_is_the_readable_part(detail, message):
    assert error_message(detail) == message


def test_long_messages_are_cut():
    assert len(error_message("x" * 5000)) == MESSAGE_CHARS and error_message("x" * 5000).endswith("…")


def test_commonest_messages_group_bodies_that_differ_in_numbers():
    kinds = np.array(["http_5xx", "http_5xx", "http_4xx", "http_5xx", "timeout"], dtype=object)
    status = np.array([500, 500, 400, 503, np.nan])
    detail = np.array(
        [
            '{"error": {"message": "queue full (request 17)"}}',
            '{"error": {"message": "queue full (request 912)"}}',
            '{"error": {"message": "n must be 1"}}',
            '{"error": {"message": "queue full (request 5)"}}',
            None,
        ],
        dtype=object,
    )
    top = commonest_messages(kinds, status, detail, np.ones(5, dtype=bool))
    assert top == [
        {"kind": "http_5xx", "status": 500, "message": "queue full (request 17)", "count": 2},
        {"kind": "http_4xx", "status": 400, "message": "n must be 1", "count": 1},
        {"kind": "http_5xx", "status": 503, "message": "queue full (request 5)", "count": 1},
        {"kind": "timeout", "status": None, "message": "", "count": 1},
    ]
    assert commonest_messages(kinds, status, detail, np.ones(5, dtype=bool), limit=1)[0]["count"] == 2


def test_the_message_of_a_json_body_cut_at_2_kb_is_found():
    cut = '{"error": {"message": "context length 40960 exceeded", "trace": "' + "frame " * 400
    assert error_message(cut) == "context length 40960 exceeded"
