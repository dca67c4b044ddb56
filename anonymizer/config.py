"""Anonymization settings, each declared once on its field; `anonymize`'s flags are built from them.

Light (no pyarrow, no tokenizer library): `llmreplay anonymize --help` imports it, not the pipeline.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from llmreplay.options import as_path, force_field, option
from llmreplay.tokenizers import DEFAULT_TOKENIZER

MODES = ("preserve", "session", "none")  # prefix sharing kept: all, within sessions, none
DEFAULT_NONCE_TOKENS = 8
DEFAULT_CACHE_BYTES = 128 * 1024 * 1024  # the history cache of replaced messages


@dataclass(frozen=True, slots=True)
class AnonymizeConfig:
    input_path: Path
    output_path: Path = option(
        flags=("-o", "--out"),
        required=True,
        metavar="FILE",
        parse=as_path,
        help="Anonymized trace file (.parquet).",
    )
    tokenizer: str | None = option(
        None,
        show=f"the trace's, else {DEFAULT_TOKENIZER}",
        help="Tokenizer for exact lengths.",
    )  # None: the trace's own tokenizer when loadable, else the default
    key_file: Path | None = option(
        None,
        metavar="FILE",
        parse=as_path,
        show="OUT's name + .anonymization.key in the current directory",
        help="Secret key file (mode 0600; 64+ hex digits or 32+ bytes); created if missing.",
    )
    prefix_sharing: str = option(
        "preserve", choices=MODES, help="Keep all sharing, only within sessions, or none."
    )
    nonce_tokens: int = option(
        DEFAULT_NONCE_TOKENS, type=int, help="Tokens of nonce in session/none modes, at least 1."
    )
    force: bool = force_field()
    batch_rows: int = 1024
    cache_bytes: int = DEFAULT_CACHE_BYTES
    keep_meta: tuple[str, ...] = option(
        (),
        multiple=True,
        metavar="KEY",
        help="Carry this TraceMeta.extra key (or 'source') over; repeatable.",
    )
    check_counts: bool = True  # re-encode every generated text to prove its count
