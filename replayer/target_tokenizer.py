"""Which tokenizer spells the replay's prompts: the target's own when it can be asked, never a silent guess.

`auto` (the default) uses the engine's /tokenize (exact, template included); without one, a
calibration from `usage.prompt_tokens` of three probe requests (approximate). An explicit
`--tokenizer` is calibrated the same way. The choice and how it was made go to run.json.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from llmreplay.engine_tokenizer import CalibratedTokenizer, calibrate, detect
from llmreplay.errors import BadInput
from llmreplay.tokenizers import DEFAULT_TOKENIZER, load_tokenizer

AUTO = "auto"


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
    return TokenizerChoice(engine.spec, "engine", True, f"the target's own /tokenize ({engine.dialect.name})")


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
        calibration = calibrate(base_url, model, local, api_key) if model else None
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
        spec,
        "calibrated",
        False,
        f"prompts spelled for {name}{what}, lengths scaled by {calibration.per_token:.3f} target tokens per "
        f"token and {calibration.per_request:.0f} template tokens, from 3 probe requests: approximate",
        calibration.as_dict(),
    )
