"""Which tokenizer spells the replay's prompts: the target's own when it can be asked, never a silent guess.

`--tokenizer auto` (the default) asks the engine (`/tokenize`); an explicit `--tokenizer` is used
as given and checked against the engine when it answers. The choice, and how it was made, goes
to the terminal and to run.json.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from llmreplay.engine_tokenizer import EngineTokenizer, detect_dialect
from llmreplay.tokenizers import DEFAULT_TOKENIZER, load_tokenizer

AUTO = "auto"
_CHECK_TEXT = " the operator restarted the gateway after midnight and replayed the traffic"


@dataclass(frozen=True)
class TokenizerChoice:
    spec: str  # what the builder loads (llmreplay.tokenizers.load_tokenizer)
    source: str  # "engine", "flag" or "default"
    target_verified: bool  # the target counts prompts as this tokenizer does
    note: str

    def as_dict(self) -> dict:
        return asdict(self)


def choose_tokenizer(
    flag: str | None, base_url: str, model: str | None, api_key: str | None = None
) -> TokenizerChoice:
    """The engine's tokenizer for `auto`; the flag's otherwise, compared with the engine's counts."""
    dialect = detect_dialect(base_url, model, api_key) if model else None
    engine = EngineTokenizer(base_url, model, dialect, api_key) if dialect else None
    if flag in (None, AUTO):
        if engine is not None:
            return TokenizerChoice(engine.spec, "engine", True, f"the target's own /tokenize ({dialect} dialect)")
        return TokenizerChoice(
            DEFAULT_TOKENIZER,
            "default",
            False,
            f"the target has no /tokenize: prompts are spelled for {DEFAULT_TOKENIZER}, which may not be "
            "the target's; pass --tokenizer with the served model's tokenizer.json",
        )
    if engine is None:
        return TokenizerChoice(flag, "flag", False, f"--tokenizer {flag}; the target has no /tokenize to check it")
    local, remote = load_tokenizer(flag).count(_CHECK_TEXT), engine.count(_CHECK_TEXT)
    if local == remote:
        return TokenizerChoice(flag, "flag", True, f"--tokenizer {flag}; the target counts a probe text alike")
    return TokenizerChoice(
        flag,
        "flag",
        False,
        f"--tokenizer {flag} counts a probe text as {local} tokens, the target as {remote}: lengths will "
        "differ (leave --tokenizer at auto to use the target's own)",
    )
