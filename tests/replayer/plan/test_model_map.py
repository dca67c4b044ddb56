"""--model-map: which model a row is sent to (replayer.plan.request_builder.sent_model) and the flag's
spellings (replayer.config.parse_model_map)."""

from __future__ import annotations

import pytest

from llmreplay.errors import BadInput
from replayer.config import parse_model_map
from replayer.plan.request_builder import sent_model

MAP = (("prod-a", "stage-a"), ("*", "stage-any"))


def test_the_map_then_its_star_then_the_recorded_name_then_the_targets_first():
    assert sent_model("prod-a", None, MAP, "first") == "stage-a"
    assert sent_model("prod-b", None, MAP, "first") == "stage-any"  # `*`: every other model
    assert sent_model(None, None, MAP, "first") == "stage-any"  # rows without a model too
    assert sent_model("prod-b", None, (("prod-a", "stage-a"),), "first") == "prod-b"
    assert sent_model(None, None, (), "first") == "first"
    assert sent_model("prod-a", "forced", MAP, "first") == "forced"  # --model wins


def test_spellings_that_parse():
    assert parse_model_map(("prod-a=stage-a", " * = stage-any "), "--model-map") == MAP
    assert parse_model_map(("a=b", "a=b"), "--model-map") == (("a", "b"),)  # said twice, the same


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("prod-a", "expected PROD=STAGING"),
        ("=stage", "expected PROD=STAGING"),
        ("prod=", "expected PROD=STAGING"),
        ("prod=a=b", "expected PROD=STAGING"),
        ("prod=*", "expected PROD=STAGING"),
    ],
)
def test_bad_spellings_are_one_line(value, message):
    with pytest.raises(BadInput, match=message) as raised:
        parse_model_map((value,), "--model-map")
    assert "\n" not in str(raised.value) and str(raised.value).startswith(f"--model-map {value!r}")


def test_one_model_mapped_two_ways_is_refused():
    with pytest.raises(BadInput, match="'a' mapped twice \\('b' and 'c'\\)"):
        parse_model_map(("a=b", "a=c"), "--model-map")
