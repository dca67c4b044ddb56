"""The recorder's last words: counts in words, and `ok` (the exit status) false whenever something was
left unfiled, dropped or rejected."""

from __future__ import annotations

from recorder.stop_report import StopReport

CLEAN = dict(seen=1200, journaled=1200, dropped=0, in_flight=0, passed_through=3, converter_restarts=0)


def report(**changes) -> StopReport:
    return StopReport(**{**CLEAN, "filed": True, "rows": 1200, "rejected": 0, **changes})


def test_a_clean_stop_is_ok_and_says_everything_is_filed():
    text = str(report())
    assert report().ok
    assert text == (
        "1,200 LLM requests seen, 1,200 journaled; 3 other requests passed through unrecorded. "
        "Every journaled request is filed in Parquet."
    )


def test_in_flight_requests_and_converter_restarts_are_said_without_failing_the_stop():
    stop = report(in_flight=2, converter_restarts=1)
    assert stop.ok
    assert "2 in flight at stop (recorded as shutdown)" in str(
        stop
    ) and "converter restarted 1 time(s)" in str(stop)


def test_unfiled_dropped_or_rejected_captures_fail_the_stop_and_say_where_they_are():
    unfiled, dropped, rejected = (
        report(filed=False),
        report(dropped=5, dropped_why="disk full"),
        report(rejected=4),
    )
    assert not (unfiled.ok or dropped.ok or rejected.ok)
    assert "NOT ALL FILED" in str(unfiled) and "the next start on this directory files them" in str(unfiled)
    assert "5 requests were NOT recorded (disk full)." in str(dropped)
    assert "4 requests could not be converted" in str(rejected)
    assert "journal impaired" in str(report(dropped=1))  # no reason known
