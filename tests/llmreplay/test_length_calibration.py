"""The length calibration's fitting as pure functions, with numbers checkable by hand; the calibrated
spec; the prompt fitter stepping by a calibrated rate; the probe-id helper."""

from __future__ import annotations

import numpy as np
import pytest

from llmreplay.calibrated_tokenizer import CalibratedTokenizer, Calibration, parse_calibrated_spec, probe_plan
from llmreplay.length_calibration import LengthSample, fit_lengths, least_squares
from llmreplay.probe_ids import probe_headers, probe_request_id
from replayer.plan.prompt_fit import PromptFitter
from replayer.results.prompt_lengths import length_errors


def sample(messages=1, tokens=0, chars=0, target=0, system=False, tools=False) -> LengthSample:
    return LengthSample(messages, system, tools, tokens, chars, target)


def test_leave_one_out_residuals_by_hand():
    # y = 1, 2, 4 at x = 0, 1, 2: slope 3/2, intercept 5/6; residuals 1/6, -1/3, 1/6;
    # leverages 5/6, 1/3, 5/6, so the leave-one-out residuals are 1, -1/2, 1
    samples = [sample(tokens=x, target=y) for x, y in ((0, 1), (1, 2), (2, 4))]
    coefficients, loo = least_squares(samples, ("per_request", "per_token"))
    assert coefficients["per_request"] == pytest.approx(5 / 6)
    assert coefficients["per_token"] == pytest.approx(3 / 2)
    assert loo == pytest.approx([1.0, -0.5, 1.0])


def test_a_term_no_sample_has_gets_zero():
    samples = [sample(tokens=x, target=2 * x + 3) for x in (1, 5, 9)]
    coefficients, loo = least_squares(samples, ("per_request", "per_system", "per_token"))
    assert coefficients == pytest.approx({"per_request": 3.0, "per_system": 0.0, "per_token": 2.0})
    assert loo == pytest.approx([0, 0, 0], abs=1e-9)


def _chars_world() -> list[LengthSample]:
    """A target counting 3 + 2 per further message + 5 with tools + chars / 4; words of 3 to 9 characters."""
    out = []
    for i, (messages, tokens) in enumerate((m, t) for m in (1, 2, 4) for t in (10, 40, 100, 300)):
        chars = tokens * (6 + (i % 5) - 2)  # 4 .. 8 characters a token, varying by probe
        tools = i % 4 == 1
        out.append(
            sample(messages, tokens, chars, 3 + 2 * (messages - 1) + 5 * tools + chars // 4, tools=tools)
        )
    return out


def test_a_target_counting_characters_is_fitted_on_characters():
    model = fit_lengths(_chars_world())
    assert model.text == "chars"
    assert model.per_char == pytest.approx(0.25, abs=1e-3)
    assert model.per_token == 0.0
    assert model.per_request == pytest.approx(3.0, abs=0.5)
    assert model.per_message == pytest.approx(2.0, abs=0.2)
    assert model.per_tools == pytest.approx(5.0, abs=0.5)
    assert model.error_p95 < 0.02 and model.samples == 12
    assert model.predict(3, False, False, 200, 1000) == pytest.approx(3 + 4 + 250, abs=1)


def test_a_target_counting_as_the_local_tokenizer_is_fitted_on_tokens():
    samples = [sample(m, t, t * (4 + t % 5), 7 + 4 * (m - 1) + t) for m in (1, 3) for t in (16, 48, 160, 512)]
    model = fit_lengths(samples)
    assert (model.text, model.per_token, model.per_request, model.per_message) == (
        "tokens",
        pytest.approx(1.0),
        pytest.approx(7.0),
        pytest.approx(4.0),
    )
    assert model.error_max == pytest.approx(0.0, abs=1e-9)


def test_the_calibrated_spec_round_trips_and_the_old_one_still_reads():
    model = Calibration(per_token=0.5, per_request=3.0, per_message=2.0, per_char=0.1, chars_per_token=5.0)
    tokenizer = CalibratedTokenizer(_Words(), model, None)
    again, local = parse_calibrated_spec(tokenizer.spec)
    assert local is None
    assert (again.per_token, again.per_request, again.per_message, again.per_char) == (0.5, 3.0, 2.0, 0.1)
    assert again.step_rate == pytest.approx(0.5 + 0.1 * 5.0)
    old, _ = parse_calibrated_spec("calibrated:1.0:4.0:2.0:")
    assert (old.per_token, old.per_request, old.per_message, old.per_char) == (1.0, 4.0, 2.0, 0.0)


class _Words:
    """A local tokenizer: one token per space-separated word."""

    id = "words"

    def count(self, text: str) -> int:
        return len(text.split())

    encode = decode = encode_batch = vocab_size = None


def test_the_fitter_steps_by_the_calibrated_rate():
    # the target counts 2 per local word + 3: a recorded 203 is 100 words, found in a few rounds
    counter = CalibratedTokenizer(_Words(), Calibration(per_token=2.0, per_request=3.0), None)
    fitter = PromptFitter(counter)
    spell = lambda correction: ([{"role": "user", "content": " w" * (150 + correction)}], None)  # noqa: E731
    messages, _ = fitter.fit_chat(203, (("user",), 0), spell)
    assert len(messages[0]["content"].split()) == 100
    assert fitter.stats.exact == 1 and fitter.stats.calls <= 3


def test_length_errors_by_hand():
    measured = np.array([100.0, 103.0, 50.0, 49.0])
    recorded = np.array([100.0, 100.0, 50.0, 50.0])
    report = length_errors(measured, recorded, ["a", "b", "b", "a"])
    assert report["requests"] == 4 and report["within_tolerance"] == 3
    assert report["error_max"] == pytest.approx(0.03)
    assert report["unverified"] == {
        "requests": 1,
        "by_layout": {"b": {"requests": 1, "of": 2, "error_p95": pytest.approx(0.0285), "error_max": 0.03}},
    }
    assert report["verified"] is False  # p95 of (0, 0.03, 0, 0.02) is 0.0285


def test_probe_ids_name_their_purpose_and_count():
    first = probe_request_id("unit-test")
    assert first == "llmreplay-probe-unit-test-1"
    assert probe_headers("unit-test") == {"X-Request-ID": "llmreplay-probe-unit-test-2"}
    assert probe_headers("preflight", 7) == {"X-Request-ID": "llmreplay-probe-preflight-7"}


def test_the_probe_plan_is_bounded_and_varied():
    plan = probe_plan()
    assert 16 <= len(plan) <= 32
    assert len({p.roles for p in plan}) >= 4 and any(p.tools for p in plan)
    assert len({p.tokens for p in plan}) >= 5
