"""Which tokenizer spells the replay's prompts: the target's own when it can be asked, never a silent guess.

`auto` (the default) uses the engine's /tokenize (exact, template included); without one, a
calibration from `usage.prompt_tokens` of a probe set (llmreplay.calibrated_tokenizer.calibrate; approximate,
its error on the probes stated, and every request's measured after the run). An explicit
`--tokenizer` is calibrated the same way. The choice and how it was made go to run.json.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from llmreplay.calibrated_tokenizer import CalibratedTokenizer, calibrate
from llmreplay.engine_tokenizer import detect
from llmreplay.errors import BadInput
from llmreplay.exact_text import ExactText
from llmreplay.tokenizers import DEFAULT_TOKENIZER, load_tokenizer

AUTO = "auto"
LENGTH_TOLERANCE = 0.02  # a replayed prompt within this share of the recorded length counts as verified


@dataclass(frozen=True)
class TokenizerChoice:
    spec: str  # what the builder loads (llmreplay.tokenizers.load_tokenizer)
    source: str  # "engine", "calibrated" or "unverified"
    exact: bool  # the target itself counts each synthesized prompt before the clock
    note: str
    calibration: dict | None = None

    def as_dict(self) -> dict:
        return asdict(self)


def unprobed_choice(flag: str | None) -> TokenizerChoice:
    """--skip-preflight: the flag's tokenizer (or the default), said to be unchecked on the target."""
    name = DEFAULT_TOKENIZER if flag in (None, AUTO) else flag
    return TokenizerChoice(
        name, "unverified", False, f"prompts spelled for {name}, not checked (--skip-preflight)"
    )


def engine_tokenizer_choice(
    base_url: str, model: str | None, api_key: str | None = None
) -> TokenizerChoice | None:
    """The target's own tokenizer when it has /tokenize, else None (nothing is probed beyond that)."""
    engine = detect(base_url, model, api_key) if model else None
    if engine is None:
        return None
    return TokenizerChoice(engine.spec, "engine", True, f"the target's own /tokenize ({engine.spelling.spec_name})")


def choose_tokenizer(
    flag: str | None, base_url: str, model: str | None, api_key: str | None = None
) -> TokenizerChoice:
    """The engine's tokenizer for `auto` when it has /tokenize; otherwise a calibrated local one."""
    local_spec = None if flag in (None, AUTO) else flag
    found = engine_tokenizer_choice(base_url, model, api_key) if local_spec is None else None
    if found is not None:
        return found
    name = local_spec or DEFAULT_TOKENIZER
    local = load_tokenizer(local_spec)
    try:
        calibration = calibrate(base_url, model, local, ExactText(local).text, api_key) if model else None
    except BadInput as exc:
        calibration, why = None, str(exc)
    else:
        why = "no model to probe"
    if calibration is None:
        return TokenizerChoice(
            name, "unverified", False, f"prompts spelled for {name}, not checked on the target ({why})"
        )
    spec = CalibratedTokenizer(local, calibration, local_spec).spec
    what = "" if local_spec else " (the target has no /tokenize)"
    return TokenizerChoice(
        spec, "calibrated", False, calibrated_note(name + what, calibration), calibration.as_dict()
    )


def calibrated_note(spelled_for: str, calibration) -> str:
    """One line: what the calibration fitted, from how many probes, and how well it predicted them."""
    cal = calibration
    text = {
        "tokens": f"{cal.per_token:.3f} target tokens per token",
        "chars": f"{cal.per_char:.3f} target tokens per character",
        "tokens+chars": f"{cal.per_token:.3f} per token + {cal.per_char:.3f} per character",
    }[cal.text]
    error = "" if cal.error_p95 is None else f", probe error p95 {cal.error_p95:.1%}"
    verdict = (
        f"UNVERIFIED: beyond {LENGTH_TOLERANCE:.0%}"
        if cal.error_p95 is None or cal.error_p95 > LENGTH_TOLERANCE
        else "approximate"
    )
    return (
        f"prompts spelled for {spelled_for}, lengths fitted to the target's usage from {cal.samples} probe "
        f"requests ({text}, {cal.per_request:.1f} template tokens + {cal.per_message:.1f} per further message"
        f"{error}): {verdict}; measured per request after the run"
    )
